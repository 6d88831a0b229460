"""How a run's status events become log lines, the same in both runtimes: `source door connected` at
info, trouble (a lost source, a restarted stage, dropped frames) as a warning, and what is said once
elsewhere (a failed source or sink, skipped frames: the summary; a failed stage: its own log and the
raised error) at debug only."""

from __future__ import annotations

import logging

from edge_sdk.core.status import StatusCallback, StatusEvent, StatusKind

log = logging.getLogger("edge_sdk.pipeline.runtime")

SAID_ELSEWHERE = {StatusKind.SOURCE_FAILED, StatusKind.SINK_FAILED, StatusKind.FRAMES_SKIPPED, StatusKind.STAGE_FAILED}
WARNINGS = {
    StatusKind.SOURCE_LOST,
    StatusKind.STAGE_RESTARTED,
    StatusKind.STAGE_FAILED,
    StatusKind.SINK_FAILED,
    StatusKind.FRAMES_DROPPED,
}


def log_status(event: StatusEvent) -> None:
    level = logging.WARNING if event.kind in WARNINGS else logging.INFO
    if event.kind is StatusKind.MODEL_BREAKER and event.data.get("state") == "open":
        level = logging.WARNING  # frames go to the lighter model; half-open and closed are news, not trouble
    if event.kind in SAID_ELSEWHERE:
        level = logging.DEBUG
    log.log(level, "%s", event.describe())


def logged(on_status: StatusCallback) -> StatusCallback:
    """`on_status`, with each event logged first."""

    def log_then_pass_on(event: StatusEvent) -> None:
        log_status(event)
        on_status(event)

    return log_then_pass_on
