"""Putting results back in frame order (files) or dropping stale ones (live), with the ring as the truth."""

from __future__ import annotations

from edge_sdk.core.results import FrameMeta, Result
from edge_sdk.pipeline.messages import InferenceDone
from edge_sdk.pipeline.stages.reorder import Reorder
from edge_sdk.sources.spec import BufferPolicy


def done(index: int, source: int = 0) -> InferenceDone:
    frame = FrameMeta("cam", index, 0.0, 4, 4)
    return InferenceDone(source, index % 8, 1000, frame, 0.0, Result(frame))


def frames(results: list[InferenceDone]) -> list[int]:
    return [r.frame.index for r in results]


class Ring:
    """What the reorder asks of a ring: the oldest frame still on its way, the last one delivered."""

    def __init__(self, in_flight: set[int], delivered_through: int = -1):
        self.in_flight, self.delivered = in_flight, delivered_through

    def older_in_flight(self, _index: int) -> int | None:
        return min(self.in_flight, default=None)

    def delivered_through(self, _index: int) -> int:
        return self.delivered


def test_reorder_when_a_file_frame_overtakes_its_predecessor_holds_it_until_the_predecessor_arrives() -> None:
    # given frame 0 still with a worker when frame 1 arrives
    ring = Ring(in_flight={0})
    reorder = Reorder([BufferPolicy.BLOCK], ring.older_in_flight, ring.delivered_through)
    # when / then
    ready, stale = reorder.push(done(1))
    assert frames(ready) == [] and stale == [], "frame 1 waits for frame 0"
    ring.in_flight.clear()
    ready, stale = reorder.push(done(0))
    assert frames(ready) == [0, 1], "both go out, in order, once frame 0 is there"


def test_reorder_when_a_frame_goes_back_to_the_ring_to_be_redone_waits_for_it_without_a_timer() -> None:
    # given frame 40 back in the ring (its worker died) while 41 and 42 have arrived
    ring = Ring(in_flight={40})
    reorder = Reorder([BufferPolicy.BLOCK], ring.older_in_flight, ring.delivered_through)
    assert frames(reorder.push(done(41))[0]) == []
    assert frames(reorder.push(done(42))[0]) == []
    assert reorder.due() == [], "nothing goes out while frame 40 is still on its way"
    # when frame 40 is redone and arrives
    ring.in_flight.clear()
    ready, _ = reorder.push(done(40))
    # then
    assert frames(ready) == [40, 41, 42]


def test_reorder_when_a_file_frame_was_delivered_before_a_restart_drops_the_redone_copy() -> None:
    ring = Ring(in_flight=set(), delivered_through=7)
    reorder = Reorder([BufferPolicy.BLOCK], ring.older_in_flight, ring.delivered_through)
    ready, stale = reorder.push(done(7))
    assert ready == [] and frames(stale) == [7], "a frame is delivered once"
    assert frames(reorder.push(done(8))[0]) == [8]


def test_reorder_when_a_live_frame_arrives_after_a_newer_one_drops_it_as_stale() -> None:
    ring = Ring(in_flight=set())
    reorder = Reorder([BufferPolicy.LATEST], ring.older_in_flight, ring.delivered_through)
    assert frames(reorder.push(done(5))[0]) == [5], "live results go out at once"
    ring.delivered = 5
    ready, stale = reorder.push(done(4))
    assert frames(ready) == [] and frames(stale) == [4], "an older live result is dropped, never delivered late"


def test_reorder_when_flushed_delivers_what_waits_in_order() -> None:
    ring = Ring(in_flight={1}, delivered_through=1)
    reorder = Reorder([BufferPolicy.BLOCK], ring.older_in_flight, ring.delivered_through)
    reorder.push(done(3))
    reorder.push(done(2))
    deliver, drop = reorder.flush()
    assert frames(deliver) == [2, 3] and drop == []


def test_reorder_when_flushed_after_a_stop_drops_what_waits_behind_a_frame_that_never_came() -> None:
    # given frame 6 stopped with its worker while 7 and 8 arrived
    ring = Ring(in_flight={6}, delivered_through=5)
    reorder = Reorder([BufferPolicy.BLOCK], ring.older_in_flight, ring.delivered_through)
    reorder.push(done(7))
    reorder.push(done(8))
    # when the output stage ends
    deliver, drop = reorder.flush()
    # then the file's results stay a gapless prefix
    assert deliver == [] and frames(drop) == [7, 8]


def test_reorder_when_a_live_frame_is_away_with_offload_holds_newer_ones_for_it_but_not_for_frames_never_taken() -> (
    None
):
    # given frame 3 was sent to a cloud worker (claimed) and frame 5 computed here; frame 4 still waits in the
    # ring, and may be overwritten by the camera's newer frames
    ring = Ring(in_flight={3, 4})
    claimed = {3}
    reorder = Reorder(
        [BufferPolicy.LATEST], ring.older_in_flight, ring.delivered_through, lambda _index: min(claimed, default=None)
    )
    # when frame 5's result comes first
    ready, stale = reorder.push(done(5))
    # then it waits for frame 3, not for frame 4
    assert (ready, stale) == ([], [])
    claimed.clear()
    ready, stale = reorder.push(done(3))
    assert frames(ready) == [3, 5] and stale == [], "the late result is delivered, in order, not dropped"
    # and at the end, what waits is delivered although the camera's numbers have gaps
    claimed.add(6)
    assert reorder.push(done(9)) == ([], [])
    last, dropped = reorder.flush()
    assert frames(last) == [9] and dropped == []
