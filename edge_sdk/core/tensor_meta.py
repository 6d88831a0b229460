"""Name, dtype and shape of an engine input or output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_sdk.core.errors import ConfigError

Dim = int | str | None
"""A fixed size, a symbolic name (dynamic), or None (unknown)."""


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: np.dtype[Any]
    shape: tuple[Dim, ...]

    @classmethod
    def from_value_info(cls, value_info: Any) -> TensorMeta:
        from onnx import helper

        tensor_type = value_info.type.tensor_type
        dims: list[Dim] = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or None)
        return cls(value_info.name, np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)), tuple(dims))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype.name, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorMeta:
        """The tensor `to_dict` described; KeyError, TypeError or ValueError if malformed."""
        shape = tuple(dim if dim is None or isinstance(dim, int | str) else int(dim) for dim in data["shape"])
        return cls(str(data["name"]), np.dtype(data["dtype"]), shape)

    def describe(self) -> str:
        dims = "x".join(str(d) if isinstance(d, int) else "?" for d in self.shape)
        return f"{self.name}: {self.dtype.name}[{dims}]"

    def accepts(self, array: np.ndarray) -> str | None:
        """None when `array` fits this input, else what is wrong, as 'expected X, got Y'."""
        if array.dtype != self.dtype:
            return f"input '{self.name}': expected dtype {self.dtype.name}, got {array.dtype.name}"
        if len(array.shape) != len(self.shape):
            return (
                f"input '{self.name}': expected {len(self.shape)} dimensions {self.describe()}, got shape {array.shape}"
            )
        for axis, (want, got) in enumerate(zip(self.shape, array.shape, strict=True)):
            if isinstance(want, int) and want != got:
                return f"input '{self.name}': expected size {want} on axis {axis} ({self.describe()}), got shape {array.shape}"
        return None


def select_input(inputs: Sequence[TensorMeta], name: str | None, key: str = "model.input") -> TensorMeta:
    """The input images go to: the one named by the config `key`, or the model's only input."""
    if name is not None:
        for meta in inputs:
            if meta.name == name:
                return meta
        raise ConfigError(f"{key}: the model has no input '{name}'; it has {[m.name for m in inputs]}")
    if len(inputs) != 1:
        raise ConfigError(f"model has {len(inputs)} inputs {[m.name for m in inputs]}; set {key} to one of them")
    return inputs[0]
