"""GPU sessions run through ONNX Runtime's I/O binding, optionally as CUDA graphs.

`session.run` with numpy arrays allocates device inputs and outputs on every call. A `BoundSession`
keeps one binding per input signature (names, shapes, dtypes) with the device buffers it needs:
a host (numpy) input is copied into its device buffer (`OrtValue.update_inplace`, a cudaMemcpy that
runs at DMA speed from page-locked memory, see host_memory.py), an input already in GPU memory
(`DeviceArray`) is bound where it is, without a copy, and outputs come back as numpy arrays.

With CUDA graphs (the CUDA provider's `enable_cuda_graph`) ONNX Runtime records the kernels of one run
and replays them; a replay reads and writes the addresses recorded at capture. So each signature
gets fixed output buffers and its own graph id (`gpu_graph_id`), and a signature includes the address
of every device input: a caller that reuses its device buffers (as a staging ring does) is captured
once per buffer. Past MAX_CUDA_GRAPHS signatures, runs go uncaptured (`gpu_graph_id` -1).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_sdk.core.errors import ModelError

from .library import import_onnxruntime
from .options import CudaProvider, OnnxRuntimeOptions

log = logging.getLogger(__name__)

MAX_CUDA_GRAPHS = 8
"""Signatures captured as CUDA graphs per session; each holds its own input and output buffers."""
MAX_BINDINGS = 8
"""Uncaptured signatures whose bindings (and device input buffers) are kept; the oldest goes first."""
GPU_PROVIDERS = {"CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "cuda"}
"""Session providers whose memory I/O binding addresses, and the device type ONNX Runtime names it by."""
CONTROL_FLOW_OPS = frozenset({"Loop", "If", "Scan"})
"""Ops a CUDA graph cannot capture: ONNX Runtime refuses graph capture for a model that has them."""
_SKIP_CAPTURE = "-1"
_ORT_TYPE_NAMES = {"float": "float32", "double": "float64"}


@dataclass(frozen=True)
class DeviceArray:
    """An engine input already in GPU memory: its address, shape and dtype (checked like a numpy
    array's), and the object that owns the memory, kept alive while it is bound."""

    pointer: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    owner: Any


def device_array(value: object) -> DeviceArray | None:
    """`value` as a DeviceArray when it lives in GPU memory: an `onnxruntime.OrtValue` on the GPU, or
    any object with `__cuda_array_interface__` (CuPy, PyTorch, Numba); None for anything else."""
    if isinstance(value, np.ndarray):
        return None
    interface = getattr(value, "__cuda_array_interface__", None)
    if isinstance(interface, dict):
        shape = tuple(int(d) for d in interface["shape"])
        dtype = np.dtype(interface["typestr"])
        strides = interface.get("strides")
        if strides is not None and tuple(strides) != _contiguous_strides(shape, dtype.itemsize):
            raise ModelError(f"expected a C-contiguous device array, got strides {tuple(strides)} for shape {shape}")
        return DeviceArray(int(interface["data"][0]), shape, dtype, value)
    if _is_ort_value(value) and value.device_name() != "cpu":  # type: ignore[attr-defined]
        element = str(value.data_type()).removeprefix("tensor(").removesuffix(")")  # type: ignore[attr-defined]
        dtype = np.dtype(_ORT_TYPE_NAMES.get(element, element))
        return DeviceArray(int(value.data_ptr()), tuple(value.shape()), dtype, value)  # type: ignore[attr-defined]
    return None


def host_array(value: object) -> object:
    """A host `OrtValue` as numpy (its data copied); anything else unchanged."""
    return value.numpy() if _is_ort_value(value) else value  # type: ignore[attr-defined]


def _is_ort_value(value: object) -> bool:
    return type(value).__name__ == "OrtValue" and hasattr(value, "device_name")


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def binding_device(options: OnnxRuntimeOptions, session: Any) -> tuple[str, int] | None:
    """(device type, device id) when `session` takes the I/O binding path: io_binding auto and its first
    provider a GPU one; None = plain session.run (every CPU session)."""
    first = session.get_providers()[0]
    if options.io_binding == "off" or first not in GPU_PROVIDERS:
        return None
    device_id = session.get_provider_options().get(first, {}).get("device_id", "0")
    return GPU_PROVIDERS[first], int(device_id)


def cuda_graph_request(options: OnnxRuntimeOptions, providers: list[tuple[str, dict[str, Any]]]) -> bool | str:
    """What the profile asks of CUDA graphs for a session over `providers` (True, "auto" or False):
    only when CUDA comes first and io_binding is on."""
    if options.io_binding == "off" or not providers or providers[0][0] != CudaProvider.ort_name:
        return False
    cuda = next(p for p in options.execution_providers if isinstance(p, CudaProvider))
    return cuda.cuda_graph


def with_cuda_graph(providers: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """`providers` with graph capture turned on for CUDA."""
    return [
        (name, {**opts, "enable_cuda_graph": "1"} if name == CudaProvider.ort_name else opts)
        for name, opts in providers
    ]


def control_flow_ops(model_path: str) -> set[str]:
    """The Loop/If/Scan ops at the top of a saved model (which rule CUDA graphs out)."""
    import onnx

    graph = onnx.load(model_path, load_external_data=False).graph
    return {node.op_type for node in graph.node if node.op_type in CONTROL_FLOW_OPS}


class BoundSession:
    """Runs one session through I/O binding on `device_type`:`device_id`; see the module docstring.

    `cuda_graph` says the session was created with `enable_cuda_graph`. Not thread-safe: one caller
    at a time, as a runner is used.
    """

    def __init__(
        self, session: Any, output_names: list[str], device_type: str, device_id: int, cuda_graph: bool = False
    ):
        self._session = session
        self._output_names = output_names
        self._device = (device_type, device_id)
        self.cuda_graph = cuda_graph
        self._bindings: dict[tuple[Any, ...], _Binding] = {}
        self._graphs = 0
        self._warned = False

    def run(self, feed: Mapping[str, np.ndarray | DeviceArray]) -> dict[str, np.ndarray]:
        key = self._signature(feed)
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._new_binding(key, feed)
        else:
            binding.load(feed)
        self._session.run_with_iobinding(binding.io, binding.run_options)
        return dict(zip(self._output_names, binding.io.copy_outputs_to_cpu(), strict=True))

    @property
    def signatures(self) -> int:
        """How many input signatures have a binding (for tests and diagnostics)."""
        return len(self._bindings)

    @property
    def graphs(self) -> int:
        """How many signatures were given a CUDA graph."""
        return self._graphs

    def _signature(self, feed: Mapping[str, np.ndarray | DeviceArray]) -> tuple[Any, ...]:
        parts = []
        for name in sorted(feed):
            value = feed[name]
            if isinstance(value, DeviceArray):
                # A captured graph replays the addresses it recorded, so a new address needs its own graph.
                where: object = value.pointer if self.cuda_graph else "device"
            else:
                where = "host"
            parts.append((name, tuple(value.shape), value.dtype.str, where))
        return tuple(parts)

    def _new_binding(self, key: tuple[Any, ...], feed: Mapping[str, np.ndarray | DeviceArray]) -> _Binding:
        ort = import_onnxruntime()
        uncaptured = [k for k, b in self._bindings.items() if b.graph_id is None]
        if len(uncaptured) >= MAX_BINDINGS:
            del self._bindings[uncaptured[0]]
        binding = _Binding(self._session.io_binding(), self._device)
        binding.bind_inputs(feed)
        if not self.cuda_graph:
            for name in self._output_names:
                binding.io.bind_output(name, "cpu")
        else:
            self._capture_outputs(binding, ort)
        self._bindings[key] = binding
        return binding

    def _capture_outputs(self, binding: _Binding, ort: Any) -> None:
        """Give `binding` fixed device outputs and a graph id; its inputs are bound and loaded.

        The output shapes come from one uncaptured run (outputs on the device, ONNX Runtime allocates);
        `run` then does the first run under the graph id, which ONNX Runtime captures.
        """
        device_type, device_id = self._device
        probe = ort.RunOptions()
        probe.add_run_config_entry("gpu_graph_id", _SKIP_CAPTURE)
        for name in self._output_names:
            binding.io.bind_output(name, device_type, device_id)
        self._session.run_with_iobinding(binding.io, probe)
        shapes = [(value.shape(), value.element_type()) for value in binding.io.get_outputs()]
        binding.io.clear_binding_outputs()
        for name, (shape, element_type) in zip(self._output_names, shapes, strict=True):
            value = ort.OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id)
            binding.outputs.append(value)
            binding.io.bind_ortvalue_output(name, value)
        binding.run_options = ort.RunOptions()
        if self._graphs < MAX_CUDA_GRAPHS:
            binding.graph_id = self._graphs
            self._graphs += 1
            binding.run_options.add_run_config_entry("gpu_graph_id", str(binding.graph_id))
        else:
            binding.run_options.add_run_config_entry("gpu_graph_id", _SKIP_CAPTURE)
            if not self._warned:
                self._warned = True
                log.warning(
                    "CUDA graphs: %d input shapes or device buffers captured already; further ones run uncaptured",
                    MAX_CUDA_GRAPHS,
                )


class _Binding:
    """One input signature: its IOBinding, the device buffers of its host inputs, its fixed outputs."""

    def __init__(self, io: Any, device: tuple[str, int]):
        self.io = io
        self.device = device
        self.buffers: dict[str, Any] = {}
        self.bound: dict[str, DeviceArray] = {}
        self.outputs: list[Any] = []
        self.graph_id: int | None = None
        self.run_options: Any = None

    def bind_inputs(self, feed: Mapping[str, np.ndarray | DeviceArray]) -> None:
        ort = import_onnxruntime()
        device_type, device_id = self.device
        for name, value in feed.items():
            if isinstance(value, DeviceArray):
                self._bind_device(name, value)
            else:
                buffer = ort.OrtValue.ortvalue_from_shape_and_type(value.shape, value.dtype, device_type, device_id)
                buffer.update_inplace(np.ascontiguousarray(value))
                self.buffers[name] = buffer
                self.io.bind_ortvalue_input(name, buffer)

    def load(self, feed: Mapping[str, np.ndarray | DeviceArray]) -> None:
        """Put this call's inputs in place: host data into the device buffers; device inputs rebound
        (a captured signature has the same addresses, so nothing to do)."""
        for name, value in feed.items():
            if isinstance(value, DeviceArray):
                if self.graph_id is None:
                    self._bind_device(name, value)
            else:
                self.buffers[name].update_inplace(np.ascontiguousarray(value))

    def _bind_device(self, name: str, value: DeviceArray) -> None:
        device_type, device_id = self.device
        self.io.bind_input(name, device_type, device_id, value.dtype, list(value.shape), value.pointer)
        self.bound[name] = value  # keeps its owner alive while bound
