"""The agent <-> operator messages: round trips, strict decoding, size limits, and a fuzzed command decoder."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.core.errors import FleetError
from edge_sdk.fleet.wire.protocol import (
    MAX_COMMAND_BYTES,
    Command,
    DesiredState,
    LastDeploy,
    Presence,
    ProtocolError,
    ProtocolTooLargeError,
    ReportedState,
    Response,
    decode_command,
    decode_desired,
    decode_presence,
    decode_reported,
    decode_response,
    encode_message,
    error_response,
    new_command,
    offline_presence,
    utc_now,
)


def test_command_when_encoded_and_decoded_then_equal() -> None:
    command = new_command("ping", {"echo": [1, "two"]})
    assert decode_command(encode_message(command)) == command


def test_response_presence_desired_reported_when_round_tripped_then_equal() -> None:
    response = Response(id="abc", device="box-1", name="deploy", ok=True, result={"status": "active", "version": 3})
    presence = Presence(device="box-1", online=True, profile="x86-cpu", active_version=3, health="ok", since=utc_now())
    desired = DesiredState(revision=4, deployment="{}", pipelines=["demo"])
    reported = ReportedState(
        device="box-1",
        applied_revision=4,
        active_version=3,
        last_deploy=LastDeploy(version=3, outcome="active", at=utc_now()),
    )
    assert decode_response(encode_message(response)) == response
    assert decode_presence(encode_message(presence)) == presence
    assert decode_desired(encode_message(desired)) == desired
    assert decode_reported(encode_message(reported)) == reported


def test_offline_presence_when_decoded_then_only_device_and_offline() -> None:
    presence = decode_presence(offline_presence("box-1"))
    assert presence.device == "box-1" and presence.online is False and presence.active_version is None


def test_error_response_when_command_unknown_then_id_unknown() -> None:
    response = error_response(None, "box-1", "bad_request", "no")
    assert response.id == "unknown" and not response.ok and response.error is not None


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", "malformed JSON"),
        (b"\xff\xfe", "UTF-8"),
        (b"[1]", "JSON object"),
        (b'{"id": "a", "id": "b", "name": "ping"}', "duplicate key"),
        (b'{"id": "a", "name": "ping", "args": {"x": NaN}}', "finite number"),
        (b'{"name": "ping"}', "key 'id': required key is missing"),
        (b'{"id": "a/b", "name": "ping"}', "key 'id'"),
        (b'{"id": "a", "name": "ping", "extra": 1}', "key 'extra': unknown key"),
        (b'{"id": "a", "name": "ping", "sent_at": "2026-01-01T00:00:00"}', "key 'sent_at'"),
        (b'{"id": "a", "name": "../x"}', "key 'name'"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_decode_command_when_malformed_then_protocol_error_says_why(payload: bytes, expected: str) -> None:
    with pytest.raises(ProtocolError, match=None) as info:
        decode_command(payload)
    assert expected in str(info.value), f"expected {expected!r} in {info.value}"
    assert info.value.reason == "bad-message"


def test_decode_command_when_oversized_then_refused_before_parsing() -> None:
    payload = b'{"id": "a", "name": "ping", "args": {"pad": "' + b"x" * MAX_COMMAND_BYTES + b'"}}'
    with pytest.raises(ProtocolTooLargeError) as info:
        decode_command(payload)
    assert info.value.reason == "oversized"


def test_decode_command_when_small_limit_then_it_applies() -> None:
    with pytest.raises(ProtocolTooLargeError):
        decode_command(encode_message(new_command("ping")), max_bytes=10)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=2048))
def test_decode_command_when_fuzzed_with_bytes_then_only_protocol_errors(payload: bytes) -> None:
    try:
        command = decode_command(payload)
    except ProtocolError:
        return
    assert isinstance(command, Command)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "id": st.one_of(st.text(max_size=70), st.integers(), _json),
            "name": st.one_of(st.sampled_from(["ping", "deploy", "x/y", ""]), _json),
            "args": _json,
            "sent_at": st.one_of(st.datetimes().map(lambda d: d.isoformat()), _json),
            "junk": _json,
        },
    )
)
def test_decode_command_when_fuzzed_with_json_shapes_then_only_protocol_errors(document: dict[str, object]) -> None:
    payload = json.dumps(document).encode()
    try:
        command = decode_command(payload)
    except FleetError as exc:
        assert isinstance(exc, ProtocolError), f"expected a ProtocolError, got {type(exc).__name__}"
        return
    assert isinstance(command.id, str) and isinstance(command.args, dict)
