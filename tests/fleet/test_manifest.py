"""DeploymentManifest: decoding refuses anything malformed, oversized or with an escaping artifact name."""

from __future__ import annotations

import contextlib
import json
from datetime import timezone
from typing import Any

import pytest
from hypothesis import HealthCheck as HypothesisHealthCheck
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from edge_sdk.core.errors import ManifestFormatError, ManifestTooLargeError
from edge_sdk.fleet.wire.manifest import (
    DeploymentManifest,
    DeviceIdentity,
    TargetSelector,
    decode_manifest,
    safe_artifact_name,
)

from .conftest import DEVICE, make_manifest, manifest_data

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HypothesisHealthCheck.too_slow])


def encode(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


def test_decode_manifest_when_valid_gives_the_manifest_back_from_its_canonical_json() -> None:
    # given
    manifest = make_manifest(4)
    # when
    decoded = decode_manifest(manifest.canonical_json())
    # then
    assert decoded == manifest, "canonical JSON must round-trip to an equal manifest"
    assert decoded.canonical_json() == manifest.canonical_json(), "canonical JSON must be stable"


def test_canonical_json_when_written_is_sorted_compact_ascii_and_names_every_field() -> None:
    manifest = make_manifest(4, description="caméra-entrée")
    text = manifest.canonical_json().decode("ascii")
    assert " " not in text, "no whitespace between tokens"
    assert '"rollback":false' in text, "defaults are written out, so the signature covers them"
    assert "\\u00e9" in text, "non-ASCII text is escaped"
    assert text.index('"artifacts"') < text.index('"created_at"') < text.index('"version"'), "keys are sorted"


def test_decode_manifest_when_times_carry_offsets_normalises_them_to_utc() -> None:
    data = manifest_data(1, created_at="2026-01-01T14:00:00+02:00", expires_at="2026-02-01T00:00:00-05:00")
    manifest = decode_manifest(encode(data))
    assert manifest.created_at.tzinfo == timezone.utc and manifest.created_at.hour == 12
    assert b'"created_at":"2026-01-01T12:00:00Z"' in manifest.canonical_json()


def test_decode_manifest_when_payload_is_larger_than_allowed_raises_too_large() -> None:
    payload = encode(manifest_data(1))
    with pytest.raises(ManifestTooLargeError, match=f"expected at most 100 bytes, got {len(payload)}"):
        decode_manifest(payload, max_bytes=100)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "malformed JSON at line 1 column 1"),
        (b'{"version": 1', "malformed JSON"),
        (b"\xff\xfe{}", "expected UTF-8 JSON"),
        (b"[1, 2]", "expected a JSON object at the top level, got list"),
        (b'{"version": 1, "version": 2}', "duplicate key 'version'"),
        (b'{"version": NaN}', "expected a finite number, got NaN"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_decode_manifest_when_json_is_malformed_raises_format_error(payload: bytes, fragment: str) -> None:
    with pytest.raises(ManifestFormatError, match=fragment.replace("(", r"\(")):
        decode_manifest(payload, max_bytes=1 << 20)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"colour": "blue"}, "key 'colour': unknown key"),
        ({"version": "7"}, "key 'version': Input should be a valid integer, got '7'"),
        ({"version": True}, "key 'version'"),
        ({"version": 0}, "key 'version': Input should be greater than or equal to 1"),
        ({"created_at": "2026-01-01T00:00:00"}, "key 'created_at': Input should have timezone info"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "key 'expires_at': expected a time after created_at"),
        ({"artifacts": []}, "key 'artifacts': List should have at least 1 item"),
        ({"target": {"device_ids": ["box/1"]}}, "key 'target.device_ids.0'"),
    ],
)
def test_decode_manifest_when_a_field_is_wrong_names_the_key(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ManifestFormatError) as caught:
        decode_manifest(encode({**manifest_data(1), **overrides}))
    assert fragment in str(caught.value), f"the error should say {fragment!r}: {caught.value}"


@pytest.mark.parametrize(
    "name",
    ["../x", "/etc/passwd", "a/b", "..", ".", "a\\b", "a\x00b", "x" * 129, "", ".hidden", "model..onnx", "mod el"],
)
def test_decode_manifest_when_artifact_name_could_escape_refuses_it(name: str) -> None:
    data = manifest_data(1)
    data["artifacts"][0]["name"] = name
    with pytest.raises(ManifestFormatError, match=r"key 'artifacts\.0\.name'"):
        decode_manifest(encode(data))


@pytest.mark.parametrize("name", ["detector.onnx", "pipeline.yaml", "a", "x" * 128, "yolo_v8-int8.engine"])
def test_safe_artifact_name_when_plain_file_name_accepts_it(name: str) -> None:
    assert safe_artifact_name(name) == name


def test_decode_manifest_when_chunk_count_does_not_cover_the_size_refuses() -> None:
    data = manifest_data(1)
    data["artifacts"][0]["source"]["chunk_count"] = 3
    with pytest.raises(ManifestFormatError, match="expected chunk_count 4 for size 3200 and chunk_size 1024, got 3"):
        decode_manifest(encode(data))


