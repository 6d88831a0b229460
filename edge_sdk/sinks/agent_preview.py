"""The agent sink's opt-in preview thumbnails: a small annotated JPEG per source, now and then.

With `preview:` set, the agent sink keeps, per source, at most one thumbnail every `every_s` seconds
(whether the frame has detections or not): the result drawn on the frame (annotate.py), resized to
`width` pixels wide (aspect kept) and encoded as JPEG at falling quality until it fits `max_bytes`.
The sink stores it as the latest preview of its (pipeline, source) in the agent's outbox, and the
agent publishes it to `edge/<device>/telemetry/preview/<pipeline>/<source>` (edge_sdk.fleet.wire.telemetry).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.annotate import draw_result
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Result

MAX_PREVIEW_BYTES: Final = 64 * 1024
"""The wire's limit (edge_sdk.fleet.wire.telemetry.MAX_PREVIEW_BYTES, a layer above; a test keeps them equal)."""
QUALITIES: Final = (80, 65, 50, 35)
"""JPEG qualities tried in turn until a thumbnail fits max_bytes."""


class AgentPreviewSpec(BaseModel):
    """`preview:` of a `type: agent` sink."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every_s: float = Field(
        2.0, ge=0.2, strict=True, description="Seconds between two thumbnails of one source, at least 0.2."
    )
    width: int = Field(
        320, ge=32, le=1280, strict=True, description="Thumbnail width in pixels, 32..1280 (height keeps the aspect)."
    )
    max_bytes: int = Field(
        32 * 1024,
        ge=1024,
        le=MAX_PREVIEW_BYTES,
        strict=True,
        description=f"Largest JPEG, 1024..{MAX_PREVIEW_BYTES}; the quality is lowered until a thumbnail fits, "
        "else it is skipped.",
    )


def encode_thumbnail(image: np.ndarray, result: Result, width: int, max_bytes: int) -> bytes | None:
    """`result` drawn on `image`, `width` pixels wide, as a JPEG of at most `max_bytes`; None when none fits."""
    cv2 = import_cv2()
    drawn = draw_result(image, result)
    height = max(1, round(drawn.shape[0] * width / drawn.shape[1]))
    shrinking = width < drawn.shape[1]
    small = cv2.resize(drawn, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
    for quality in QUALITIES:
        ok, jpeg = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if ok and jpeg.size <= max_bytes:
            return jpeg.tobytes()
    return None


class Thumbnails:
    """Decides when a source is due for a thumbnail and makes it (see the module docstring)."""

    def __init__(self, spec: AgentPreviewSpec, clock: Callable[[], float] = time.monotonic):
        self.spec = spec
        self._clock = clock
        self._last: dict[str, float] = {}
        self.made = 0
        self.too_big = 0

    def due(self, source: str) -> bool:
        """Whether `source` is due; being due starts its next period (a failed thumbnail is not retried at once)."""
        now = self._clock()
        last = self._last.get(source)
        if last is not None and now - last < self.spec.every_s:
            return False
        self._last[source] = now
        return True

    def make(self, result: Result, image: np.ndarray) -> bytes | None:
        """The thumbnail of this frame; None (counted in `too_big`) when no quality fits max_bytes."""
        jpeg = encode_thumbnail(image, result, self.spec.width, self.spec.max_bytes)
        if jpeg is None:
            self.too_big += 1
        else:
            self.made += 1
        return jpeg
