"""`edge-sdk device provision`: the plan of steps (provision_steps.py) that makes a box a fleet member, from
provision.yaml (provision_config.py): the user, the folders, the TLS files, agent.yaml (loaded back with the
agent's own loader), the unit files and the links that enable them.

The whole plan is made, and every source file read and agent.yaml validated, before anything is
changed; a second run finds every step done and changes nothing.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN
from edge_sdk.profiles.catalog import ProfileCatalog

from .agent_config import load_agent_config
from .provision_config import (
    AGENT_CONFIG,
    AGENT_UNIT,
    CONFIG_DIR,
    ENGINE_CACHE_DIR,
    ENROLL_UNIT,
    PIPELINE_UNIT,
    PIPELINES_DIR,
    SERVICE_USER,
    SPOOL_DIR,
    STATE_DIR,
    STORE_DIR,
    TLS_DIR,
    TRUSTED_KEYS_DIR,
    UNIT_DIR,
    ProvisionConfig,
    pipeline_unit,
)
from .provision_steps import (
    CreateUser,
    EnableUnit,
    MakeFolder,
    Outcome,
    OwnedPath,
    StartUnits,
    Step,
    WriteFile,
    is_real,
)
from .unit_files import default_units_dir, read_unit, render_unit, wanted_by

ProfileChooser = Callable[[str], str]


def detect_or_check_profile(name: str, catalog: ProfileCatalog | None = None) -> str:
    """`auto`: the profile detected on this host (as `edge-sdk profiles detect`); else the name, if it exists."""
    catalog = catalog or ProfileCatalog()
    if name == "auto":
        return catalog.detect(announce=False).name
    return catalog.load(name, as_written=True, announce=False).name


def default_executable() -> PurePosixPath | None:
    """The `edge-sdk` beside the running Python (a venv's or /usr/local/bin), if there is one."""
    candidate = Path(sys.executable).parent / "edge-sdk"
    return PurePosixPath(candidate) if candidate.is_file() else None


def plan(
    config: ProvisionConfig,
    *,
    choose_profile: ProfileChooser = detect_or_check_profile,
    units_dir: Path | None = None,
) -> list[Step]:
    """Every step, in order; reads the source files and validates agent.yaml, changes nothing."""
    units_dir = units_dir or default_units_dir()
    profile = choose_profile(config.profile)
    steps: list[Step] = [CreateUser()]
    steps += [MakeFolder(owned) for owned in _folders()]
    steps += list(_tls_files(config))
    for key in config.trusted_keys:
        steps.append(_copy(key, OwnedPath(TRUSTED_KEYS_DIR / key.name, 0o644)))
    for pipeline in config.pipelines:
        if pipeline.file is not None:
            steps.append(_copy(pipeline.file, OwnedPath(PIPELINES_DIR / f"{pipeline.name}.yaml", 0o644)))
    steps += list(_configs(config, profile))
    executable = config.executable or default_executable()
    enabled = [ENROLL_UNIT, AGENT_UNIT]
    enabled += [pipeline_unit(p.name) for p in config.pipelines]
    for unit in (ENROLL_UNIT, AGENT_UNIT, PIPELINE_UNIT):
        text = render_unit(read_unit(units_dir, unit), executable)
        steps.append(WriteFile(OwnedPath(UNIT_DIR / unit, 0o644), text.encode(), f"from {units_dir / unit}"))
    for unit in enabled:
        template = unit if unit in (ENROLL_UNIT, AGENT_UNIT) else PIPELINE_UNIT
        targets = wanted_by(read_unit(units_dir, template))
        if not targets:
            raise ConfigError(f"{units_dir / template}: expected WantedBy= in its [Install] section, found none")
        steps += [EnableUnit(unit, UNIT_DIR / template, target) for target in targets]
    started = tuple(unit for unit in enabled if unit != ENROLL_UNIT)  # the agent's start pulls enrollment in
    steps.append(StartUnits(started))
    return steps


def apply(steps: list[Step], root: Path) -> Iterator[tuple[Step, Outcome]]:
    """Apply the steps in order below `root`, yielding each one's outcome; stops at the first failure."""
    if is_real(root) and os.geteuid() != 0:
        raise ConfigError(
            "provisioning this box writes /etc and /var/lib and creates a user: run it as root (sudo), "
            "or give --root DIR to provision a folder"
        )
    for step in steps:
        yield step, step.apply(root)


def _folders() -> list[OwnedPath]:
    state = {"user": SERVICE_USER, "group": SERVICE_USER}
    return [
        OwnedPath(CONFIG_DIR, 0o750, group=SERVICE_USER),
        OwnedPath(PIPELINES_DIR, 0o750, group=SERVICE_USER),
        OwnedPath(TRUSTED_KEYS_DIR, 0o750, group=SERVICE_USER),
        OwnedPath(TLS_DIR, 0o750, group=SERVICE_USER),
        OwnedPath(STATE_DIR, 0o750, **state),
        OwnedPath(STORE_DIR, 0o750, **state),
        OwnedPath(ENGINE_CACHE_DIR, 0o750, **state),
        OwnedPath(SPOOL_DIR, 0o750, **state),
        OwnedPath(UNIT_DIR, 0o755),
    ]


def _copy(source: Path, owned: OwnedPath) -> WriteFile:
    try:
        content = source.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read ({exc.strerror or exc})") from None
    return WriteFile(owned, content, f"from {source}")


def _tls_files(config: ProvisionConfig) -> Iterator[WriteFile]:
    tls = config.tls
    yield _copy(tls.ca, OwnedPath(TLS_DIR / "ca.pem", 0o644))
    if tls.cert is not None and tls.key is not None:
        yield _copy(tls.cert, OwnedPath(TLS_DIR / "device.pem", 0o644))
        yield _copy(tls.key, OwnedPath(TLS_DIR / "device.key", 0o640, group=SERVICE_USER))
    if config.claim is not None:
        yield _copy(config.claim.cert, OwnedPath(TLS_DIR / "claim.pem", 0o644))
        yield _copy(config.claim.key, OwnedPath(TLS_DIR / "claim.key", 0o640, group=SERVICE_USER))


def agent_config_data(config: ProvisionConfig, device_id: str, profile: str) -> dict[str, Any]:
    """agent.yaml for this box: the shared layout's paths, the device certificate, a persistent session, a spool."""
    return {
        "device_id": device_id,
        "profile": profile,
        "labels": dict(config.labels),
        "store_dir": str(STORE_DIR),
        "trusted_keys_dir": str(TRUSTED_KEYS_DIR),
        "engine_cache_dir": str(ENGINE_CACHE_DIR),
        "keep_versions": config.keep_versions,
        "broker": {
            "host": config.broker.host,
            "port": config.broker.port,
            "client_id": device_id,
            "clean_start": False,
            "session_expiry_s": 604800,
            "tls": {
                "ca_file": str(TLS_DIR / "ca.pem"),
                "cert_file": str(TLS_DIR / "device.pem"),
                "key_file": str(TLS_DIR / "device.key"),
            },
            "spool": {"path": str(SPOOL_DIR / "agent.db")},
        },
    }


def _configs(config: ProvisionConfig, profile: str) -> Iterator[WriteFile]:
    header = "# Written by `edge-sdk device provision` from provision.yaml; a new run rewrites it.\n"
    device_id = config.device_id or host_device_id()
    text = header + yaml.safe_dump(agent_config_data(config, device_id, profile), sort_keys=False)
    _validate_agent_config(text)
    yield WriteFile(OwnedPath(AGENT_CONFIG, 0o640, group=SERVICE_USER), text.encode())


def host_device_id() -> str:
    """The device id of a box that enrolls by claim without one in provision.yaml: its host name."""
    name = socket.gethostname().split(".")[0]
    if not re.fullmatch(IDENTIFIER_PATTERN, name):
        raise ConfigError(f"the host name {name!r} is not a device id ({IDENTIFIER_PATTERN}): give device_id")
    return name


def _validate_agent_config(text: str) -> None:
    """agent.yaml as the agent will read it: the SDK's own loader, on a copy in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="edge-sdk-provision-") as folder:
        path = Path(folder) / "agent.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            load_agent_config(path)
        except ConfigError as exc:
            raise ConfigError(f"the agent.yaml provisioning would write is not valid: {exc}") from None
