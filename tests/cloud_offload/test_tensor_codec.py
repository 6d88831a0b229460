"""What crosses the link (cloud_offload/tensor_codec.py): round trips at each precision, and garbage,
truncation, forgery and bombs refused as one PayloadError."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from cloud_offload.tensor_codec import MAX_TENSORS, PayloadError, TensorPayload, decode, encode

RNG = np.random.default_rng(0)
FEATURES = RNG.standard_normal((1, 32, 19, 19)).astype(np.float32) * 3
SHAPE = np.array([1, 300, 300, 3], np.int64)


def payload() -> TensorPayload:
    return TensorPayload(frame_id=41, deadline=1_700_000_000.25, tensors={"features:0": FEATURES, "shape": SHAPE})


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_fp32_round_trips_exactly_with_its_frame_id_deadline_and_names(compression: str) -> None:
    back = decode(encode(payload(), "fp32", compression))  # type: ignore[arg-type]
    assert (back.frame_id, back.deadline, list(back.tensors)) == (41, 1_700_000_000.25, ["features:0", "shape"])
    assert back.tensors["features:0"].dtype == np.float32 and np.array_equal(back.tensors["features:0"], FEATURES)
    assert back.tensors["shape"].dtype == np.int64 and np.array_equal(back.tensors["shape"], SHAPE)


def test_fp16_and_int8_halve_and_quarter_the_floats_within_their_rounding_and_keep_integers_exact() -> None:
    fp32, fp16, int8 = (len(encode(payload(), p, "none")) for p in ("fp32", "fp16", "int8"))  # type: ignore[arg-type]
    assert fp16 < 0.55 * fp32 and int8 < 0.3 * fp32
    half = decode(encode(payload(), "fp16"))
    np.testing.assert_allclose(half.tensors["features:0"], FEATURES, rtol=1e-3, atol=1e-3)
    quarter = decode(encode(payload(), "int8"))
    step = (FEATURES.max() - FEATURES.min()) / 255
    assert np.abs(quarter.tensors["features:0"] - FEATURES).max() <= step
    assert np.array_equal(quarter.tensors["shape"], SHAPE), "an integer tensor goes as it is"


def test_zstd_shrinks_a_feature_map_with_zeros() -> None:
    relu = np.maximum(FEATURES, 0)
    sizes = [len(encode(TensorPayload(1, 0.0, {"x": relu}), "fp16", c)) for c in ("none", "zstd")]
    assert sizes[1] < 0.8 * sizes[0]


def _forged(data: bytes, **fields: int) -> bytes:
    magic, version, compression, count, frame, deadline, length = struct.unpack_from("<4sBBHQdQ", data)
    values = {"version": version, "compression": compression, "count": count, "length": length, **fields}
    header = struct.pack(
        "<4sBBHQdQ", magic, values["version"], values["compression"], values["count"], frame, deadline, values["length"]
    )
    return header + data[struct.calcsize("<4sBBHQdQ") :]


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda good: b"", "at least"),
        (lambda good: b"GARBAGE!" * 8, "not an offload message"),
        (lambda good: _forged(good, version=9), "version 9"),
        (lambda good: _forged(good, compression=7), "unknown compression"),
        (lambda good: _forged(good, count=MAX_TENSORS + 1), "at most"),
        (lambda good: _forged(good, length=10**12), "at most"),
        (lambda good: _forged(good, length=12), "do not add up"),
        (lambda good: good[:-100], "body"),
        (lambda good: good[:60], "truncated or garbled"),
    ],
    ids=["empty", "garbage", "version", "compression", "count", "bomb", "lengths", "cut-body", "cut-header"],
)
def test_a_malformed_message_is_one_payload_error(make: object, says: str) -> None:
    good = encode(payload(), "fp16", "zstd")
    with pytest.raises(PayloadError, match=says) as info:
        decode(make(good))  # type: ignore[operator]
    assert "\n" not in str(info.value)


def test_encode_refuses_what_it_cannot_send() -> None:
    with pytest.raises(PayloadError, match="dtype complex64"):
        encode(TensorPayload(1, 0.0, {"z": np.zeros(4, np.complex64)}))
    with pytest.raises(PayloadError, match="at most 64 tensors"):
        encode(TensorPayload(1, 0.0, {str(i): np.zeros(1, np.float32) for i in range(MAX_TENSORS + 1)}))
