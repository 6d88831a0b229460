"""TensorRT's entropy calibrator (IInt8EntropyCalibrator2, TensorRT 8.5-10.x; deprecated since 10.1 and
removed in 11) fed by the SDK's calibration reader, with TensorRT's calibration cache kept beside the
timing cache so a rebuild with the same model and data skips calibration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .calibration_batches import CalibrationBatches
from .cuda_runtime import CudaRuntime
from .timing_cache import read_bytes, write_atomically


def make_entropy_calibrator(trt: Any, batches: CalibrationBatches, cuda: CudaRuntime, cache_path: Path) -> Any:
    class EntropyCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.stream = cuda.stream()
            self.buffers = {name: cuda.device_alloc(size) for name, size in batches.nbytes().items()}
            self.remaining = iter(batches)

        def get_batch_size(self) -> int:
            return batches.batch_size

        def get_batch(self, names: list[str]) -> list[int] | None:
            batch = next(self.remaining, None)
            if batch is None:
                return None  # TensorRT's signal that calibration data ran out
            for name in names:
                cuda.copy_to_device(self.buffers[name].pointer, batch[name], self.stream)
            self.stream.synchronize()
            return [self.buffers[name].pointer for name in names]

        def read_calibration_cache(self) -> bytes | None:
            return read_bytes(cache_path) or None

        def write_calibration_cache(self, cache: Any) -> None:
            write_atomically(cache_path, bytes(cache))

        def free(self) -> None:
            for buffer in self.buffers.values():
                buffer.free()
            self.stream.destroy()

    return EntropyCalibrator()
