"""The deployment manifest: what a signed deployment installs, on which devices, and how it is checked.

Versions are plain integers that only go up (see `DeploymentManifest.version`). Artifact names are
file names, never paths: `safe_artifact_name` refuses anything that could leave the artifact folder.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from edge_sdk.core.errors import ManifestFormatError, ManifestTooLargeError
from edge_sdk.fleet.wire.validation_text import describe_validation_error, names_text, short_text

MANIFEST_FORMAT: Final = 1
DEFAULT_MAX_MANIFEST_BYTES = 256 * 1024
MAX_NAME_LENGTH = 128
MAX_CHUNK_SIZE = 16 * 1024 * 1024
MAX_CHUNK_COUNT = 1 << 20
MAX_ARTIFACT_SIZE = 1 << 40
MAX_VERSION = (1 << 63) - 1

# Device ids, profile names and label keys end up in MQTT topics and file names: no '/', '+', '#'.
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_SAFE_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_SHA256 = r"^[0-9a-f]{64}$"


def safe_artifact_name(name: str) -> str:
    """Return `name` if it is a plain file name that stays inside a folder, else raise ValueError.

    Allowed: 1..128 characters from A-Z a-z 0-9 . _ -, not starting with '.', no '..' anywhere.
    That excludes path separators, absolute paths, '.', '..', NUL and hidden files.
    """
    if not isinstance(name, str):
        raise ValueError(f"expected a file name string, not {type(name).__name__}")
    if not name:
        raise ValueError("expected a file name, not an empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"expected a file name of at most {MAX_NAME_LENGTH} characters, not {len(name)}")
    if "\x00" in name:
        raise ValueError("expected a file name without NUL")
    if "/" in name or "\\" in name:
        raise ValueError("expected a file name without path separators")
    if ".." in name:
        raise ValueError("expected a file name without '..'")
    if name.startswith("."):
        raise ValueError("expected a file name that does not start with '.'")
    if not _SAFE_NAME_CHARS.fullmatch(name):
        raise ValueError("expected only letters, digits, '.', '_' and '-' in a file name")
    return name


def _artifact_name(name: str) -> str:
    try:
        return safe_artifact_name(name)
    except ValueError as exc:
        raise PydanticCustomError("artifact_name", str(exc)) from None


def _utc(value: datetime) -> datetime:
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise PydanticCustomError("datetime_range", "expected a time that can be expressed in UTC") from None


ArtifactName = Annotated[str, AfterValidator(_artifact_name)]
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
UtcDatetime = Annotated[AwareDatetime, AfterValidator(_utc)]
Sha256Hex = Annotated[str, Field(pattern=_SHA256)]


class InlineSource(BaseModel):
    """The artifact is sent over MQTT in numbered chunks of `chunk_size` bytes (the last may be shorter)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["inline"] = Field(description="Source kind: chunks sent with the deployment.")
    chunk_size: StrictInt = Field(ge=1, le=MAX_CHUNK_SIZE, description="Bytes per chunk (the last may be shorter).")
    chunk_count: StrictInt = Field(
        ge=0, le=MAX_CHUNK_COUNT, description="Number of chunks; equals ceil(size / chunk_size)."
    )


class UrlSource(BaseModel):
    """The device downloads the artifact; the manifest's SHA-256 makes plain http as safe as https."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["url"] = Field(description="Source kind: downloaded by the device.")
    url: str = Field(
        max_length=2048, pattern=r"^https?://[^\s]+$", description="http:// or https:// URL of the artifact."
    )


ArtifactSource = Annotated[InlineSource | UrlSource, Field(discriminator="type")]


class Artifact(BaseModel):
    """One file a deployment installs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ArtifactName = Field(description="File name in the version folder (no paths; letters, digits, . _ -).")
    kind: Literal["model", "pipeline", "file"] = Field(
        description="model: ONNX model the device builds an engine from; pipeline: pipeline YAML; file: anything else."
    )
    size: StrictInt = Field(ge=0, le=MAX_ARTIFACT_SIZE, description="Size in bytes.")
    sha256: Sha256Hex = Field(description="SHA-256 of the whole file, lowercase hex.")
    source: ArtifactSource = Field(description="Where the bytes come from: inline chunks or a URL.")

    @model_validator(mode="after")
    def _chunk_count_covers_size(self) -> Artifact:
        if isinstance(self.source, InlineSource):
            expected = math.ceil(self.size / self.source.chunk_size)
            if self.source.chunk_count != expected:
                raise PydanticCustomError(
                    "chunk_count",
                    f"expected chunk_count {expected} for size {self.size} and chunk_size "
                    f"{self.source.chunk_size}, got {self.source.chunk_count}",
                )
        return self

    def chunk_length(self, index: int) -> int:
        """Bytes in chunk `index` of an inline artifact."""
        if not isinstance(self.source, InlineSource):
            raise ValueError(f"artifact '{self.name}' is not sent inline")
        start = index * self.source.chunk_size
        return min(self.source.chunk_size, self.size - start)


