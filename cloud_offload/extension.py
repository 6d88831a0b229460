"""cloud_offload as a pipeline extension: the `offload:` section of a pipeline file (found by the SDK
through the `edge_sdk.pipeline_extensions` entry point; edge_sdk/pipeline/extensions.py)."""

from __future__ import annotations

from typing import Any

from edge_sdk.pipeline.dispatch import FrameDispatch
from edge_sdk.pipeline.extensions import DispatchContext

from .config import OffloadSettings


class OffloadExtension:
    section = "offload"

    def validate(self, value: Any) -> OffloadSettings:
        return OffloadSettings.model_validate(value)

    def dispatch(self, context: DispatchContext) -> FrameDispatch:
        from .agent import OffloadDispatch  # onnx, paho and the engines load only for a pipeline that offloads

        return OffloadDispatch(context)


EXTENSION = OffloadExtension()
