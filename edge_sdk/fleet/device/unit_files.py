"""The systemd unit files provisioning installs: found in the wheel (edge_sdk/fleet/device/units, put there
from deploy/systemd by pyproject.toml) or in a source checkout's deploy/systemd; rendered for this box's
`edge-sdk`; and what `systemctl enable` links them from (their [Install] section)."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from edge_sdk.core.errors import ConfigError

_EXEC_EDGE_SDK = re.compile(r"^(Exec[A-Za-z]*=[-@:+!|]*)(\S*/)?edge-sdk(?=\s|$)", re.M)


def default_units_dir() -> Path:
    """The units in an installed wheel, else the source checkout's deploy/systemd."""
    packaged = Path(__file__).resolve().parent / "units"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "deploy" / "systemd"


def read_unit(units_dir: Path, name: str) -> str:
    path = units_dir / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        raise ConfigError(f"{path}: expected the unit file {name} (deploy/systemd in the SDK), found none") from None


def render_unit(text: str, executable: PurePosixPath | None) -> str:
    """The unit with its `Exec...=` lines running `executable` instead of the `edge-sdk` they name."""
    if executable is None:
        return text
    return _EXEC_EDGE_SDK.sub(lambda match: match.group(1) + str(executable), text)


def wanted_by(text: str) -> list[str]:
    """The targets in the unit's [Install] WantedBy= lines: `systemctl enable` links the unit from
    /etc/systemd/system/TARGET.wants/."""
    targets: list[str] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Install" and line.startswith("WantedBy="):
            targets += line.removeprefix("WantedBy=").split()
    return targets