@dataclass(frozen=True)
class DeviceIdentity:
    """What a target selector is matched against: the device's id, profile name and labels."""

    device_id: str
    profile: str
    labels: dict[str, str] = field(default_factory=dict)


class TargetSelector(BaseModel):
    """Which devices a deployment is for.

    Every criterion that is given must hold; an empty list or mapping is not a criterion. Within
    `device_ids` and `profiles` any entry may match; every label in `labels` must be present on the
    device with that exact value. A selector with no criteria selects every device.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    device_ids: list[Identifier] = Field(
        default_factory=list, max_length=10_000, description="Device ids (any of); empty = any device."
    )
    profiles: list[Identifier] = Field(
        default_factory=list, max_length=100, description="Device profile names (any of); empty = any profile."
    )
    labels: dict[Identifier, Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, max_length=100, description="Labels the device must all carry, with these values."
    )

    def mismatch(self, device: DeviceIdentity) -> str | None:
        """Why `device` is not selected (the first failing criterion), or None when it is."""
        if self.device_ids and device.device_id not in self.device_ids:
            return f"expected a device id among {names_text(self.device_ids)}, this device is '{device.device_id}'"
        if self.profiles and device.profile not in self.profiles:
            return f"expected a profile among {names_text(self.profiles)}, this device has profile '{device.profile}'"
        for key, value in self.labels.items():
            if key not in device.labels:
                return f"expected label {key}={value}, this device has no label '{key}'"
            if device.labels[key] != value:
                return f"expected label {key}={value}, this device has {key}={device.labels[key]}"
        return None

    def matches(self, device: DeviceIdentity) -> bool:
        return self.mismatch(device) is None


class HealthCheck(BaseModel):
    """A sample inference after the engine is built: its outputs must match the expected ones.

    `sample_input` and `expected_output` name artifacts of this manifest (e.g. .npz files of named
    arrays); outputs match when |actual - expected| <= atol + rtol * |expected| element-wise.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ArtifactName | None = Field(
        None, description="Model artifact to run; may be left out when the manifest has exactly one model."
    )
    sample_input: ArtifactName = Field(description="Artifact holding the sample input.")
    expected_output: ArtifactName = Field(description="Artifact holding the expected output.")
    atol: float = Field(1e-3, ge=0, allow_inf_nan=False, description="Absolute tolerance.")
    rtol: float = Field(1e-3, ge=0, allow_inf_nan=False, description="Relative tolerance.")
    pipeline_start_timeout_s: float = Field(
        30.0, gt=0, le=3600, allow_inf_nan=False, description="How long a deployed pipeline has to start."
    )


