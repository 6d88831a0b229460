"""The messages between the device agent and operators (JSON, UTF-8) and their strict encode/decode.

| message | topic | retained | written by |
|---|---|---|---|
| `Command` | `edge/<d>/cmd` (QoS 1, v5 ResponseTopic + CorrelationData = id) | never (ignored) | operators |
| `Response` | `edge/<d>/resp` (QoS 1, same CorrelationData) | no | device |
| `Presence` | `edge/<d>/state` (last will `{"device": d, "online": false}`) | yes | device |
| `DesiredState` | `edge/<d>/desired` | yes | operators |
| `ReportedState` | `edge/<d>/reported` | yes | device |

Decoding never trusts the payload: it is size-bounded before it is parsed, must be UTF-8 JSON without
duplicate keys or NaN, and is validated by a pydantic model with `extra="forbid"`. Every failure is a
`ProtocolError` (or `ProtocolTooLargeError`) whose message says what was expected and what came.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from edge_sdk.core.errors import FleetError, ManifestFormatError, ManifestTooLargeError
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN, MAX_VERSION, decode_json_object
from edge_sdk.fleet.wire.signing import DEFAULT_MAX_SIGNED_BYTES
from edge_sdk.fleet.wire.validation_text import describe_validation_error

log = logging.getLogger(__name__)

# A signed envelope carries the manifest as an escaped JSON string; a command or desired state
# carries the envelope as a string again, so allow twice the envelope plus room for the rest.
MAX_COMMAND_BYTES: Final = 2 * DEFAULT_MAX_SIGNED_BYTES + 16 * 1024
MAX_DESIRED_BYTES: Final = 2 * DEFAULT_MAX_SIGNED_BYTES + 64 * 1024
MAX_RESPONSE_BYTES: Final = 256 * 1024
MAX_PRESENCE_BYTES: Final = 64 * 1024
MAX_REPORTED_BYTES: Final = 64 * 1024

COMMAND_NAMES: Final = ("deploy", "rollback", "start", "stop", "set_profile", "report", "ping")

# Stable error reasons a Response carries (`ErrorInfo.reason`); `detail` adds the specific refusal
# code of the fleet error (e.g. "bad-signature", "expired", "replay", "wrong-target").
REFUSED: Final = "refused"
HEALTH_FAILED: Final = "health_failed"
ACTIVATION_FAILED: Final = "activation_failed"
DEPLOY_FAILED: Final = "deploy_failed"
"""Artifacts could not be received, stored or downloaded; nothing was activated."""
PIPELINE_FAILED: Final = "pipeline_failed"
"""A pipeline is not in the active version or failed before it started."""
BAD_REQUEST: Final = "bad_request"
UNKNOWN_COMMAND: Final = "unknown_command"
INTERNAL: Final = "internal"

CommandId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
DeviceId = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


class ProtocolError(FleetError):
    """A fleet message is not valid JSON of the expected shape."""

    reason = "bad-message"


class ProtocolTooLargeError(ProtocolError):
    """A fleet message is larger than the receiver accepts."""

    reason = "oversized"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Command(BaseModel):
    """An operator's request to one device; answered by exactly one `Response` with the same id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: CommandId = Field(description="Unique id (uuid4 hex); also the MQTT v5 correlation data.")
    name: Name = Field(description=f"Command name, one of {', '.join(COMMAND_NAMES)}.")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the command.")
    sent_at: AwareDatetime | None = Field(None, description="When the operator sent it (ISO 8601 with offset).")


class ErrorInfo(BaseModel):
    """Why a command failed: a stable `reason` code and a message for people."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = Field(max_length=64, description="Stable code: refused, health_failed, activation_failed, ...")
    message: str = Field(max_length=4096, description="What was expected and what came.")
    detail: str | None = Field(None, max_length=64, description="Specific refusal code, e.g. bad-signature.")


class Response(BaseModel):
    """The device's answer to a `Command`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: CommandId = Field(description="The command's id.")
    device: DeviceId = Field(description="The answering device.")
    name: str = Field(max_length=128, description="The command's name.")
    ok: StrictBool = Field(description="True when the command succeeded.")
    result: dict[str, Any] | None = Field(None, description="Command-specific result.")
    error: ErrorInfo | None = Field(None, description="Why it failed (when ok is false).")


class Presence(BaseModel):
    """Retained on `edge/<d>/state`: the device's facts while online; only device + online=false from the will."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: DeviceId = Field(description="Device id.")
    online: StrictBool = Field(description="False when the last will fired or the agent stopped.")
    profile: str | None = Field(None, max_length=128, description="Device profile name.")
    labels: dict[str, str] = Field(default_factory=dict, description="The device's labels (for target selectors).")
    sdk_version: str | None = Field(None, max_length=64, description="edge_sdk version on the device.")
    active_version: StrictInt | None = Field(None, ge=1, le=MAX_VERSION, description="Active deployment version.")
    models: list[str] = Field(default_factory=list, description="Model artifacts of the active version.")
    pipelines: list[str] = Field(default_factory=list, description="Pipelines deployed / running.")
    health: Literal["ok", "degraded", "failed"] | None = Field(None, description="Overall health.")
    since: AwareDatetime | None = Field(None, description="When this presence was published.")


class DesiredState(BaseModel):
    """Retained on `edge/<d>/desired`: what the operator wants the device to run; newer revision wins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    revision: StrictInt = Field(ge=0, le=MAX_VERSION, description="Increases with every change.")
    deployment: str | None = Field(None, description="Signed manifest envelope (as `fleet sign` wrote it), or null.")
    pipelines: list[Name] = Field(default_factory=list, max_length=256, description="Pipelines that should run.")


