"""TensorRT's IProgressMonitor (10.0 and later) as the SDK's progress reports, with elapsed time; and a
log line with the elapsed time every LOG_EVERY_S, for builds watched through a log (systemd, a fleet
agent) rather than a terminal. Builds take minutes on Orin, 30-44 minutes at optimisation level 5."""

from __future__ import annotations

import logging
import time
from typing import Any

from edge_sdk.core.progress import report

log = logging.getLogger("edge_sdk.tensorrt")
LOG_EVERY_S = 30.0


class BuildClock:
    """The build's phases and elapsed time; what the monitor reports and logs."""

    def __init__(self, task: str = "TensorRT build", clock: Any = time.monotonic):
        self.task, self.clock = task, clock
        self.started = clock()
        self.last_log = self.started
        self.phases: dict[str, tuple[int, int]] = {}  # phase -> (done, total)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def line(self, phase: str) -> str:
        done, total = self.phases.get(phase, (0, 0))
        minutes, seconds = divmod(int(self.elapsed()), 60)
        return f"{self.task}: {phase} {done}/{total}, {minutes}m{seconds:02d}s elapsed"

    def phase_start(self, phase: str, steps: int) -> None:
        self.phases[phase] = (0, steps)
        report(self.task, 0, steps, phase)

    def step(self, phase: str, step: int) -> None:
        _, total = self.phases.get(phase, (0, 0))
        self.phases[phase] = (step + 1, total)
        report(self.task, step + 1, total, f"{phase}, {self.elapsed():.0f} s")
        if self.clock() - self.last_log >= LOG_EVERY_S:
            self.last_log = self.clock()
            log.info("%s", self.line(phase))

    def phase_finish(self, phase: str) -> None:
        done, total = self.phases.pop(phase, (0, 0))
        report(self.task, done, total, phase, finished=True)


def make_progress_monitor(trt: Any, clock: BuildClock) -> Any:
    class ProgressMonitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            clock.phase_start(phase_name, num_steps)

        def step_complete(self, phase_name: str, step: int) -> bool:
            clock.step(phase_name, step)
            return True  # False would cancel the build

        def phase_finish(self, phase_name: str) -> None:
            clock.phase_finish(phase_name)

    return ProgressMonitor()
