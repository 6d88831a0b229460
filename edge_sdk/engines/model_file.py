"""An ONNX model file: checked once, hashed, with its input and output metadata."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.errors import ModelError

from .tensor_meta import TensorMeta


@dataclass(frozen=True)
class ModelFile:
    path: Path
    sha256: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    opset: int

    @classmethod
    def load(cls, path: Path) -> ModelFile:
        """Read and check `path`; a missing, empty or corrupt file raises `ModelError`."""
        import onnx

        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ModelError(f"model file not found: {path}") from None
        except OSError as exc:
            raise ModelError(f"cannot read model {path}: {exc.strerror}") from None
        if not data:
            raise ModelError(f"model file is empty: {path}")
        try:
            proto = onnx.load_model_from_string(data)
            onnx.checker.check_model(proto)
        except Exception as exc:  # onnx raises DecodeError, ValidationError, ... for bad files
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"{path} is not a valid ONNX model: {first_line}") from None
        initializers = {init.name for init in proto.graph.initializer}
        return cls(
            path=path,
            sha256=hashlib.sha256(data).hexdigest(),
            inputs=tuple(TensorMeta.from_value_info(v) for v in proto.graph.input if v.name not in initializers),
            outputs=tuple(TensorMeta.from_value_info(v) for v in proto.graph.output),
            opset=max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0),
        )
