"""Run: the saved optimised graph, loaded with optimisation off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.errors import EngineBuildError, ModelError
from edge_sdk.precision import Precision

from ..runner import EngineRunner
from ..tensor_meta import TensorMeta
from .builder import OPTIMIZED_MODEL
from .library import import_onnxruntime
from .options import OnnxRuntimeOptions
from .session import provider_list, session_options

# ONNX Runtime names element types like ONNX does ("tensor(float)"); numpy names differ for a few.
_ORT_TYPE_NAMES = {"float": "float32", "double": "float64", "bool": "bool"}


class SessionRunner(EngineRunner):
    """A runner over one ONNX Runtime InferenceSession; subclasses say how the session is opened."""

    def __init__(self) -> None:
        self._session: Any = None
        self._inputs: tuple[TensorMeta, ...] = ()
        self._outputs: tuple[TensorMeta, ...] = ()
        self._output_names: list[str] = []

    def _open_session(self) -> Any:
        raise NotImplementedError

    def activate(self) -> None:
        self._session = self._open_session()
        self._inputs = tuple(_meta(arg) for arg in self._session.get_inputs())
        self._outputs = tuple(_meta(arg) for arg in self._session.get_outputs())
        self._output_names = [meta.name for meta in self._outputs]

    def deactivate(self) -> None:
        self._session = None

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return self._inputs

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return self._outputs

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._session is None:
            raise RuntimeError("runner is not active; use it as a context manager or call activate()")
        values = self._session.run(self._output_names, feed)
        return dict(zip(self._output_names, values, strict=True))


class OnnxRuntimeRunner(SessionRunner):
    """The engine of a cache entry: its saved optimised graph, loaded with optimisation off."""

    def __init__(self, entry_dir: Path, options: OnnxRuntimeOptions, precision: Precision):
        super().__init__()
        self.entry_dir = entry_dir
        self.options = options
        self.precision = precision

    def _open_session(self) -> Any:
        ort = import_onnxruntime()
        so = session_options(self.options, optimization=None)
        providers = provider_list(self.options, self.precision, self.entry_dir)
        try:
            return ort.InferenceSession(str(self.entry_dir / OPTIMIZED_MODEL), so, providers=providers)
        except Exception as exc:
            raise EngineBuildError(f"cannot load engine {self.entry_dir}: {str(exc).strip().splitlines()[0]}") from None


def _meta(arg: Any) -> TensorMeta:
    element = str(arg.type).removeprefix("tensor(").removesuffix(")")
    try:
        dtype = np.dtype(_ORT_TYPE_NAMES.get(element, element))
    except TypeError:
        raise ModelError(f"input or output '{arg.name}' has type {arg.type}, which the SDK cannot feed") from None
    return TensorMeta(arg.name, dtype, tuple(d if isinstance(d, int) else (d or None) for d in arg.shape))
