"""`provision.yaml`: what `edge-sdk device provision` makes of a box (docs/provision.md), and where a provisioned
box keeps things (the layout every part of issue 17 shares: config in /etc/edge-sdk, state in /var/lib/edge-sdk).

Relative paths in the file are relative to the file's folder, like agent.yaml's.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edge_sdk.core.yaml_model import load_yaml_model
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN

Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]

SERVICE_USER = "edge-sdk"
SERVICE_GROUPS = ("video", "render")
"""The service's user (and its own group) and the device groups a camera and a GPU/NPU need."""

CONFIG_DIR = PurePosixPath("/etc/edge-sdk")
STATE_DIR = PurePosixPath("/var/lib/edge-sdk")
AGENT_CONFIG = CONFIG_DIR / "agent.yaml"
PIPELINES_DIR = CONFIG_DIR / "pipelines"
TLS_DIR = CONFIG_DIR / "tls"
TRUSTED_KEYS_DIR = CONFIG_DIR / "trusted-keys"
STORE_DIR = STATE_DIR / "store"
ENGINE_CACHE_DIR = STATE_DIR / "engines"
SPOOL_DIR = STATE_DIR / "spool"
ENROLLMENT_STATE = STATE_DIR / "enrollment.json"
UNIT_DIR = PurePosixPath("/etc/systemd/system")
AGENT_UNIT = "edge-sdk-agent.service"
PIPELINE_UNIT = "edge-sdk-pipeline@.service"
ENROLL_UNIT = "edge-sdk-enroll.service"
"""First-boot enrollment by claim: runs before the agent, and is skipped on a box without a claim
certificate or with its own certificate already."""


def on_box(root: Path, path: PurePosixPath) -> Path:
    """Where the box's absolute `path` lies below `root` (`/` on the box itself, a folder under --root)."""
    return root / path.relative_to("/")


def pipeline_unit(name: str) -> str:
    """The instance of the templated pipeline unit that runs /etc/edge-sdk/pipelines/NAME.yaml."""
    return PIPELINE_UNIT.replace("@", f"@{name}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BrokerTarget(_Strict):
    host: str = Field(min_length=1, description="The broker's host name (a name in its certificate).")
    port: int = Field(8883, ge=1, le=65535, description="The broker's TLS port.")


class TlsSources(_Strict):
    ca: Path = Field(description="The fleet CA (PEM), copied to /etc/edge-sdk/tls/ca.pem.")
    cert: Path | None = Field(None, description="This device's certificate, copied to tls/device.pem.")
    key: Path | None = Field(None, description="Its private key, copied to tls/device.key (mode 0640).")

    @model_validator(mode="after")
    def _both_or_neither(self) -> TlsSources:
        if (self.cert is None) != (self.key is None):
            raise ValueError("expected both 'cert' and 'key' (the device's identity) or neither (enrollment by claim)")
        return self


class ClaimFiles(_Strict):
    cert: Path = Field(description="The claim certificate, copied to /etc/edge-sdk/tls/claim.pem.")
    key: Path = Field(description="Its private key, copied to tls/claim.key (mode 0640).")


class PipelineEntry(_Strict):
    name: Identifier = Field(description="Runs as edge-sdk-pipeline@NAME.service on /etc/edge-sdk/pipelines/NAME.yaml.")
    file: Path | None = Field(None, description="A pipeline file copied there; the one already there when null.")


class ProvisionConfig(_Strict):
    """provision.yaml: one box's identity, broker, profile and services."""

    device_id: Identifier | None = Field(
        None,
        description="This device's id (its certificate's common name); with `claim`, the box's host name when null.",
    )
    broker: BrokerTarget
    tls: TlsSources
    claim: ClaimFiles | None = Field(None, description="Enrollment by claim certificate (docs/enrollment.md).")
    labels: dict[Identifier, Annotated[str, Field(max_length=256)]] = Field(default_factory=dict)
    profile: Identifier = Field("auto", description="A device profile name, or 'auto' to detect this host's.")
    pipelines: list[PipelineEntry] = Field(default_factory=list, description="Pipelines to run as services.")
    trusted_keys: list[Path] = Field(
        default_factory=list,
        description="Operators' Ed25519 public keys (*.pub), copied to /etc/edge-sdk/trusted-keys/.",
    )
    keep_versions: int = Field(3, ge=2, le=100, description="agent.yaml's keep_versions.")
    executable: PurePosixPath | None = Field(
        None, description="The `edge-sdk` the units run; the one beside this Python when null."
    )

    @model_validator(mode="after")
    def _identity(self) -> ProvisionConfig:
        if self.claim is None and (self.device_id is None or self.tls.cert is None):
            raise ValueError(
                "expected 'device_id' with 'tls.cert' and 'tls.key' (a device certificate), or 'claim' (enrollment)"
            )
        if self.claim is not None and self.tls.cert is not None:
            raise ValueError("expected 'claim' (the box makes its own key) or 'tls.cert' and 'tls.key', not both")
        if len({p.name for p in self.pipelines}) != len(self.pipelines):
            raise ValueError("expected each pipeline name once")
        return self

    def resolved(self, base: Path) -> ProvisionConfig:
        """A copy whose source files (TLS, claim, keys, pipelines) are absolute against `base`."""

        def fix(path: Path) -> Path:
            return path if path.is_absolute() else (base / path).resolve()

        tls = self.tls.model_copy(
            update={
                "ca": fix(self.tls.ca),
                "cert": self.tls.cert and fix(self.tls.cert),
                "key": self.tls.key and fix(self.tls.key),
            }
        )
        claim = self.claim and self.claim.model_copy(update={"cert": fix(self.claim.cert), "key": fix(self.claim.key)})
        pipelines = [p.model_copy(update={"file": p.file and fix(p.file)}) for p in self.pipelines]
        keys = [fix(path) for path in self.trusted_keys]
        return self.model_copy(update={"tls": tls, "claim": claim, "pipelines": pipelines, "trusted_keys": keys})


def load_provision_config(path: Path) -> ProvisionConfig:
    """Read and validate provision.yaml (errors name the file and line); relative paths from its folder."""
    return load_yaml_model(path, ProvisionConfig).resolved(path.resolve().parent)
