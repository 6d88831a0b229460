"""What the graph passes of an engine build are asked to do, and its fingerprint for the cache key."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.preprocess import PreprocessSpec

GRAPH_PASSES_VERSION = 2
"""Bump when any pass changes the graph it writes, so cached engines built by the old passes rebuild."""


FRAME_INPUT = "frame"
"""Name of the folded model's input: raw BGR uint8 NHWC frames."""


@dataclass(frozen=True)
class GraphOptions:
    """preprocess: fold this preprocessing into the graph (None = leave the input as it is);
    input_name: the input frames go to (None = the model's only input);
    batch: a fixed batch size, None for a dynamic batch axis "N", or "keep" the model's own;
    integer_resize: a folded resize runs on the raw uint8 NHWC frame (exact on ONNX Runtime's CPU
    kernels only), else in float NCHW (exact on every provider);
    ssd_split: cut a TF Object Detection API SSD graph after its box head (graph/ssd_split.py): the
    engine outputs raw box encodings and class scores, and the host decodes them."""

    preprocess: PreprocessSpec | None = None
    input_name: str | None = None
    batch: int | Literal["keep"] | None = "keep"
    integer_resize: bool = True
    ssd_split: bool = False

    def __post_init__(self) -> None:
        batch = self.batch
        if batch is None or batch == "keep":
            return
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"graph batch: expected a positive integer, None (dynamic) or 'keep', got {batch!r}")

    def to_dict(self) -> dict[str, object]:
        options: dict[str, object] = {
            "preprocess": self.preprocess.model_dump(mode="json") if self.preprocess else None,
            "input_name": self.input_name,
            "batch": self.batch,
            "integer_resize": self.integer_resize,
        }
        if self.ssd_split:  # only when set, so engines built without it keep their cache keys
            options["ssd_split"] = True
        return options

    def fingerprint(self) -> str:
        """sha256 of these options and GRAPH_PASSES_VERSION: equal options, equal graph."""
        canonical = json.dumps(
            {"version": GRAPH_PASSES_VERSION, **self.to_dict()}, sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(canonical.encode()).hexdigest()
