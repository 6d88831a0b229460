"""Calibration samples from an .npz archive: one array per model input (or a single array), optional labels."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.tensor_meta import TensorMeta

from .reader import Sample, check_sample, spread

LABELS_KEY = "labels"


class NpzReader:
    """Samples along the first axis of each array; `labels` (class ids, one per sample) when present."""

    def __init__(self, path: Path, inputs: Sequence[TensorMeta], limit: int | None = None):
        self.path = path
        self.limit = limit
        self.description = str(path)
        arrays = _load(path)
        labels = arrays.pop(LABELS_KEY, None)
        self._arrays = _by_input(arrays, inputs, path)
        counts = {name: len(array) for name, array in self._arrays.items()}
        if len(set(counts.values())) != 1:
            raise ConfigError(f"calibration data {path}: expected the same number of samples per input, got {counts}")
        count = next(iter(counts.values()))
        if count == 0:
            raise ConfigError(f"calibration data {path}: expected at least one sample, got 0")
        if labels is not None:
            if labels.ndim == 2 and labels.shape[1] == 1:
                labels = labels[:, 0]
            if labels.ndim != 1 or len(labels) != count or not np.issubdtype(labels.dtype, np.integer):
                raise ConfigError(
                    f"calibration data {path}: expected '{LABELS_KEY}' to hold {count} integer class ids, "
                    f"got {labels.dtype.name} of shape {labels.shape}"
                )
        self._indices = spread(count, limit)
        self.labels = labels[self._indices] if labels is not None else None
        check_sample(self._sample(self._indices[0]), inputs, self.description)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        settings = {"reader": "npz", "limit": self.limit, "inputs": sorted(self._arrays)}
        digest.update(json.dumps(settings, sort_keys=True).encode())
        return digest.hexdigest()

    def __len__(self) -> int:
        return len(self._indices)

    def __iter__(self) -> Iterator[Sample]:
        for index in self._indices:
            yield self._sample(index)

    def _sample(self, index: int) -> Sample:
        return {name: np.ascontiguousarray(array[index : index + 1]) for name, array in self._arrays.items()}


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an archive")
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ConfigError(f"cannot read calibration data {path}: expected an .npz archive ({exc})") from None


def _by_input(arrays: dict[str, np.ndarray], inputs: Sequence[TensorMeta], path: Path) -> dict[str, np.ndarray]:
    """Arrays keyed by input name, each with a sample axis first and the input's float type."""
    names = [meta.name for meta in inputs]
    if set(arrays) == set(names):
        chosen = arrays
    elif len(arrays) == 1 and len(inputs) == 1:
        chosen = {names[0]: next(iter(arrays.values()))}
    else:
        raise ConfigError(
            f"calibration data {path}: expected arrays named after the model inputs {names} "
            f"(or a single array), got {sorted(arrays) or 'no arrays'}"
        )
    metas = {meta.name: meta for meta in inputs}
    result = {}
    for name, array in chosen.items():
        meta = metas[name]
        if array.ndim == len(meta.shape) - 1:  # one sample without its batch axis
            array = array[np.newaxis]
        if array.ndim != len(meta.shape):
            raise ConfigError(
                f"calibration data {path}: input '{name}' expects samples shaped like {meta.describe()}, "
                f"got an array of shape {array.shape}"
            )
        if array.dtype != meta.dtype and array.dtype.kind == "f" and meta.dtype.kind == "f":
            array = array.astype(meta.dtype)  # float64 from numpy code is a harmless mismatch
        result[name] = array
    return result
