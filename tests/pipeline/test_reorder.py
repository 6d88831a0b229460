"""Putting results of several inference workers back in order (files) or dropping stale ones (live)."""

from __future__ import annotations

import numpy as np

from edge_sdk.pipeline.geometry import InputGeometry
from edge_sdk.pipeline.messages import InferenceDone
from edge_sdk.pipeline.stages.reorder import Reorder
from edge_sdk.results import FrameMeta
from edge_sdk.sources.spec import BufferPolicy


def done(index: int, source: int = 0) -> InferenceDone:
    return InferenceDone(
        source, index % 8, FrameMeta("cam", index, 0.0, 4, 4), 0.0, InputGeometry.identity(4, 4), {"x": np.zeros(1)}, {}
    )


def frames(results: list[InferenceDone]) -> list[int]:
    return [r.frame.index for r in results]


def test_reorder_when_a_file_frame_overtakes_its_predecessor_holds_it_until_the_predecessor_arrives() -> None:
    # given two workers on a file whose frame 0 is still in flight when frame 1 finishes
    reorder = Reorder([BufferPolicy.BLOCK], workers=2, oldest_pending=lambda _: 0)
    # when / then
    ready, stale = reorder.push(done(1))
    assert frames(ready) == [] and stale == [], "frame 1 waits for frame 0"
    ready, stale = reorder.push(done(0))
    assert frames(ready) == [0, 1], "both go out, in order, once frame 0 is there"


def test_reorder_when_a_restarted_output_begins_mid_file_starts_from_the_oldest_frame_in_flight() -> None:
    reorder = Reorder([BufferPolicy.BLOCK], workers=2, oldest_pending=lambda _: 40)
    ready, _ = reorder.push(done(41))
    assert frames(ready) == []
    ready, _ = reorder.push(done(40))
    assert frames(ready) == [40, 41]


def test_reorder_when_a_live_frame_arrives_after_a_newer_one_drops_it_as_stale() -> None:
    reorder = Reorder([BufferPolicy.LATEST], workers=2, oldest_pending=lambda _: 0)
    assert frames(reorder.push(done(5))[0]) == [5], "live results go out at once"
    ready, stale = reorder.push(done(4))
    assert frames(ready) == [] and frames(stale) == [4], "an older live result is dropped, never delivered late"


def test_reorder_when_one_worker_runs_delivers_in_arrival_order_without_waiting() -> None:
    reorder = Reorder([BufferPolicy.BLOCK], workers=1, oldest_pending=lambda _: 0)
    assert frames(reorder.push(done(3))[0]) == [3]
