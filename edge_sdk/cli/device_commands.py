"""`edge-sdk device provision | status` (being written)."""

from __future__ import annotations

from .device_group import device

__all__ = ["device"]
