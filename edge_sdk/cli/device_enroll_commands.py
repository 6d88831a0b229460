"""`edge-sdk device enroll` (being written)."""

from __future__ import annotations

from .device_group import device

__all__ = ["device"]
