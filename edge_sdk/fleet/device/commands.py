"""The device's commands: one handler function per name in `COMMANDS`, and `answer`, which runs one.

A handler takes the device (any `CommandTarget`: the agent) and the command's `args` and returns the
Response `result`; it raises `CommandError` with a stable reason code (and optionally a result) when the
command fails. `answer` turns one command payload into exactly one Response: a payload that cannot be
decoded, an unknown name or anything else a handler raises is answered as an error, never raised.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, Protocol

from edge_sdk.core.errors import ConfigError, FleetError
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.device.deploy import DeployResult
from edge_sdk.fleet.device.pipelines import PipelineStartError
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN
from edge_sdk.fleet.wire.protocol import (
    BAD_REQUEST,
    INTERNAL,
    PIPELINE_FAILED,
    UNKNOWN_COMMAND,
    Presence,
    ProtocolError,
    ProtocolTooLargeError,
    ReportedState,
    Response,
    decode_command,
    error_response,
    utc_now,
)

log = logging.getLogger(__name__)

_NAME = re.compile(IDENTIFIER_PATTERN)

MAX_ECHO_BYTES = 4096
"""Largest `ping` echo (as compact JSON): a liveness check carries a token, not a payload."""


class CommandError(FleetError):
    """A command failed; `reason` is the stable code the Response carries."""

    def __init__(self, reason: str, message: str, detail: str | None = None, result: dict[str, Any] | None = None):
        super().__init__(message)
        self.reason = reason
        self.detail = detail
        self.result = result


class CommandTarget(Protocol):
    """What the commands act on (the agent)."""

    @property
    def config(self) -> AgentConfig: ...

    def presence(self) -> Presence: ...

    def reported(self) -> ReportedState: ...

    def apply_deployment(self, signed: bytes, require_rollback: bool = False) -> DeployResult: ...

    def set_pipeline(self, name: str, running: bool) -> list[str]: ...

    def set_profile(self, name: str) -> None: ...


Handler = Callable[[CommandTarget, dict[str, Any]], dict[str, Any]]


def _string_arg(args: dict[str, Any], key: str, max_length: int) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise CommandError(BAD_REQUEST, f"expected args.{key} as a non-empty string, got {type(value).__name__}")
    if len(value) > max_length:
        raise CommandError(BAD_REQUEST, f"expected args.{key} of at most {max_length} characters, got {len(value)}")
    return value


def _name_arg(args: dict[str, Any], key: str) -> str:
    value = _string_arg(args, key, 128)
    if not _NAME.fullmatch(value):
        raise CommandError(BAD_REQUEST, f"expected args.{key} of letters, digits, '.', '_', '-', got {value[:80]!r}")
    return value


def ping(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """Liveness: answers with the time and whatever `args.echo` held (at most MAX_ECHO_BYTES of JSON)."""
    echo = args.get("echo")
    size = len(json.dumps(echo, separators=(",", ":")))  # ASCII: no smaller than the echo in the response
    if size > MAX_ECHO_BYTES:
        raise CommandError(
            BAD_REQUEST,
            f"expected args.echo of at most {MAX_ECHO_BYTES} bytes as JSON, got {size}",
            detail=ProtocolTooLargeError.reason,
        )
    return {"pong": True, "at": utc_now().isoformat(), "echo": echo}


def report(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """The device's presence facts and reported state, as they are published."""
    return {
        "presence": agent.presence().model_dump(mode="json"),
        "reported": agent.reported().model_dump(mode="json"),
    }


def deploy(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """Deploy a signed manifest (`args.manifest`): need_chunks, active, or an error saying why and what runs."""
    return _deploy(agent, args, require_rollback=False)


def _deploy(agent: CommandTarget, args: dict[str, Any], require_rollback: bool) -> dict[str, Any]:
    signed = _string_arg(args, "manifest", agent.config.max_command_bytes)
    outcome = agent.apply_deployment(signed.encode("utf-8", errors="surrogatepass"), require_rollback)
    if not outcome.ok:
        raise CommandError(outcome.error_reason, outcome.message or outcome.status, outcome.detail, outcome.result())
    return outcome.result()


def rollback(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """An explicit, signed rollback manifest (`args.manifest`, `rollback: true`, a lower version kept on disk)."""
    return _deploy(agent, args, require_rollback=True)


def start(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """Start pipeline `args.pipeline` (a pipeline artifact of the active version); it keeps running across deploys."""
    name = _name_arg(args, "pipeline")
    try:
        return {"pipelines": agent.set_pipeline(name, running=True)}
    except PipelineStartError as exc:
        raise CommandError(PIPELINE_FAILED, str(exc), detail=exc.reason) from None


def stop(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """Stop pipeline `args.pipeline` (and no longer start it after deploys)."""
    return {"pipelines": agent.set_pipeline(_name_arg(args, "pipeline"), running=False)}


def set_profile(agent: CommandTarget, args: dict[str, Any]) -> dict[str, Any]:
    """Use device profile `args.profile` (from the profile catalog) for the next engine builds."""
    name = _name_arg(args, "profile")
    try:
        agent.set_profile(name)
    except ConfigError as exc:
        raise CommandError(BAD_REQUEST, str(exc), detail="unknown-profile") from None
    return {"profile": name}


COMMANDS: dict[str, Handler] = {
    "ping": ping,
    "report": report,
    "deploy": deploy,
    "rollback": rollback,
    "start": start,
    "stop": stop,
    "set_profile": set_profile,
}


def answer(device: CommandTarget, payload: bytes) -> Response:
    """The one Response to a command payload (see the module docstring)."""
    device_id = device.config.device_id
    try:
        command = decode_command(payload, max_bytes=device.config.max_command_bytes)
    except ProtocolError as exc:
        log.warning("refused a command: %s", exc)
        return error_response(None, device_id, BAD_REQUEST, str(exc), exc.reason)
    handler = COMMANDS.get(command.name)
    if handler is None:
        known = ", ".join(sorted(COMMANDS))
        return error_response(command, device_id, UNKNOWN_COMMAND, f"expected one of {known}, got {command.name!r}")
    try:
        result = handler(device, command.args)
        return Response(id=command.id, device=device_id, name=command.name, ok=True, result=result)
    except CommandError as exc:
        response = error_response(command, device_id, exc.reason, str(exc), exc.detail)
        return response.model_copy(update={"result": exc.result})
    except FleetError as exc:
        return error_response(command, device_id, BAD_REQUEST, str(exc), exc.reason)
    except Exception as exc:
        log.exception("command %s failed", command.name)
        return error_response(command, device_id, INTERNAL, f"{type(exc).__name__}: {exc}")
