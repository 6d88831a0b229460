"""Calibration samples as the batches TensorRT's INT8 calibrator asks for: one contiguous array per input,
`batch_size` samples deep (a calibrator needs full batches; the rest of the samples is left out and
counted)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from edge_sdk.core.errors import ConfigError

from ..calibration.reader import Sample


@dataclass(frozen=True)
class CalibrationBatches:
    samples: Sequence[Sample]
    batch_size: int

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"calibration batch size must be 1 or more, got {self.batch_size}")
        if len(self.samples) < self.batch_size:
            raise ConfigError(
                f"{len(self.samples)} calibration samples cannot fill one batch of {self.batch_size}; give more data"
            )

    def __len__(self) -> int:
        return len(self.samples) // self.batch_size

    @property
    def left_out(self) -> int:
        return len(self.samples) % self.batch_size

    def nbytes(self) -> dict[str, int]:
        """Bytes of one batch per input: the device buffer the calibrator copies each batch into."""
        return {name: int(array.nbytes) * self.batch_size for name, array in self.samples[0].items()}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            chunk = self.samples[start : start + self.batch_size]
            yield {name: np.ascontiguousarray(np.concatenate([s[name] for s in chunk])) for name in chunk[0]}
