"""The bytes a cut's tensors cross the link as: a small versioned header, then every tensor at the
precision the plan chose, the whole body compressed once.

Layout (little-endian):
- header: magic `EOFL`, version (u8), compression (u8: 0 none, 1 zstd), tensor count (u16), frame id
  (u64), deadline (f64, Unix seconds), body length before compression (u64);
- per tensor: name length (u16) and UTF-8 name, dtype (u8), precision (u8: 0 as is, 1 fp16, 2 int8),
  rank (u8), dims (u32 each), scale and zero point (f32, int8 only, else 0);
- the body: the tensors' bytes in that order, compressed as a whole.

Float tensors go as fp32, fp16, or int8 with an affine scale and zero point per tensor; other dtypes
(the int64 shapes a cut can carry) go as they are. zstd at level 1 (the `zstandard` package, the
`[offload]` extra) compresses a feature map several times faster than zlib at a similar ratio; lz4 is
faster still but gains little on float data. `decode` checks every length against the header before
it allocates, so a truncated, forged or garbage message is one PayloadError, never a crash or a
decompression bomb.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from edge_sdk.core.errors import EdgeSDKError

MAGIC = b"EOFL"
VERSION = 1
MAX_TENSORS = 64
MAX_RANK = 8
MAX_BODY_BYTES = 256 * 1024 * 1024
"""A message larger than this is refused on both sides (a 1080p float32 feature map is far smaller)."""

Precision = Literal["fp32", "fp16", "int8"]
Compression = Literal["none", "zstd"]

_HEADER = struct.Struct("<4sBBHQdQ")
_NAME_LENGTH = struct.Struct("<H")
_TENSOR = struct.Struct("<BBB")
_DIM = struct.Struct("<I")
_QUANT = struct.Struct("<ff")
_DTYPES = {1: "float32", 2: "float16", 3: "int64", 4: "int32", 5: "uint8", 6: "int8", 7: "bool", 8: "float64"}
_DTYPE_CODES = {name: code for code, name in _DTYPES.items()}
_AS_IS, _FP16, _INT8 = 0, 1, 2
_COMPRESSIONS = {"none": 0, "zstd": 1}


class PayloadError(EdgeSDKError):
    """A message that cannot be what an edge or a worker sent: wrong magic, version, lengths or values."""


@dataclass(frozen=True)
class TensorPayload:
    frame_id: int
    deadline: float
    """Unix seconds by which the answer is useful; after it the edge computes the frame itself."""
    tensors: dict[str, np.ndarray]


def encode(payload: TensorPayload, precision: Precision = "fp16", compression: Compression = "zstd") -> bytes:
    """`payload` as bytes: float tensors at `precision`, the body compressed with `compression`."""
    if len(payload.tensors) > MAX_TENSORS:
        raise PayloadError(f"expected at most {MAX_TENSORS} tensors in a message, got {len(payload.tensors)}")
    described, bodies = [], []
    for name, array in payload.tensors.items():
        meta, body = _encode_tensor(name, np.ascontiguousarray(array), precision)
        described.append(meta)
        bodies.append(body)
    body = b"".join(bodies)
    if len(body) > MAX_BODY_BYTES:
        raise PayloadError(f"expected at most {MAX_BODY_BYTES} bytes of tensors, got {len(body)}")
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        _COMPRESSIONS[compression],
        len(described),
        payload.frame_id,
        payload.deadline,
        len(body),
    )
    return (
        header
        + b"".join(described)
        + (_zstd().ZstdCompressor(level=1).compress(body) if compression == "zstd" else body)
    )


def decode(data: bytes) -> TensorPayload:
    """The payload `data` holds; PayloadError (one line) for anything that is not a well-formed message."""
    view = memoryview(data)
    if len(view) < _HEADER.size:
        raise PayloadError(f"expected a message of at least {_HEADER.size} bytes, got {len(view)}")
    magic, version, compression, count, frame_id, deadline, body_length = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise PayloadError(f"not an offload message (magic {bytes(magic).hex()}, expected {MAGIC.hex()})")
    if version != VERSION:
        raise PayloadError(f"offload message version {version}, this side reads version {VERSION}")
    if compression not in _COMPRESSIONS.values():
        raise PayloadError(f"unknown compression code {compression}")
    if count > MAX_TENSORS or body_length > MAX_BODY_BYTES:
        raise PayloadError(
            f"expected at most {MAX_TENSORS} tensors and {MAX_BODY_BYTES} bytes, got {count} and {body_length}"
        )
    offset = _HEADER.size
    layouts = []
    for _ in range(count):
        layout, offset = _read_layout(view, offset)
        layouts.append(layout)
    if sum(layout.nbytes for layout in layouts) != body_length:
        raise PayloadError("the tensors' sizes do not add up to the body length the header gives")
    body = _body(view[offset:], compression, body_length)
    tensors: dict[str, np.ndarray] = {}
    position = 0
    for layout in layouts:
        tensors[layout.name] = layout.read(body[position : position + layout.nbytes])
        position += layout.nbytes
    return TensorPayload(frame_id, deadline, tensors)


@dataclass(frozen=True)
class _Layout:
    name: str
    dtype: np.dtype[Any]
    precision: int
    shape: tuple[int, ...]
    scale: float
    zero_point: float

    @property
    def nbytes(self) -> int:
        size = int(np.prod(self.shape, dtype=np.int64))
        if self.precision == _FP16:
            return size * 2
        if self.precision == _INT8:
            return size
        return size * self.dtype.itemsize

    def read(self, raw: bytes) -> np.ndarray:
        if self.precision == _FP16:
            return np.frombuffer(raw, np.float16).reshape(self.shape).astype(self.dtype)
        if self.precision == _INT8:
            quantised = np.frombuffer(raw, np.uint8).reshape(self.shape).astype(np.float32)
            return ((quantised - self.zero_point) * self.scale).astype(self.dtype)
        return np.frombuffer(raw, self.dtype).reshape(self.shape).copy()


def _encode_tensor(name: str, array: np.ndarray, precision: Precision) -> tuple[bytes, bytes]:
    dtype = array.dtype.name
    if dtype not in _DTYPE_CODES:
        raise PayloadError(f"tensor '{name}': cannot send dtype {dtype}")
    if array.ndim > MAX_RANK:
        raise PayloadError(f"tensor '{name}': expected rank <= {MAX_RANK}, got {array.ndim}")
    scale = zero_point = 0.0
    floating = array.dtype.kind == "f"
    if floating and precision == "fp16":
        code, body = _FP16, array.astype(np.float16).tobytes()
    elif floating and precision == "int8":
        low, high = (float(array.min()), float(array.max())) if array.size else (0.0, 0.0)
        scale = (high - low) / 255.0 or 1.0
        zero_point = float(np.round(-low / scale))
        quantised = np.clip(np.round(array / scale) + zero_point, 0, 255).astype(np.uint8)
        code, body = _INT8, quantised.tobytes()
    else:
        code, body = _AS_IS, array.tobytes()
    encoded_name = name.encode("utf-8")
    meta = (
        _NAME_LENGTH.pack(len(encoded_name))
        + encoded_name
        + _TENSOR.pack(_DTYPE_CODES[dtype], code, array.ndim)
        + b"".join(_DIM.pack(dim) for dim in array.shape)
        + _QUANT.pack(scale, zero_point)
    )
    return meta, body


def _read_layout(view: memoryview, offset: int) -> tuple[_Layout, int]:
    try:
        (name_length,) = _NAME_LENGTH.unpack_from(view, offset)
        offset += _NAME_LENGTH.size
        name = bytes(view[offset : offset + name_length]).decode("utf-8")
        if len(name.encode("utf-8")) != name_length:
            raise PayloadError("a tensor name runs past the end of the message")
        offset += name_length
        dtype_code, precision, rank = _TENSOR.unpack_from(view, offset)
        offset += _TENSOR.size
        if dtype_code not in _DTYPES or precision not in (_AS_IS, _FP16, _INT8) or rank > MAX_RANK:
            raise PayloadError(f"tensor '{name}': unknown dtype {dtype_code}, precision {precision} or rank {rank}")
        shape = tuple(_DIM.unpack_from(view, offset + index * _DIM.size)[0] for index in range(rank))
        offset += rank * _DIM.size
        scale, zero_point = _QUANT.unpack_from(view, offset)
        offset += _QUANT.size
    except (struct.error, UnicodeDecodeError) as exc:
        raise PayloadError(f"a truncated or garbled tensor description ({exc})") from None
    dtype = np.dtype(_DTYPES[dtype_code])
    if precision != _AS_IS and dtype.kind != "f":
        raise PayloadError(f"tensor '{name}': a {dtype.name} tensor cannot have been sent at reduced precision")
    return _Layout(name, dtype, precision, shape, scale, zero_point), offset


def _body(compressed: memoryview, compression: int, length: int) -> bytes:
    if compression == _COMPRESSIONS["none"]:
        if len(compressed) != length:
            raise PayloadError(f"expected a body of {length} bytes, got {len(compressed)}")
        return bytes(compressed)
    try:
        body: bytes = _zstd().ZstdDecompressor().decompress(bytes(compressed), max_output_size=length)
    except _zstd().ZstdError as exc:
        raise PayloadError(f"the body does not decompress ({exc})") from None
    if len(body) != length:
        raise PayloadError(f"expected a body of {length} bytes after decompression, got {len(body)}")
    return body


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        raise PayloadError("zstd compression needs the zstandard package: pip install 'edge-sdk[offload]'") from None
    return zstandard


def total_bytes(tensors: Mapping[str, np.ndarray]) -> int:
    """The tensors' size as they are (the uncompressed fp32 baseline a plan compares against)."""
    return sum(np.asarray(array).nbytes for array in tensors.values())
