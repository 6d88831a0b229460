"""Device profiles: what a box is and how to build and run models on it."""

from .catalog import ProfileCatalog, default_profile_dir
from .model import DetectionRule, DeviceProfile

__all__ = ["DetectionRule", "DeviceProfile", "ProfileCatalog", "default_profile_dir"]
