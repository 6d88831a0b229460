"""Which devices a rollout or a dashboard filter means: `device=ID`, `profile=NAME`, `label.KEY=VALUE`."""

from __future__ import annotations

from collections.abc import Iterable

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.wire.manifest import TargetSelector


def parse_selector(entries: Iterable[str], what: str = "--select") -> TargetSelector | None:
    """device=ID | profile=NAME | label.KEY=VALUE entries (`fleet deploy --select`, repeatable; device and
    profile may repeat, comma-separated values too) -> the selector, None for no entries; `what` names the
    option in errors."""
    entries = tuple(entries)
    if not entries:
        return None
    devices: list[str] = []
    profiles: list[str] = []
    labels: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ConfigError(f"{what}: expected KEY=VALUE (device=, profile=, label.NAME=), got {entry!r}")
        if key in ("device", "devices"):
            devices.extend(v for v in value.split(",") if v)
        elif key in ("profile", "profiles"):
            profiles.extend(v for v in value.split(",") if v)
        elif key.startswith("label.") and len(key) > len("label."):
            labels[key[len("label.") :]] = value
        else:
            raise ConfigError(f"{what}: expected device=, profile= or label.NAME=, got {key!r}")
    try:
        return TargetSelector(device_ids=devices, profiles=profiles, labels=labels)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None
