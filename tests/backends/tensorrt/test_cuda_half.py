"""The tensorrt backend's CUDA half on a real GPU, through both bindings: page-locked and device buffers,
stream ordering, async copies, events, CUDA graph capture and replay, host registration of a FrameRing
slot, and the runner's DeviceIO feeding a CUDA kernel that stands in for an engine (kernel_engine.py).
Marked `cuda`: skipped, with the reason, where there is no CUDA device (run them on the NVIDIA host:
tools/gpu/tensorrt_cuda.sh)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.backends.tensorrt.cuda_runtime import CudaRuntime, open_cuda
from edge_sdk.backends.tensorrt.device_io import DeviceIO
from edge_sdk.core.errors import ModelError
from edge_sdk.pipeline.frame_ring import FrameRing, RingLayout
from tools.harness.kernel_engine import KernelEngine, expected

pytestmark = pytest.mark.cuda

BINDINGS = ["cuda-python", "pycuda"]
FULL_HD = (1080, 1920, 3)


@pytest.fixture(params=BINDINGS)
def cuda(request: pytest.FixtureRequest) -> CudaRuntime:
    try:
        return open_cuda(request.param)
    except Exception as exc:  # one binding missing must not hide the other's results
        pytest.skip(f"{request.param}: {exc}")


def random_frame(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, FULL_HD, dtype=np.uint8)


def test_the_device_is_described(cuda: CudaRuntime) -> None:
    device = cuda.device()
    assert device.name and device.compute_capability[0] >= 5


def test_a_pinned_frame_goes_to_the_device_and_back_unchanged(cuda: CudaRuntime) -> None:
    frame = random_frame()
    pinned = cuda.pinned_empty(FULL_HD, np.uint8)
    pinned[...] = frame
    back = cuda.pinned_empty(FULL_HD, np.uint8)
    back[...] = 0
    device = cuda.device_alloc(frame.nbytes)
    stream = cuda.stream()
    cuda.copy_to_device(device.pointer, pinned, stream)
    cuda.copy_to_host(back, device.pointer, stream)
    stream.synchronize()
    assert np.array_equal(back, frame)
    device.free()
    stream.destroy()


def test_copies_on_one_stream_run_in_order_and_events_time_them(cuda: CudaRuntime) -> None:
    """Three copies enqueued back to back on one stream: the last sees the second's result, and events
    recorded around them measure a positive time."""
    size = 8 << 20
    first, second = cuda.pinned_empty((size,), np.uint8), cuda.pinned_empty((size,), np.uint8)
    first[...] = 7
    second[...] = 0
    a, b = cuda.device_alloc(size), cuda.device_alloc(size)
    stream = cuda.stream()
    start, end = cuda.event(), cuda.event()
    start.record(stream)
    cuda.copy_to_device(a.pointer, first, stream)
    cuda.copy_device_to_device(b.pointer, a.pointer, size, stream)
    cuda.copy_to_host(second, b.pointer, stream)
    end.record(stream)
    end.synchronize()
    assert second.min() == 7 and second.max() == 7
    assert end.milliseconds_since(start) > 0
    for buffer in (a, b):
        buffer.free()


def test_a_framering_slot_registered_in_place_copies_a_1080p_frame_both_ways(cuda: CudaRuntime) -> None:
    ring = FrameRing.create(RingLayout(slots=2, max_height=1080, max_width=1920), token=f"cudatest{cuda.name[:2]}")
    slot = None
    try:
        slot = ring.frame_buffer(1, 1080, 1920)
        slot[...] = random_frame(1)
        registered = cuda.register_host(ring.pixels, mapped=True)
        assert registered.device_pointer is not None
        device = cuda.device_alloc(slot.nbytes)
        back = cuda.pinned_empty(FULL_HD, np.uint8)
        stream = cuda.stream()
        cuda.copy_to_device(device.pointer, slot, stream)
        cuda.copy_to_host(back, device.pointer, stream)
        stream.synchronize()
        assert np.array_equal(back, slot)
        registered.unregister()
        device.free()
    finally:
        del slot
        ring.close()


@pytest.mark.parametrize("use_graph", [False, True])
def test_the_runner_feeds_a_static_engine_bit_exact_with_and_without_a_cuda_graph(
    cuda: CudaRuntime, use_graph: bool
) -> None:
    engine = KernelEngine((1, 3, 224, 224))
    io = DeviceIO(cuda, engine, cuda_graph=use_graph)
    try:
        for seed in range(5):
            x = np.random.default_rng(seed).standard_normal((1, 3, 224, 224), dtype=np.float32)
            assert np.array_equal(io.run({"input": x})["output"], expected(x))
        assert (io.graph is not None) == use_graph
        # with a graph, the engine was enqueued twice (the plain first call and the capture), then replayed
        assert engine.enqueued == (2 if use_graph else 5)
    finally:
        io.close()


def test_the_runner_takes_a_new_batch_size_per_call_on_a_dynamic_engine(cuda: CudaRuntime) -> None:
    engine = KernelEngine((4, 3, 32, 32), dynamic=True, max_batch=4)
    io = DeviceIO(cuda, engine, cuda_graph=True)  # dynamic shapes run without a graph
    try:
        for batch in (1, 4, 2, 4):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32), dtype=np.float32)
            out = io.run({"input": x})["output"]
            assert out.shape == (batch, 3, 32, 32) and np.array_equal(out, expected(x))
        assert io.graph is None
        with pytest.raises(ModelError, match=r"takes 1\.\.4"):
            io.run({"input": np.zeros((5, 3, 32, 32), np.float32)})
    finally:
        io.close()


def test_a_frame_in_a_registered_ring_reaches_the_engine_without_a_copy(cuda: CudaRuntime) -> None:
    """Zero-copy: the engine is pointed at the ring slot's mapped device address, not the staging buffer,
    and still computes the right output."""
    ring = FrameRing.create(RingLayout(slots=2, max_height=1080, max_width=1920), token=f"cudazc{cuda.name[:2]}")
    engine = KernelEngine((1, *FULL_HD), dtype=np.uint8)
    io = DeviceIO(cuda, engine)
    slot = None
    try:
        registered = io.register_host_memory(ring.pixels)
        slot = ring.frame_buffer(0, 1080, 1920)
        slot[...] = random_frame(2)
        out = io.run({"input": slot[None]})["output"]
        assert np.array_equal(out, expected(slot[None]))
        assert engine.addresses["input"] == registered.device_pointer  # slot 0 starts the pixel memory
        staged = random_frame(3)[None]  # an array outside the ring goes through the staging copy
        assert np.array_equal(io.run({"input": staged})["output"], expected(staged))
        assert engine.addresses["input"] == io.tensors["input"].device.pointer
    finally:
        io.close()
        del slot
        ring.close()
