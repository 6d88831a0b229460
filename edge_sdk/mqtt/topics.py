"""The fleet's topic tree: everything about one device lives below `edge/<device>/`.

The broker's ACL (deploy/mosquitto/acl) is written against this tree: a device may write its
`state`, `resp`, `reported`, `results/...` and `telemetry/...`, and read its `cmd`, `desired`
and `artifacts/...`; operators may do anything below `edge/`. The device name is the common name
of its client certificate, so it must be one topic level.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_sdk.core.errors import ConfigError

ROOT = "edge"
MAX_IDENTITY_LENGTH = 128


def check_identity(name: str) -> str:
    """A device or operator identity: one topic level (no '/', '+', '#', NUL), printable, at most 128 characters."""
    if not name or len(name) > MAX_IDENTITY_LENGTH or not name.isprintable():
        raise ConfigError(f"expected an identity of 1 to {MAX_IDENTITY_LENGTH} printable characters, got {name!r}")
    if any(char in name for char in "/+#") or name != name.strip():
        raise ConfigError(
            f"expected an identity usable as one MQTT topic level (no '/', '+', '#', no edge spaces), got {name!r}"
        )
    return name


@dataclass(frozen=True)
class DeviceTopics:
    """The topics of one device (`device="+"` gives the filters an operator subscribes to for all devices)."""

    device: str

    def __post_init__(self) -> None:
        if self.device != "+":
            check_identity(self.device)

    @property
    def base(self) -> str:
        return f"{ROOT}/{self.device}"

    @property
    def state(self) -> str:
        """Presence, retained: the device's facts while online, its last will "offline" otherwise (device writes)."""
        return f"{self.base}/state"

    @property
    def cmd(self) -> str:
        """Commands, QoS 1, with an MQTT v5 response topic and correlation data (operator writes)."""
        return f"{self.base}/cmd"

    @property
    def resp(self) -> str:
        """Answers to commands, carrying the command's correlation data (device writes)."""
        return f"{self.base}/resp"

    @property
    def desired(self) -> str:
        """Desired state, retained and versioned (operator writes, device converges to it on every connect)."""
        return f"{self.base}/desired"

    @property
    def reported(self) -> str:
        """Reported state, retained: what the device runs now (device writes)."""
        return f"{self.base}/reported"

    def results(self, *levels: str) -> str:
        """Inference results, e.g. results("demo", "cam0") -> edge/<device>/results/demo/cam0 (device writes)."""
        return "/".join([f"{self.base}/results", *levels])

    def telemetry(self, *levels: str) -> str:
        """Health and metrics (device writes)."""
        return "/".join([f"{self.base}/telemetry", *levels])

    def artifacts(self, *levels: str) -> str:
        """Inline artifact chunks for a deployment (operator writes)."""
        return "/".join([f"{self.base}/artifacts", *levels])
