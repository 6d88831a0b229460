"""`edge-sdk device status`: what provisioning installed on a box, whether its services run, and where its
enrollment stands (the enrollment state file, /var/lib/edge-sdk/enrollment.json)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

from edge_sdk.core.errors import EdgeSDKError

from .agent_config import load_agent_config
from .provision_config import (
    AGENT_CONFIG,
    AGENT_UNIT,
    CONFIG_DIR,
    ENGINE_CACHE_DIR,
    ENROLLMENT_STATE,
    PIPELINES_DIR,
    SERVICE_USER,
    STATE_DIR,
    STORE_DIR,
    TLS_DIR,
    UNIT_DIR,
    on_box,
)
from .provision_steps import is_real, systemd_running


def box_status(root: Path) -> dict[str, Any]:
    """The box below `root` as plain data (what `--json` prints)."""
    real = is_real(root)
    enabled = _enabled_units(root)
    can_tell = real and systemd_running()
    units: dict[str, dict[str, Any]] = {}
    for name in sorted({AGENT_UNIT, "edge-sdk-pipeline@.service", *enabled}):
        template = name if "@." in name or "@" not in name else name.split("@")[0] + "@.service"
        units[name] = {
            "installed": on_box(root, UNIT_DIR / template).is_file(),
            "enabled": name in enabled,
            "active": _is_active(name) if can_tell and "@." not in name else None,
        }
    if can_tell:
        running = "systemd is running: `active` is what systemctl is-active says"
    elif real:
        running = "cannot tell what runs: systemd is not running here (not PID 1)"
    else:
        running = "cannot tell what runs: a folder given with --root"
    return {
        "root": str(root),
        "folders": {
            str(path): on_box(root, path).is_dir()
            for path in (CONFIG_DIR, TLS_DIR, PIPELINES_DIR, STATE_DIR, STORE_DIR, ENGINE_CACHE_DIR)
        },
        "user": _user(root),
        "agent_config": _agent_config(root),
        "units": units,
        "running": running,
        "enrollment": _enrollment(root),
    }


def _enabled_units(root: Path) -> set[str]:
    """edge-sdk units linked from any TARGET.wants/ folder (what `systemctl enable` made)."""
    unit_dir = on_box(root, UNIT_DIR)
    return {link.name for link in unit_dir.glob("*.wants/edge-sdk-*") if link.is_symlink()}


def _is_active(unit: str) -> str:
    try:
        done = subprocess.run(["systemctl", "is-active", unit], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return done.stdout.strip() or "unknown"


def _user(root: Path) -> dict[str, Any]:
    """Whether the service user exists: in the box's user database, or in ROOT/etc/passwd under --root."""
    if is_real(root):
        import pwd

        try:
            pwd.getpwnam(SERVICE_USER)
            return {"name": SERVICE_USER, "exists": True}
        except KeyError:
            return {"name": SERVICE_USER, "exists": False}
    passwd = on_box(root, PurePosixPath("/etc/passwd"))
    lines = passwd.read_text(encoding="utf-8", errors="replace").splitlines() if passwd.is_file() else []
    return {"name": SERVICE_USER, "exists": any(line.split(":")[0] == SERVICE_USER for line in lines)}


def _agent_config(root: Path) -> dict[str, Any]:
    path = on_box(root, AGENT_CONFIG)
    if not path.is_file():
        return {"path": str(AGENT_CONFIG), "present": False, "valid": False, "error": None, "device_id": None}
    try:
        config = load_agent_config(path)
    except EdgeSDKError as exc:
        return {"path": str(AGENT_CONFIG), "present": True, "valid": False, "error": str(exc), "device_id": None}
    return {
        "path": str(AGENT_CONFIG),
        "present": True,
        "valid": True,
        "error": None,
        "device_id": config.device_id,
        "profile": config.profile,
        "broker": f"{config.broker.host}:{config.broker.port}",
    }


def _enrollment(root: Path) -> dict[str, Any] | None:
    path = on_box(root, ENROLLMENT_STATE)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"state": "unreadable", "last_error": f"{ENROLLMENT_STATE}: {exc}"}
    return (
        data if isinstance(data, dict) else {"state": "unreadable", "last_error": f"{ENROLLMENT_STATE}: not an object"}
    )
