"""Calibration data: a small reader protocol (one sample per item, a batch of one), and the samples in memory.

The readers are shared by every backend that calibrates (ONNX Runtime here; TensorRT and Atlas reuse them).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.progress import track
from edge_sdk.core.tensor_meta import TensorMeta

Sample = dict[str, np.ndarray]
"""One model input feed: input name -> array with a batch axis of one."""


@runtime_checkable
class CalibrationReader(Protocol):
    """Where calibration samples come from. Iterating yields feeds ready for the model's inputs."""

    description: str
    labels: np.ndarray | None
    """Class ids, one per yielded sample, when the data carries them (else None)."""

    def sha256(self) -> str:
        """Hash of the data's contents and of the reader's settings: the calibration part of a cache key."""
        ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Sample]: ...


@runtime_checkable
class RebindableReader(CalibrationReader, Protocol):
    """A reader that can feed a model whose inputs changed (frames, once preprocessing is folded into the graph)."""

    def bind(self, inputs: Sequence[TensorMeta]) -> CalibrationReader: ...


@dataclass(frozen=True)
class SampleSet:
    """Samples held in memory (and their labels), checked against the inputs of the model they feed."""

    samples: tuple[Sample, ...]
    labels: np.ndarray | None = None
    description: str = "samples"

    @classmethod
    def from_reader(
        cls, reader: CalibrationReader, inputs: Sequence[TensorMeta] | None = None, limit: int | None = None
    ) -> SampleSet:
        """Read every sample; with `inputs`, a frame reader is first bound to them and each sample checked."""
        if inputs is not None and isinstance(reader, RebindableReader):
            reader = reader.bind(inputs)
        samples: list[Sample] = []
        total = min(len(reader), limit) if limit is not None else len(reader)
        for sample in track(reader, "reading calibration data", total):
            if limit is not None and len(samples) >= limit:
                break
            if inputs is not None:
                check_sample(sample, inputs, reader.description)
            samples.append(sample)
        if not samples:
            raise ConfigError(f"calibration data {reader.description} yielded no samples")
        labels = reader.labels[: len(samples)] if reader.labels is not None else None
        return cls(tuple(samples), labels, reader.description)

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def split(self, holdout_every: int) -> tuple[SampleSet, SampleSet]:
        """(calibration, held out): every `holdout_every`-th sample is held out, the rest calibrate."""
        if holdout_every < 2:
            raise ConfigError(f"holdout_every: expected at least 2, got {holdout_every}")
        if len(self) < 2:
            raise ConfigError(
                f"calibration data {self.description}: expected at least 2 samples (some calibrate, some check "
                f"accuracy), got {len(self)}"
            )
        held = [i for i in range(len(self)) if i % holdout_every == holdout_every - 1] or [len(self) - 1]
        kept = [i for i in range(len(self)) if i not in set(held)]
        return self.subset(kept, "calibration"), self.subset(held, "held out")

    def subset(self, indices: Sequence[int], part: str) -> SampleSet:
        labels = self.labels[list(indices)] if self.labels is not None else None
        return SampleSet(tuple(self.samples[i] for i in indices), labels, f"{self.description} ({part})")


def check_sample(sample: Sample, inputs: Sequence[TensorMeta], description: str) -> None:
    """Raise ConfigError ('expected X, got Y') when `sample` does not feed exactly these inputs."""
    expected = {meta.name: meta for meta in inputs}
    if set(sample) != set(expected):
        raise ConfigError(f"calibration data {description}: expected inputs {sorted(expected)}, got {sorted(sample)}")
    for name, array in sample.items():
        problem = expected[name].accepts(array)
        if problem:
            raise ConfigError(f"calibration data {description}: {problem}")


def spread(count: int, limit: int | None) -> list[int]:
    """Indices of at most `limit` items spread evenly over `count` (all of them when there are fewer)."""
    if limit is None or count <= limit:
        return list(range(count))
    return sorted({int(i) for i in np.linspace(0, count - 1, limit).round()})