class LastDeploy(BaseModel):
    """The outcome of the device's latest deployment attempt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: StrictInt | None = Field(description="The manifest version (null when it could not be read).")
    outcome: Literal["active", "rolled_back", "refused", "failed", "pending"] = Field(
        description="active; rolled_back (health or activation failed, the previous version runs); refused "
        "(signature, expiry, target, replay, downgrade, format); failed (artifacts could not be stored); pending "
        "(a desired deployment waits for inline chunks: `reason` lists the missing ones)."
    )
    reason: str | None = Field(None, max_length=4096, description="Why, when it was not activated.")
    at: AwareDatetime = Field(description="When.")


class ReportedState(BaseModel):
    """Retained on `edge/<d>/reported`: what the device runs now and the desired revision it applied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: DeviceId = Field(description="Device id.")
    applied_revision: StrictInt = Field(ge=0, le=MAX_VERSION, description="Last desired revision handled.")
    active_version: StrictInt | None = Field(None, ge=1, le=MAX_VERSION, description="Active deployment version.")
    last_deploy: LastDeploy | None = Field(None, description="Latest deployment attempt.")
    pipelines: list[str] = Field(default_factory=list, description="Pipelines running (or recorded as running).")


M = TypeVar("M", bound=BaseModel)


def encode_message(message: BaseModel) -> bytes:
    """Compact UTF-8 JSON of a protocol model (None fields written out, so readers see every key).

    Text that UTF-8 cannot hold (a lone surrogate a sender wrote as `\\ud800`) is written as JSON escapes."""
    data = message.model_dump(mode="json")
    try:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(data, separators=(",", ":")).encode()


def encode_response(response: Response, max_bytes: int = MAX_RESPONSE_BYTES) -> bytes:
    """The bytes that answer a command: `response`, or its `oversized_response` when it encodes to
    more than the operator's `decode_response` accepts."""
    payload = encode_message(response)
    if len(payload) <= max_bytes:
        return payload
    log.warning(
        "command %s: a response of %d bytes is over the limit; answered with an error", response.id, len(payload)
    )
    return encode_message(oversized_response(response, len(payload), max_bytes))


def oversized_response(response: Response, size: int, max_bytes: int = MAX_RESPONSE_BYTES) -> Response:
    """What answers a command whose `response` encodes to `size` bytes, over `max_bytes` (what
    `decode_response` accepts): the same id and name, failed with reason `internal`, detail `oversized`."""
    error = ErrorInfo(
        reason=INTERNAL,
        message=f"expected a response of at most {max_bytes} bytes, got {size}; its result was dropped",
        detail=ProtocolTooLargeError.reason,
    )
    return response.model_copy(update={"ok": False, "result": None, "error": error})


def decode_message(payload: bytes, model: type[M], max_bytes: int) -> M:
    """Parse and validate `payload` as `model`; raise ProtocolError / ProtocolTooLargeError otherwise."""
    what = model.__name__
    try:
        data = decode_json_object(payload, max_bytes, what=what)
    except ManifestTooLargeError as exc:
        raise ProtocolTooLargeError(str(exc)) from None
    except ManifestFormatError as exc:
        raise ProtocolError(str(exc)) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(f"{what}: {describe_validation_error(exc, data)}") from None
    except (RecursionError, ValueError, TypeError) as exc:  # pathological input pydantic does not wrap
        raise ProtocolError(f"{what}: invalid value: {type(exc).__name__}") from None


def decode_command(payload: bytes, max_bytes: int = MAX_COMMAND_BYTES) -> Command:
    return decode_message(payload, Command, max_bytes)


def decode_response(payload: bytes, max_bytes: int = MAX_RESPONSE_BYTES) -> Response:
    return decode_message(payload, Response, max_bytes)


def decode_presence(payload: bytes, max_bytes: int = MAX_PRESENCE_BYTES) -> Presence:
    return decode_message(payload, Presence, max_bytes)


def decode_desired(payload: bytes, max_bytes: int = MAX_DESIRED_BYTES) -> DesiredState:
    return decode_message(payload, DesiredState, max_bytes)


def decode_reported(payload: bytes, max_bytes: int = MAX_REPORTED_BYTES) -> ReportedState:
    return decode_message(payload, ReportedState, max_bytes)


def offline_presence(device: str) -> bytes:
    """The retained last will payload: `{"device": d, "online": false}`."""
    return json.dumps({"device": device, "online": False}, separators=(",", ":")).encode()


def new_command(name: str, args: dict[str, Any] | None = None, command_id: str | None = None) -> Command:
    """A command with a fresh uuid4 hex id and `sent_at` = now (for operators and tests)."""
    return Command(id=command_id or uuid.uuid4().hex, name=name, args=args or {}, sent_at=utc_now())


def error_response(
    command: Command | None, device: str, reason: str, message: str, detail: str | None = None
) -> Response:
    """A failed Response (a command that could not even be decoded gets id "unknown")."""
    return Response(
        id=command.id if command is not None else "unknown",
        device=device,
        name=command.name if command is not None else "",
        ok=False,
        error=ErrorInfo(reason=reason, message=message[:4096], detail=detail),
    )
