"""Run: the saved optimised graph, loaded with optimisation off; GPU sessions through I/O binding."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from edge_sdk.core.errors import EdgeSDKError, EngineBuildError, InferenceError, ModelError, first_line
from edge_sdk.core.precision import Precision
from edge_sdk.core.tensor_meta import TensorMeta

from ..runner import EngineRunner
from .builder import OPTIMIZED_MODEL
from .host_memory import is_pinned
from .io_binding import (
    BoundSession,
    DeviceArray,
    binding_device,
    control_flow_ops,
    cuda_graph_request,
    device_array,
    host_array,
    with_cuda_graph,
)
from .options import OnnxRuntimeOptions
from .session import open_session, run_provider_list, session_options
from .shape_sessions import ShapeSessions

log = logging.getLogger(__name__)

Feeding = Literal["session.run", "io_binding", "cuda_graph"]

# ONNX Runtime names element types like ONNX does ("tensor(float)"); numpy names differ for a few.
_ORT_TYPE_NAMES = {"float": "float32", "double": "float64", "bool": "bool"}


class SessionRunner(EngineRunner):
    """A runner over one ONNX Runtime InferenceSession; subclasses say how the session is opened."""

    def __init__(self) -> None:
        self._session: Any = None
        self._bound: BoundSession | None = None
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
        self._bound = None
        self._session = None

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return self._inputs

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return self._outputs

    @property
    def providers(self) -> list[str]:
        """The providers the open session runs on, in priority order."""
        return list(self._session.get_providers()) if self._session is not None else []

    @property
    def feeding(self) -> Feeding:
        """How inputs reach the session: plain session.run, I/O binding, or I/O binding replaying CUDA graphs."""
        if self._bound is None:
            return "session.run"
        return "cuda_graph" if self._bound.cuda_graph else "io_binding"

    def infer(self, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run on numpy arrays or, when `feeding` is not session.run, on inputs already in GPU memory
        (an onnxruntime.OrtValue on the GPU, or a CuPy/PyTorch array: anything with
        `__cuda_array_interface__`, C-contiguous, its writes finished). Outputs are numpy arrays."""
        inputs: dict[str, Any] = {}
        for name, value in feed.items():
            inputs[name] = device_array(value) or host_array(value)
        return super().infer(inputs)

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._session is None:
            raise RuntimeError("runner is not active; use it as a context manager or call activate()")
        try:
            # Pageable numpy inputs go through session.run unless a CUDA graph replays: on the H200,
            # binding them was no faster (detector batch 1: 211 vs 279 items/s; the CNN within 2%),
            # while device and page-locked inputs gained (the CNN at batch 256: 20,546 and 16,789 vs 7,314).
            if self._bound is not None and (self._bound.cuda_graph or any(map(_bindable, feed.values()))):
                return self._bound.run(feed)
            for name, value in feed.items():
                if isinstance(value, DeviceArray):
                    raise ModelError(
                        f"input '{name}' is in GPU memory, but this engine runs through session.run on "
                        f"{self._session.get_providers()[0]}: feed a numpy array"
                    )
            values = self._session.run(self._output_names, feed)
        except EdgeSDKError:
            raise
        except Exception as exc:  # onnxruntime's own exceptions: out of device memory, a kernel failure
            shape = ", ".join(f"{name} {tuple(getattr(value, 'shape', ()))}" for name, value in feed.items())
            raise InferenceError(
                f"the engine failed to run on {self._session.get_providers()[0]} ({shape}): {first_line(exc)}"
            ) from None
        return dict(zip(self._output_names, values, strict=True))


class OnnxRuntimeRunner(SessionRunner):
    """The engine of a cache entry: its saved optimised graph, loaded with optimisation off."""

    def __init__(self, entry_dir: Path, options: OnnxRuntimeOptions, precision: Precision):
        super().__init__()
        self.entry_dir = entry_dir
        self.options = options
        self.precision = precision
        self._cuda_graph = False
        self._shapes: ShapeSessions | None = None

    def activate(self) -> None:
        self._cuda_graph = False
        super().activate()
        self._bound = self._binding(self._session)
        self._shapes = ShapeSessions(self.options.sessions_per_engine(self.providers[0]))

    def deactivate(self) -> None:
        super().deactivate()
        self._shapes = None

    @property
    def sessions_open(self) -> int:
        """How many sessions this runner holds (one per recent input shape; see `shape_sessions`)."""
        if self._session is None:
            return 0
        return max(1, len(self._shapes)) if self._shapes is not None else 1

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._shapes is not None and self._shapes.limit > 1:
            self._session, self._bound = self._shapes.session_for(feed, (self._session, self._bound), self._open_shape)
        return super()._infer(feed)

    def _open_shape(self) -> tuple[Any, BoundSession | None]:
        session = self._open_session()
        return session, self._binding(session)

    def _binding(self, session: Any) -> BoundSession | None:
        device = binding_device(self.options, session)
        if device is None:
            return None
        return BoundSession(session, self._output_names, *device, cuda_graph=self._cuda_graph)

    def _open_session(self) -> Any:
        so = session_options(self.options, optimization=None)
        providers = run_provider_list(self.options, self.precision, self.entry_dir)
        model = str(self.entry_dir / OPTIMIZED_MODEL)
        graphs = cuda_graph_request(self.options, providers)
        if graphs == "auto" and (found := control_flow_ops(model)):
            log.info("cuda_graph auto: not for %s, it has %s", self.entry_dir.name, ", ".join(sorted(found)))
            graphs = False
        if graphs:
            try:
                session = open_session(model, so, with_cuda_graph(providers))
            except EdgeSDKError:
                raise
            except Exception as exc:
                if graphs is True:
                    raise EngineBuildError(
                        f"cannot load engine {self.entry_dir} with cuda_graph: true (CUDA graphs need every node on "
                        f"CUDA and no Loop/If/Scan; set cuda_graph: auto or false): {first_line(exc)}"
                    ) from None
                log.info("cuda_graph auto: not for %s: %s", self.entry_dir.name, first_line(exc))
            else:
                self._cuda_graph = True
                return session
        try:
            return open_session(model, so, providers)
        except EdgeSDKError:
            raise
        except Exception as exc:
            raise EngineBuildError(f"cannot load engine {self.entry_dir}: {first_line(exc)}") from None


def _bindable(value: object) -> bool:
    return isinstance(value, DeviceArray) or (isinstance(value, np.ndarray) and is_pinned(value))


def _meta(arg: Any) -> TensorMeta:
    element = str(arg.type).removeprefix("tensor(").removesuffix(")")
    try:
        dtype = np.dtype(_ORT_TYPE_NAMES.get(element, element))
    except TypeError:
        raise ModelError(f"input or output '{arg.name}' has type {arg.type}, which the SDK cannot feed") from None
    return TensorMeta(arg.name, dtype, tuple(d if isinstance(d, int) else (d or None) for d in arg.shape))