def test_decode_manifest_when_artifact_names_repeat_refuses() -> None:
    data = manifest_data(1)
    data["artifacts"].append(data["artifacts"][0])
    with pytest.raises(ManifestFormatError, match=r"must be unique, got detector.onnx more than once"):
        decode_manifest(encode(data))


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://host/x", "https://", "https://host/a b"])
def test_decode_manifest_when_url_source_is_not_http_refuses(url: str) -> None:
    data = manifest_data(1)
    data["artifacts"][0]["source"] = {"type": "url", "url": url}
    with pytest.raises(ManifestFormatError, match=r"key 'artifacts\.0\.source\.url': String should match"):
        decode_manifest(encode(data))


def test_decode_manifest_when_health_check_names_an_unknown_artifact_refuses() -> None:
    data = manifest_data(1, health_check={"sample_input": "input.npz", "expected_output": "detector.onnx"})
    with pytest.raises(ManifestFormatError, match=r"health_check\.sample_input names artifact 'input\.npz'"):
        decode_manifest(encode(data))


def test_decode_manifest_when_health_check_leaves_out_the_only_model_resolves_it() -> None:
    data = manifest_data(1, health_check={"sample_input": "detector.onnx", "expected_output": "detector.onnx"})
    manifest = decode_manifest(encode(data))
    assert manifest.health_check_model() == "detector.onnx"


def test_target_selector_when_empty_selects_every_device() -> None:
    assert TargetSelector().matches(DeviceIdentity("anything", "arm-cpu"))


@pytest.mark.parametrize(
    ("selector", "selected", "why"),
    [
        ({"device_ids": ["box-1", "box-17"]}, True, None),
        ({"device_ids": ["box-1"]}, False, "expected a device id among box-1, this device is 'box-17'"),
        ({"profiles": ["arm-cpu", "x86-cpu"]}, True, None),
        ({"profiles": ["arm-cpu"]}, False, "this device has profile 'x86-cpu'"),
        ({"labels": {"site": "lyon", "line": "3"}}, True, None),
        ({"labels": {"site": "lyon", "line": "4"}}, False, "expected label line=4, this device has line=3"),
        ({"labels": {"floor": "2"}}, False, "this device has no label 'floor'"),
        ({"device_ids": ["box-17"], "profiles": ["arm-cpu"]}, False, "expected a profile among arm-cpu, this device"),
        ({"device_ids": ["box-17"], "profiles": ["x86-cpu"], "labels": {"site": "lyon"}}, True, None),
    ],
)
def test_target_selector_when_criteria_are_given_all_must_hold(
    selector: dict[str, Any], selected: bool, why: str | None
) -> None:
    target = TargetSelector.model_validate(selector)
    assert target.matches(DEVICE) is selected
    if why is not None:
        assert why in str(target.mismatch(DEVICE)), target.mismatch(DEVICE)


def test_deployment_manifest_when_schema_is_exported_every_field_has_a_description() -> None:
    def undocumented(model: type[BaseModel]) -> list[str]:
        missing = [f"{model.__name__}.{n}" for n, f in model.model_fields.items() if not f.description]
        for field in model.model_fields.values():
            for arg in getattr(field.annotation, "__args__", (field.annotation,)):
                inner = getattr(arg, "__args__", (arg,))
                for candidate in inner:
                    if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                        missing += undocumented(candidate)
        return missing

    assert undocumented(DeploymentManifest) == [], "every manifest field needs Field(description=...)"
    assert "artifacts" in DeploymentManifest.model_json_schema()["properties"]


# ---------------------------------------------------------------- fuzzing


@FUZZ
@given(st.binary(max_size=4096))
def test_decode_manifest_when_given_random_bytes_raises_only_format_errors(payload: bytes) -> None:
    with contextlib.suppress(ManifestFormatError):
        decode_manifest(payload, max_bytes=2048)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(manifest_data(1))) | st.text(max_size=8), JSON_VALUES, max_size=8))
def test_decode_manifest_when_given_random_json_objects_raises_only_format_errors(data: dict[str, Any]) -> None:
    with contextlib.suppress(ManifestFormatError):
        decode_manifest(json.dumps(data).encode())


@FUZZ
@given(st.data())
def test_decode_manifest_when_a_valid_manifest_is_mutated_raises_only_format_errors(data: st.DataObject) -> None:
    payload = bytearray(make_manifest(3).canonical_json())
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(payload) - 1))
        payload[index] = data.draw(st.integers(0, 255))
    try:
        manifest = decode_manifest(bytes(payload))
    except ManifestFormatError:
        return
    for artifact in manifest.artifacts:  # whatever still decodes has only safe names
        assert safe_artifact_name(artifact.name) == artifact.name


def test_decode_manifest_when_several_keys_are_wrong_names_each_in_one_line() -> None:
    data = {**manifest_data(1), "version": 0, "deployment_id": "lobby/1"}
    with pytest.raises(ManifestFormatError) as refused:
        decode_manifest(json.dumps(data).encode())
    message = str(refused.value)
    assert "key 'deployment_id'" in message and "key 'version'" in message and "; " in message
    assert "more problem" not in message and "\n" not in message
