"""Find, load and choose device profiles."""

from __future__ import annotations

import os
from pathlib import Path

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.host import HostFacts, HostProbe
from edge_sdk.core.yaml_model import load_yaml_model

from .model import DeviceProfile
from .route import choose_route

PROFILE_DIR_ENV = "EDGE_SDK_PROFILE_DIR"


def _is_plain_stem(name: str) -> bool:
    """True for a name that can only mean a file directly in the profile folder: no path separator, no
    `.`/`..` or hidden name, no NUL, not absolute (so `../pipelines/demo` or `/etc/x` never leave the folder)."""
    return bool(name) and "/" not in name and "\\" not in name and "\0" not in name and not name.startswith(".")


def default_profile_dir() -> Path:
    """`$EDGE_SDK_PROFILE_DIR`, else the `device_profiles/` shipped with the SDK."""
    if os.environ.get(PROFILE_DIR_ENV):
        return Path(os.environ[PROFILE_DIR_ENV])
    packaged = Path(__file__).resolve().parent.parent / "device_profiles"
    if packaged.is_dir():  # installed wheel
        return packaged
    return Path(__file__).resolve().parents[2] / "device_profiles"  # source checkout


class ProfileCatalog:
    """All profiles in one directory, validated when loaded."""

    def __init__(self, directory: Path | None = None):
        self.directory = directory or default_profile_dir()

    def names(self) -> list[str]:
        return sorted(path.stem for path in self.directory.glob("*.yaml"))

    def load(self, name: str, *, as_written: bool = False, announce: bool = True) -> DeviceProfile:
        """The profile `<directory>/<name>.yaml` with the route it takes on this host (route.py), or
        `as_written`; a name that is not a plain file stem is refused before any read."""
        if not _is_plain_stem(name):
            raise ConfigError(
                f"expected a profile name (a file stem in {self.directory}, without '/', '..' or a leading '.', "
                f"e.g. x86-cpu), got {name[:80]!r}"
            )
        path = self.directory / f"{name}.yaml"
        if not path.is_file():
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown profile '{name}'; known profiles: {known}")
        profile = load_yaml_model(path, DeviceProfile)
        if profile.name != name:
            raise ConfigError(f"{path}: key 'name': expected '{name}' (the file name), got '{profile.name}'")
        return profile if as_written else choose_route(profile, announce=announce)[0]

    def load_all(self, *, as_written: bool = False) -> list[DeviceProfile]:
        return [self.load(name, as_written=as_written, announce=False) for name in self.names()]

    def detect(self, facts: HostFacts | None = None, *, announce: bool = True) -> DeviceProfile:
        """The highest-priority profile whose detection rule matches the host."""
        facts = facts or HostProbe().facts()
        matching = [p for p in self.load_all(as_written=True) if p.detect.matches(facts)]
        if not matching:
            raise ConfigError(
                f"no profile in {self.directory} matches this host (arch {facts.arch}); "
                "pass --profile NAME or add a profile"
            )
        return choose_route(max(matching, key=lambda p: p.priority), announce=announce)[0]

    def resolve(self, name: str | None, facts: HostFacts | None = None) -> DeviceProfile:
        """The named profile, or the detected one when no name is given."""
        return self.load(name) if name else self.detect(facts)


def detect_profile(directory: Path | None = None) -> DeviceProfile:
    """The profile that fits this host best (the highest priority whose detection rule matches), from
    `directory` or the shipped `device_profiles/`."""
    return ProfileCatalog(directory).detect()


def load_profile(name: str, directory: Path | None = None) -> DeviceProfile:
    """The profile `name` (e.g. "x86-cpu"), from `directory` or the shipped `device_profiles/`."""
    return ProfileCatalog(directory).load(name)
