"""The three kinds of stage process: capture (one per source), inference (batches across sources),
output (cascade, sinks). Each entry point takes one picklable plan and runs until its inputs end
or the pipeline stops; the runtime (runtime.py) starts them and restarts the ones that crash."""

from .capture import CapturePlan, run_capture
from .common import RingHandle, StageChannels
from .inference import DispatchPlan, InferencePlan, run_inference
from .output import OutputPlan, run_output

__all__ = [
    "CapturePlan",
    "DispatchPlan",
    "InferencePlan",
    "OutputPlan",
    "RingHandle",
    "StageChannels",
    "run_capture",
    "run_inference",
    "run_output",
]