class DeploymentManifest(BaseModel):
    """What an operator signs and a device verifies before it installs anything."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[1] = Field(MANIFEST_FORMAT, description="Manifest format version.")
    deployment_id: Identifier = Field(description="Operator's id for this deployment (shown in reports).")
    version: StrictInt = Field(
        ge=1,
        le=MAX_VERSION,
        description="Deployment version; a device accepts only a higher one than it has, unless `rollback`.",
    )
    created_at: UtcDatetime = Field(description="When the operator created the manifest (ISO 8601 with offset).")
    expires_at: UtcDatetime = Field(description="After this time devices refuse the manifest (ISO 8601 with offset).")
    target: TargetSelector = Field(default_factory=TargetSelector, description="Which devices the deployment is for.")
    artifacts: list[Artifact] = Field(min_length=1, max_length=256, description="Files the deployment installs.")
    health_check: HealthCheck | None = Field(
        None, description="Sample inference to run before the version counts as healthy."
    )
    rollback: StrictBool = Field(
        False, description="An explicit rollback: allows a lower version that the device still keeps."
    )
    description: str = Field("", max_length=1024, description="Free text for operators.")

    @field_validator("expires_at")
    @classmethod
    def _expires_after_creation(cls, value: datetime, info: ValidationInfo) -> datetime:
        created_at = info.data.get("created_at")
        if created_at is not None and value <= created_at:
            raise PydanticCustomError("expiry", f"expected a time after created_at {created_at.isoformat()}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DeploymentManifest:
        names = [a.name for a in self.artifacts]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PydanticCustomError(
                "unique_names", f"artifact names must be unique, got {names_text(duplicates)} more than once"
            )
        if self.health_check is not None:
            self._check_health_references(self.health_check)
        return self

    def _check_health_references(self, check: HealthCheck) -> None:
        by_name = {a.name: a for a in self.artifacts}
        for role, name in (("sample_input", check.sample_input), ("expected_output", check.expected_output)):
            if name not in by_name:
                raise PydanticCustomError(
                    "health_check",
                    f"health_check.{role} names artifact '{name}', expected one of {', '.join(sorted(by_name))}",
                )
        models = [a.name for a in self.artifacts if a.kind == "model"]
        listed = ", ".join(models) if models else "(the manifest has none)"
        if check.model is None and len(models) != 1:
            raise PydanticCustomError(
                "health_check", f"health_check.model must name one of the model artifacts {listed}"
            )
        if check.model is not None and check.model not in models:
            raise PydanticCustomError(
                "health_check",
                f"health_check.model names '{check.model}', expected one of the model artifacts {listed}",
            )

    def artifact(self, name: str) -> Artifact:
        """The artifact called `name`; KeyError if there is none."""
        for artifact in self.artifacts:
            if artifact.name == name:
                return artifact
        raise KeyError(name)

    def health_check_model(self) -> str | None:
        """The model artifact the health check runs (resolving a left-out `model`), or None without a check."""
        if self.health_check is None:
            return None
        if self.health_check.model is not None:
            return self.health_check.model
        return next(a.name for a in self.artifacts if a.kind == "model")

    def canonical_json(self) -> bytes:
        """The bytes that are signed: sorted keys, no whitespace, ASCII only, every field written out."""
        return canonical_json(self.model_dump(mode="json"))

    def is_expired(self, now: datetime) -> bool:
        return now >= self.expires_at


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON: sorted keys, compact separators, ASCII escapes, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def decode_manifest(payload: bytes, max_bytes: int = DEFAULT_MAX_MANIFEST_BYTES) -> DeploymentManifest:
    """Parse and validate manifest JSON bytes; anything else raises ManifestFormatError (or ManifestTooLargeError)."""
    data = decode_json_object(payload, max_bytes, what="manifest")
    try:
        return DeploymentManifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestFormatError(f"manifest: {describe_validation_error(exc, data)}") from None


def decode_json_object(payload: bytes, max_bytes: int, what: str) -> dict[str, Any]:
    """Strict JSON: bounded size, UTF-8, no duplicate keys, no NaN/Infinity, an object at the top."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise ManifestFormatError(f"{what}: expected bytes, got {type(payload).__name__}")
    if len(payload) > max_bytes:
        raise ManifestTooLargeError(f"{what}: expected at most {max_bytes} bytes, got {len(payload)}")
    try:
        text = bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestFormatError(f"{what}: expected UTF-8 JSON, got an invalid byte at offset {exc.start}") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except RecursionError:
        raise ManifestFormatError(f"{what}: JSON is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ManifestFormatError(
            f"{what}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:  # duplicate keys, NaN, integers past the digit limit
        raise ManifestFormatError(f"{what}: malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestFormatError(f"{what}: expected a JSON object at the top level, got {type(data).__name__}")
    return data


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {short_text(key)}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"expected a finite number, got {name}")
