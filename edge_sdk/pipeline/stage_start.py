"""How stage processes start: forked from multiprocessing's fork server, which imported the stages'
modules once, so a stage starts in milliseconds instead of a fresh interpreter importing the SDK (and,
under `edge-sdk run`, the whole CLI that is the main module) again; spawn where there is no fork server.

A stage forked this way is the server's child, not the runtime's: it watches the runtime through the
pipe multiprocessing keeps to it (`multiprocessing.parent_process()`), and dies when that closes. It
also takes the runtime's environment as it is when the stage starts (`StageChannels.environment`), as a
spawned stage would, rather than the server's from when the server started; libraries that read a
variable only when they are imported (the preloaded ones) keep the value of the first start."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext, SpawnContext

STAGE_MODULES = (
    "edge_sdk.pipeline.stages.capture",
    "edge_sdk.pipeline.stages.inference",
    "edge_sdk.pipeline.stages.output",
    "onnxruntime",
)
"""What the fork server imports before it forks any stage (one it cannot import is skipped). Not cv2:
OpenCV reads its log levels from the environment when it is imported, which core/opencv.py sets first
in the process that imports it."""


def stage_context() -> ForkServerContext | SpawnContext:
    """The multiprocessing context the runtime starts its stages with."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(STAGE_MODULES))
    return context
