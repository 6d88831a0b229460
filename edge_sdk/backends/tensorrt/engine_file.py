"""The engine's files in its cache entry: the serialised plan, and a header beside it saying what the
plan was built with. TensorRT plans load only on the TensorRT version and the GPU (or DLA) they were built
for, and its own header is undocumented (NVIDIA/TensorRT#3073: no API reads it), so the SDK writes its own
and checks it before deserialising: a mismatch is one line and a rebuild, never a TensorRT crash."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ModelError
from edge_sdk.core.tensor_meta import TensorMeta

PLAN = "engine.plan"
HEADER = "engine.json"
HEADER_FORMAT = 1


@dataclass(frozen=True)
class EngineTarget:
    """What a plan is bound to."""

    tensorrt_version: str
    gpu: str
    compute_capability: str
    dla_core: int | None
    jetson_model: str | None

    def describe(self) -> str:
        where = f"DLA core {self.dla_core} of " if self.dla_core is not None else ""
        board = f" ({self.jetson_model})" if self.jetson_model else ""
        return (
            f"TensorRT {self.tensorrt_version}, {where}{self.gpu} sm_{self.compute_capability.replace('.', '')}{board}"
        )


@dataclass(frozen=True)
class EngineHeader:
    target: EngineTarget
    precision: str
    build_plan: dict[str, Any]
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]

    def write(self, directory: Path) -> None:
        data = {
            "format": HEADER_FORMAT,
            "target": asdict(self.target),
            "precision": self.precision,
            "build_plan": self.build_plan,
            "inputs": [meta.to_dict() for meta in self.inputs],
            "outputs": [meta.to_dict() for meta in self.outputs],
        }
        (directory / HEADER).write_text(json.dumps(data, indent=2))

    @classmethod
    def read(cls, directory: Path) -> EngineHeader:
        path = directory / HEADER
        try:
            data = json.loads(path.read_text())
            if data.get("format") != HEADER_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {HEADER_FORMAT}")
            return cls(
                EngineTarget(**data["target"]),
                str(data["precision"]),
                dict(data["build_plan"]),
                tuple(TensorMeta.from_dict(meta) for meta in data["inputs"]),
                tuple(TensorMeta.from_dict(meta) for meta in data["outputs"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"{path}: not a TensorRT engine header the SDK wrote ({exc})") from None


def target_mismatch(built: EngineTarget, here: EngineTarget) -> str | None:
    """Why a plan built for `built` cannot load `here`, in one line; None when it can. The TensorRT
    version must match to the patch (plans are not portable across versions unless built version-
    compatible, which the SDK does not), and so must the GPU's compute capability, its name, the DLA
    core and the Jetson model."""
    differences = [
        f"{label} {was!r} -> {now!r}"
        for label, was, now in (
            ("TensorRT", built.tensorrt_version, here.tensorrt_version),
            ("compute capability", built.compute_capability, here.compute_capability),
            ("GPU", built.gpu, here.gpu),
            ("DLA core", built.dla_core, here.dla_core),
            ("Jetson model", built.jetson_model, here.jetson_model),
        )
        if was != now
    ]
    if not differences:
        return None
    return f"the engine was built for {built.describe()}; here: {', '.join(differences)}"
