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
        """Read and parse `path`; a missing, empty or undecodable file raises `ModelError`.

        The full ONNX check is left to `check()`, which builds call: a cached start skips it.
        """
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
            if not proto.graph.node:
                raise ValueError("the graph has no nodes")
        except Exception as exc:  # onnx raises DecodeError and others for bad files
            raise ModelError(f"{path} is not a valid ONNX model: {_first_line(exc)}") from None
        initializers = {init.name for init in proto.graph.initializer}
        return cls(
            path=path,
            sha256=hashlib.sha256(data).hexdigest(),
            inputs=tuple(TensorMeta.from_value_info(v) for v in proto.graph.input if v.name not in initializers),
            outputs=tuple(TensorMeta.from_value_info(v) for v in proto.graph.output),
            opset=max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0),
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
            raise ModelError(f"{self.path} is not a valid ONNX model: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
