"""The INT8 hook a backend offers: how it calibrates and quantises an ONNX model, and how it runs one on
the host CPU as the reference. The toolkit (sensitivity ranking, mixed-precision search, range check)
reaches quantisation only through this, so a backend with its own quantiser (TensorRT's, Atlas's AMCT)
plugs into the same gate and search."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import onnx

    from ..calibration.settings import Int8Settings


class CalibratedRanges(Protocol):
    """What calibration found: the range of every float tensor (the quantiser's own data behind it)."""

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Tensor name -> (lowest, highest) value the quantiser will represent."""

    def __len__(self) -> int: ...


class Session(Protocol):
    """A model loaded to run on the host: `run(output_names or None, feeds)`, as ONNX Runtime's sessions."""

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[Any]: ...


class Quantizer(Protocol):
    """A backend's INT8 hook (`Backend.int8`)."""

    def prepare(self, model_path: Path, out_path: Path) -> Path:
        """The model made ready to quantise (shapes inferred, every node named); node names are what
        the other steps and a build's `excluded_nodes` refer to."""

    def calibrate(
        self, model_path: Path, samples: Iterable[Mapping[str, np.ndarray]], settings: Int8Settings
    ) -> CalibratedRanges:
        """Run the samples through the prepared model once and compute every float tensor's range."""

    def quantize(
        self,
        model_path: Path,
        ranges: CalibratedRanges,
        settings: Int8Settings,
        exclude_nodes: Sequence[str] = (),
        only_nodes: Sequence[str] | None = None,
    ) -> onnx.ModelProto:
        """A QDQ model: every quantisable node (or only `only_nodes`) except `exclude_nodes` in 8 bits."""

    def quantizable_nodes(self, model: onnx.ModelProto | Path) -> list[str]:
        """Names of the nodes the quantiser would put in 8 bits, in graph order."""

    def pass_through_op_types(self) -> frozenset[str]:
        """Op types that are 8-bit only when their input already is (ReLU, Reshape, MaxPool, ...): alone
        they change nothing, so they are neither ranked nor excluded on their own."""

    def session(self, model: onnx.ModelProto | Path, *, optimize: bool = True) -> Session:
        """The model on the host CPU: optimised, QDQ pairs run as the int8 kernels a deployed engine uses;
        not optimised, every tensor keeps its name (to read intermediate tensors)."""
