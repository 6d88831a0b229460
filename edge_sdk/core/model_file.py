"""An ONNX model file: checked once, hashed, with its input and output metadata."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ModelError, first_line
from edge_sdk.core.tensor_meta import TensorMeta

MAX_MODEL_BYTES = 2 * 1024**3
"""Largest model file the SDK reads: 2 GiB, protobuf's own limit for one ONNX file (larger models keep
their weights in external data files, which are not read through here)."""


def read_model_bytes(path: Path, max_bytes: int = MAX_MODEL_BYTES) -> bytes:
    """The bytes of a model file, refused with a one-line `ModelError` before reading when it is not a
    regular file (`/dev/zero`, a folder, a FIFO, a socket) or is larger than `max_bytes`.

    The type and size are taken from the opened descriptor (opened non-blocking, so a FIFO without a
    writer cannot hang the open), so a file swapped between a check and the read is still caught;
    at most `max_bytes + 1` bytes are ever read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelError(f"model file not found: {path}") from None
    except IsADirectoryError:
        raise ModelError(f"expected a regular model file, got a folder: {path}") from None
    except OSError as exc:
        raise ModelError(f"cannot read model {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ModelError(f"expected a regular model file, got {_file_kind(info.st_mode)}: {path}")
        if info.st_size > max_bytes:
            raise ModelError(
                f"model file {path} is {_gib(info.st_size)}; expected at most {_gib(max_bytes)} "
                "(ONNX's limit for one file: keep larger weights in external data)"
            )
        with os.fdopen(fd, "rb") as file:
            fd = -1  # the file object owns it now
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise ModelError(f"cannot read model {path}: {exc.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:  # it grew while being read
        raise ModelError(f"model file {path} is larger than {_gib(max_bytes)}; expected at most that")
    return data


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _gib(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB"


@dataclass(frozen=True)
class ModelFile:
    path: Path
    sha256: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    opset: int

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelFile:
        """Read and parse `path`; a missing, empty, oversized, undecodable file or one that is not a
        regular file (a device, a folder, a FIFO) raises `ModelError` (see `read_model_bytes`).

        The full ONNX check is left to `check()`, which builds call: a cached start skips it.
        """
        path = Path(path)
        return cls.parse(path, read_model_bytes(path))

    @classmethod
    def parse(cls, path: Path, data: bytes) -> ModelFile:
        """The model whose bytes, read from `path`, are `data` (parsed with onnx)."""
        return cls.parse_with_proto(path, data)[0]

    @classmethod
    def parse_with_proto(cls, path: Path, data: bytes) -> tuple[ModelFile, Any]:
        """`parse`, and the onnx.ModelProto it parsed, for a caller that reads more of the graph."""
        import onnx

        if not data:
            raise ModelError(f"model file is empty: {path}")
        try:
            proto = onnx.load_model_from_string(data)
            if not proto.graph.node:
                raise ValueError("the graph has no nodes")
        except Exception as exc:  # onnx raises DecodeError and others for bad files
            raise ModelError(f"{path} is not a valid ONNX model: {first_line(exc)}") from None
        initializers = {init.name for init in proto.graph.initializer}
        model = cls(
            path=path,
            sha256=hashlib.sha256(data).hexdigest(),
            inputs=tuple(TensorMeta.from_value_info(v) for v in proto.graph.input if v.name not in initializers),
            outputs=tuple(TensorMeta.from_value_info(v) for v in proto.graph.output),
            opset=max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0),
        )
        return model, proto

    def to_dict(self) -> dict[str, Any]:
        """What was read from the model (not where it lies), as JSON-ready values."""
        return {
            "sha256": self.sha256,
            "inputs": [meta.to_dict() for meta in self.inputs],
            "outputs": [meta.to_dict() for meta in self.outputs],
            "opset": self.opset,
        }

    @classmethod
    def from_dict(cls, path: Path, data: dict[str, Any]) -> ModelFile:
        """The model at `path` as `to_dict` described it; KeyError, TypeError or ValueError if malformed."""
        return cls(
            path=path,
            sha256=str(data["sha256"]),
            inputs=tuple(TensorMeta.from_dict(meta) for meta in data["inputs"]),
            outputs=tuple(TensorMeta.from_dict(meta) for meta in data["outputs"]),
            opset=int(data["opset"]),
        )

    @property
    def inputs_by_name(self) -> dict[str, TensorMeta]:
        return {meta.name: meta for meta in self.inputs}

    def check(self) -> None:
        """Run the ONNX checker; a model that decodes but is invalid raises `ModelError`."""
        import onnx

        try:
            onnx.checker.check_model(str(self.path))
        except Exception as exc:  # ValidationError and friends
            raise ModelError(f"{self.path} is not a valid ONNX model: {first_line(exc)}") from None
