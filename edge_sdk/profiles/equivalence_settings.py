"""How far an engine may drift from the model the user gave before the build refuses it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_GATE_FRAMES = 64


class EquivalenceSettings(BaseModel):
    """The equivalence gate's tolerances on one kind of box; a profile's `equivalence:` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_drop: float = Field(
        5.0,
        ge=0.0,
        le=100.0,
        description="Points (percent) the engine may lose against the FP32 model on the CPU: matched boxes for "
        "detection (at least one box: a few frames hold few), top-1 agreement for classification. An int8 "
        "build may also lose what its int8 gate allows.",
    )
    min_cosine: float = Field(
        0.99,
        ge=0.0,
        le=1.0,
        description="Cosine similarity each output must keep with the FP32 model (not for detection, whose "
        "outputs come in NMS order).",
    )
    frames: int = Field(
        8, ge=1, le=MAX_GATE_FRAMES, description=f"Frames the gate runs, 1..{MAX_GATE_FRAMES} (each build)."
    )
