"""Which TensorRT API generation the installed version speaks, and what each one has.

Every branch of the builder and runner that depends on the version asks this object; the facts and
their sources are here, in one place. Supported: 8.5 and 8.6 (JetPack 5: the name-based I/O API of
`set_tensor_address` / `execute_async_v3` exists since 8.5), 10.x (JetPack 6) and 11.x (JetPack 7).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edge_sdk.core.errors import BackendUnavailableError

OLDEST_SUPPORTED = (8, 5)
"""Name-based tensor I/O (`IExecutionContext.set_tensor_address`, `execute_async_v3`) arrived in 8.5;
the binding-index API before it is not supported (TensorRT 8.5 release notes, "Deprecated API Lifetime")."""


@dataclass(frozen=True, order=True)
class TensorRTVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> TensorRTVersion:
        """'10.3.0.30' or '11.4.1' -> TensorRTVersion; anything else is refused with the text."""
        found = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
        if found is None:
            raise BackendUnavailableError(f"cannot read the TensorRT version {text!r}")
        return cls(int(found.group(1)), int(found.group(2)), int(found.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    # --- builder ---------------------------------------------------------------------------------------
    @property
    def needs_explicit_batch_flag(self) -> bool:
        """8.x parses ONNX only into a network made with NetworkDefinitionCreationFlag.EXPLICIT_BATCH; 10.0
        made every network explicit-batch and deprecated the flag (TensorRT 10.0 release notes)."""
        return self.major < 10

    @property
    def has_optimization_level(self) -> bool:
        """IBuilderConfig.builder_optimization_level exists since 8.6 (TensorRT 8.6 release notes)."""
        return (self.major, self.minor) >= (8, 6)

    @property
    def has_progress_monitor(self) -> bool:
        """IProgressMonitor and IBuilderConfig.progress_monitor exist since 10.0."""
        return self.major >= 10

    @property
    def has_precision_flags(self) -> bool:
        """BuilderFlag.FP16/INT8 exist until 10.x; TensorRT 11 removed them with weakly typed networks:
        precision comes from the ONNX model (an fp16 graph, Q/DQ nodes for int8)."""
        return self.major < 11

    @property
    def precision_flags_deprecated(self) -> bool:
        """BuilderFlag.FP16/INT8 (and BF16, FP8, the precision constraints) are deprecated since 10.12."""
        return (self.major, self.minor) >= (10, 12)

    @property
    def has_int8_calibrators(self) -> bool:
        """IInt8EntropyCalibrator2 and IBuilderConfig.int8_calibrator: deprecated since 10.1 (explicit
        quantisation through Q/DQ is the documented path), removed in 11."""
        return self.major < 11

    @property
    def calibrators_deprecated(self) -> bool:
        return (self.major, self.minor) >= (10, 1)

    @property
    def strongly_typed_only(self) -> bool:
        """TensorRT 11 builds strongly typed networks only (NetworkDefinitionCreationFlag.STRONGLY_TYPED, optional
        since 9.1, is kept in 11 but ignored)."""
        return self.major >= 11

    @property
    def has_strongly_typed_flag(self) -> bool:
        return (self.major, self.minor) >= (9, 1)

    # --- DLA -------------------------------------------------------------------------------------------
    def dla_problem(self, jetson_model: str) -> str | None:
        """Why this TensorRT cannot build for a DLA on `jetson_model` (the device-tree model), or None.

        8.x and 10.0-10.7 support DLA on Xavier and Orin; "TensorRT 10.7 was the last 10.x release that
        supported DLA", and 11.0-11.3 have none. 11.4.1 brings it back on Jetson AGX Orin only, with JetPack
        7.2.2; Thor has no DLA (TensorRT 11.4.1 release notes and support matrix).
        """
        model = jetson_model.lower()
        if "thor" in model:
            return "Jetson Thor has no DLA"
        if self.major < 10 or (self.major == 10 and self.minor <= 7):
            return None
        if self.major == 10:
            return f"TensorRT {self} has no DLA support (10.7 was the last 10.x with DLA)"
        if self >= TensorRTVersion(11, 4, 1):
            if "agx orin" in model or not model:
                return None
            return f"TensorRT {self} supports DLA on Jetson AGX Orin only (this board: {jetson_model})"
        return f"TensorRT {self} has no DLA support (it returns in 11.4.1, JetPack 7.2.2, on AGX Orin)"


def check_supported(version: TensorRTVersion) -> None:
    if (version.major, version.minor) < OLDEST_SUPPORTED:
        raise BackendUnavailableError(
            f"TensorRT {version} is older than {OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1]}, the oldest the tensorrt "
            "backend supports (JetPack 5.1 or newer); use the onnxruntime route of the profile"
        )
