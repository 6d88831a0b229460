"""FrameRing's slot state machine, in process: FREE -> WRITING -> READY -> IN_USE -> SENT -> IN_USE -> FREE,
the refusals of stale hand-overs, drop-oldest for live sources, the counters, and one writer in
another process whose every frame must arrive intact and in order."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Iterator

import numpy as np
import pytest

from edge_sdk.core.errors import EdgeSDKError
from edge_sdk.pipeline.frame_ring import FrameRing, RingLayout, SlotInfo, SlotState
from edge_sdk.pipeline.shared_segments import SHM_DIR, new_run_token, segments_of

LAYOUT = RingLayout(4, 6, 8)
CAPTURE, WORKER, OTHER_WORKER, OUTPUT = 1, 1000, 1001, 2000


@pytest.fixture
def ring() -> Iterator[FrameRing]:
    ring = FrameRing.create(LAYOUT, new_run_token())
    try:
        yield ring
    finally:
        ring.close()


def _pixels(seq: int, height: int, width: int) -> np.ndarray:
    """A frame no other sequence number has: every pixel depends on seq, row, column and channel."""
    rows, cols, channels = np.indices((height, width, 3))
    return ((seq * 7 + rows * 31 + cols * 5 + channels * 101) % 256).astype(np.uint8)


def _write(ring: FrameRing, seq: int, height: int = 6, width: int = 8, drop_ready: bool = False) -> int:
    slot, _ = ring.acquire_for_write(CAPTURE, drop_ready=drop_ready)
    assert slot is not None, "the test left a slot to write into"
    ring.frame_buffer(slot, height, width)[...] = _pixels(seq, height, width)
    ring.commit(slot, seq, height, width, timestamp=100.0 + seq)
    return slot


def _state(ring: FrameRing, slot: int) -> SlotState:
    return SlotState(int(ring._state[slot]))


def _owner(ring: FrameRing, slot: int) -> int:
    return int(ring._owner[slot])


# -- a fresh ring ----------------------------------------------------------------------------------


def test_ring_when_created_has_every_slot_free_and_nothing_counted(ring: FrameRing) -> None:
    assert ring.states() == {"free": 4, "writing": 0, "ready": 0, "in_use": 0, "sent": 0}
    assert (ring.written, ring.dropped, ring.delivered, ring.skipped, ring.ready_events) == (0, 0, 0, 0, 0)
    assert ring.delivered_through == -1 and ring.last_seq() == -1
    assert ring.oldest_pending_seq() is None
    assert ring.take_ready(WORKER, newest=False, limit=4) == [], "an empty ring has nothing to take"
    assert ring.take_ready(WORKER, newest=True, limit=4) == [], "not even for a live source"
    assert ring.dropped == 0, "taking from an empty ring drops nothing"


# -- every legal transition ------------------------------------------------------------------------


def test_acquire_for_write_when_a_slot_is_free_gives_it_to_the_writer_and_hides_it_from_readers(
    ring: FrameRing,
) -> None:
    slot, dropped = ring.acquire_for_write(CAPTURE, drop_ready=False)
    assert slot is not None and not dropped
    assert _state(ring, slot) == SlotState.WRITING and _owner(ring, slot) == CAPTURE
    assert ring.take_ready(WORKER, newest=False, limit=4) == [], "a frame being written cannot be taken"
    assert ring.oldest_pending_seq() is None, "nor is it pending: it was never committed"
    assert ring.written == 0
    second, _ = ring.acquire_for_write(CAPTURE, drop_ready=False)
    assert second is not None and second != slot, "a slot being written is not handed out twice"


def test_commit_makes_the_frame_ready_with_its_seq_size_and_timestamp(ring: FrameRing) -> None:
    slot = _write(ring, seq=7, height=4, width=5)
    assert _state(ring, slot) == SlotState.READY and _owner(ring, slot) == -1, "a READY frame belongs to nobody"
    assert (ring.written, ring.ready_events, ring.last_seq()) == (1, 1, 7)
    assert ring.oldest_pending_seq() == 7
    (info,) = ring.take_ready(WORKER, newest=False, limit=4)
    assert info == SlotInfo(slot, 7, 4, 5, 107.0)
    assert _state(ring, slot) == SlotState.IN_USE and _owner(ring, slot) == WORKER
    frame = ring.frame(info)
    assert frame.shape == (4, 5, 3) and np.array_equal(frame, _pixels(7, 4, 5)), "the reader sees what was written"


def test_slot_when_it_goes_round_the_whole_cycle_passes_every_state_and_counts_one_delivery(ring: FrameRing) -> None:
    seen = [ring.states()]
    slot, _ = ring.acquire_for_write(CAPTURE, drop_ready=False)
    assert slot is not None
    seen.append(ring.states())
    ring.commit(slot, 0, 6, 8, 1.0)
    seen.append(ring.states())
    assert [info.slot for info in ring.take_ready(WORKER, newest=False, limit=1)] == [slot]
    seen.append(ring.states())
    assert ring.mark_sent(slot, 0, WORKER)
    seen.append(ring.states())
    assert ring.take_over(slot, 0, WORKER, OUTPUT)
    assert _owner(ring, slot) == OUTPUT
    seen.append(ring.states())
    ring.release(slot, delivered=True)
    seen.append(ring.states())
    one = {"free": 3, "writing": 0, "ready": 0, "in_use": 0, "sent": 0}
    assert seen == [
        {**one, "free": 4},
        {**one, "writing": 1},
        {**one, "ready": 1},
        {**one, "in_use": 1},
        {**one, "sent": 1},
        {**one, "in_use": 1},
        {**one, "free": 4},
    ]
    assert _owner(ring, slot) == -1
    assert (ring.written, ring.delivered, ring.delivered_through, ring.dropped) == (1, 1, 0, 0)
    assert ring.oldest_pending_seq() is None, "a released frame is no longer pending"


def test_release_when_not_delivered_frees_the_slot_without_counting_a_delivery(ring: FrameRing) -> None:
    _write(ring, seq=3)
    (info,) = ring.take_ready(WORKER, newest=False, limit=1)
    ring.release(info.slot)
    assert _state(ring, info.slot) == SlotState.FREE
    assert (ring.delivered, ring.delivered_through) == (0, -1)


def test_delivered_through_when_frames_are_delivered_out_of_order_keeps_the_highest(ring: FrameRing) -> None:
    for seq in (0, 1, 2):
        _write(ring, seq)
    infos = ring.take_ready(WORKER, newest=False, limit=3)
    by_seq = {info.seq: info.slot for info in infos}
    ring.release(by_seq[2], delivered=True)
    ring.release(by_seq[0], delivered=True)
    assert (ring.delivered, ring.delivered_through) == (2, 2), "an older frame delivered late does not lower it"
    assert ring.oldest_pending_seq() == 1


# -- refusals of stale or wrong hand-overs ---------------------------------------------------------


def test_mark_sent_when_the_slot_is_not_the_holders_frame_refuses_and_changes_nothing(ring: FrameRing) -> None:
    ready_slot = _write(ring, seq=0)
    _write(ring, seq=1)
    # a READY frame nobody claimed cannot be sent
    assert not ring.mark_sent(ready_slot, 0, WORKER)
    assert _state(ring, ready_slot) == SlotState.READY
    (info,) = ring.take_ready(WORKER, newest=False, limit=1)
    assert info.seq == 0
    assert not ring.mark_sent(info.slot, 0, OTHER_WORKER), "another worker's frame"
    assert not ring.mark_sent(info.slot, 1, WORKER), "the slot holds another frame than the message says"
    assert _state(ring, info.slot) == SlotState.IN_USE and _owner(ring, info.slot) == WORKER
    assert ring.mark_sent(info.slot, 0, WORKER), "the right holder and frame may"
    assert not ring.mark_sent(info.slot, 0, WORKER), "a frame already sent is not sent twice"
    assert _state(ring, info.slot) == SlotState.SENT


def test_take_over_when_the_slot_was_not_sent_by_that_holder_refuses_and_changes_nothing(ring: FrameRing) -> None:
    _write(ring, seq=4)
    (info,) = ring.take_ready(WORKER, newest=False, limit=1)
    assert not ring.take_over(info.slot, 4, WORKER, OUTPUT), "a frame still in inference (not SENT)"
    ring.mark_sent(info.slot, 4, WORKER)
    assert not ring.take_over(info.slot, 4, OTHER_WORKER, OUTPUT), "a message from a worker that does not hold it"
    assert not ring.take_over(info.slot, 5, WORKER, OUTPUT), "a message about another frame"
    assert _state(ring, info.slot) == SlotState.SENT and _owner(ring, info.slot) == WORKER
    assert ring.take_over(info.slot, 4, WORKER, OUTPUT)
    assert not ring.take_over(info.slot, 4, WORKER, OUTPUT), "a duplicate message is refused"
    assert _state(ring, info.slot) == SlotState.IN_USE and _owner(ring, info.slot) == OUTPUT


def test_frame_buffer_when_the_frame_is_larger_than_a_slot_refuses_with_both_sizes(ring: FrameRing) -> None:
    slot, _ = ring.acquire_for_write(CAPTURE, drop_ready=False)
    assert slot is not None
    with pytest.raises(EdgeSDKError, match=r"frame 9x6 does not fit the ring's 8x6 slots"):
        ring.frame_buffer(slot, 6, 9)
    with pytest.raises(EdgeSDKError, match=r"frame 8x7 does not fit"):
        ring.frame_buffer(slot, 7, 8)
    assert ring.frame_buffer(slot, 6, 8).shape == (6, 8, 3), "a frame of exactly the slot size fits"


# -- full ring: files wait, live sources drop the oldest --------------------------------------------


def test_acquire_for_write_when_full_and_not_live_returns_none_and_keeps_every_frame(ring: FrameRing) -> None:
    for seq in range(4):
        _write(ring, seq)
    assert ring.acquire_for_write(CAPTURE, drop_ready=False) == (None, False)
    assert ring.states()["ready"] == 4 and ring.dropped == 0, "back-pressure: nothing is lost"
    assert [info.seq for info in ring.take_ready(WORKER, newest=False, limit=4)] == [0, 1, 2, 3]


def test_acquire_for_write_when_full_and_live_overwrites_the_oldest_ready_frame_and_counts_it(ring: FrameRing) -> None:
    # given READY frames whose slot order is not their age: slots 0 and 1 were reused for seq 4 and 5
    for seq in range(4):
        _write(ring, seq)
    for info in ring.take_ready(WORKER, newest=False, limit=2):
        ring.release(info.slot, delivered=True)
    slot_of = {4: _write(ring, 4), 5: _write(ring, 5)}
    slot_of_2 = int(np.flatnonzero(ring._seq == 2)[0])
    # when a live source needs a slot
    slot, dropped = ring.acquire_for_write(CAPTURE, drop_ready=True)
    # then the oldest waiting frame (seq 2), not the lowest slot, is given up and counted
    assert dropped and slot == slot_of_2 and slot not in slot_of.values()
    assert _state(ring, slot) == SlotState.WRITING and _owner(ring, slot) == CAPTURE
    assert ring.dropped == 1
    ring.commit(slot, 6, 6, 8, 0.0)
    assert [info.seq for info in ring.take_ready(WORKER, newest=False, limit=4)] == [3, 4, 5, 6]


def test_acquire_for_write_when_live_and_a_slot_is_free_drops_nothing(ring: FrameRing) -> None:
    for seq in range(3):
        _write(ring, seq)
    slot, dropped = ring.acquire_for_write(CAPTURE, drop_ready=True)
    assert slot is not None and not dropped and ring.dropped == 0
    assert ring.states()["ready"] == 3


def test_acquire_for_write_when_live_and_every_slot_is_claimed_returns_none_without_counting(ring: FrameRing) -> None:
    # given no FREE and no READY slot: two claimed by a worker, one sent, one being written
    for seq in range(3):
        _write(ring, seq)
    infos = ring.take_ready(WORKER, newest=False, limit=3)
    ring.mark_sent(infos[0].slot, infos[0].seq, WORKER)
    ring.acquire_for_write(CAPTURE, drop_ready=False)
    # then even a live source gets nothing: frames in inference or output are never overwritten
    assert ring.acquire_for_write(CAPTURE, drop_ready=True) == (None, False)
    assert ring.dropped == 0, "the capture counts the frame it gives up itself (count_dropped)"
    assert ring.states() == {"free": 0, "writing": 1, "ready": 0, "in_use": 2, "sent": 1}


# -- take_ready order ------------------------------------------------------------------------------


def test_take_ready_when_oldest_first_goes_by_seq_not_by_slot_and_respects_the_limit(ring: FrameRing) -> None:
    # given READY frames seq 2, 3 in slots 2, 3 and seq 4, 5 in the reused slots 0, 1
    for seq in range(4):
        _write(ring, seq)
    for info in ring.take_ready(WORKER, newest=False, limit=2):
        ring.release(info.slot, delivered=True)
    _write(ring, 4)
    _write(ring, 5)
    # when a file's worker takes up to 3
    taken = ring.take_ready(WORKER, newest=False, limit=3)
    # then the three oldest, oldest first, and the newest stays READY for later
    assert [info.seq for info in taken] == [2, 3, 4]
    assert ring.states()["ready"] == 1 and ring.dropped == 0
    assert [info.seq for info in ring.take_ready(OTHER_WORKER, newest=False, limit=3)] == [5]


def test_take_ready_when_newest_claims_only_the_newest_and_drops_the_stale_ones(ring: FrameRing) -> None:
    # given four READY frames, the newest (seq 5) not in the highest slot
    for seq in range(4):
        _write(ring, seq)
    for info in ring.take_ready(WORKER, newest=False, limit=1):
        ring.release(info.slot, delivered=True)
    newest_slot = _write(ring, 5)
    # when a live source's worker takes frames
    taken = ring.take_ready(WORKER, newest=True, limit=4)
    # then it gets the newest only; the three older ones are freed and counted as dropped
    assert [(info.slot, info.seq) for info in taken] == [(newest_slot, 5)]
    assert ring.states() == {"free": 3, "writing": 0, "ready": 0, "in_use": 1, "sent": 0}
    assert ring.dropped == 3
    assert ring.oldest_pending_seq() == 5


def test_take_ready_when_another_worker_holds_frames_skips_them(ring: FrameRing) -> None:
    for seq in range(3):
        _write(ring, seq)
    first = ring.take_ready(WORKER, newest=False, limit=1)
    second = ring.take_ready(OTHER_WORKER, newest=False, limit=4)
    assert [i.seq for i in first] == [0] and [i.seq for i in second] == [1, 2], "no frame is claimed twice"
    assert {_owner(ring, i.slot) for i in second} == {OTHER_WORKER}


# -- counters and bookkeeping ----------------------------------------------------------------------


def test_count_dropped_and_count_skipped_when_called_add_up_separately(ring: FrameRing) -> None:
    ring.count_dropped()
    ring.count_dropped(3)
    ring.count_skipped(2)
    ring.count_skipped(5)
    assert (ring.dropped, ring.skipped) == (4, 7)
    assert ring.states()["free"] == 4, "counting touches no slot"


def test_oldest_pending_seq_when_asked_for_another_stage_leaves_out_what_that_stage_holds(ring: FrameRing) -> None:
    for seq in (10, 11, 12):
        _write(ring, seq)
    (first,) = ring.take_ready(WORKER, newest=False, limit=1)
    ring.mark_sent(first.slot, first.seq, WORKER)
    (second,) = ring.take_ready(OUTPUT, newest=False, limit=1)
    assert ring.oldest_pending_seq() == 10, "READY, IN_USE and SENT frames are all pending"
    assert ring.oldest_pending_seq(other_than=WORKER) == 11
    assert ring.oldest_pending_seq(other_than=OUTPUT) == 10
    ring.release(first.slot, delivered=True)
    ring.release(second.slot, delivered=True)
    assert ring.oldest_pending_seq() == 12
    assert ring.last_seq() == 12


def test_ready_events_when_frames_become_ready_grow_and_other_changes_leave_them(ring: FrameRing) -> None:
    _write(ring, 0)
    _write(ring, 1)
    assert ring.ready_events == 2
    infos = ring.take_ready(WORKER, newest=False, limit=2)
    ring.release(infos[0].slot, delivered=True)
    assert ring.ready_events == 2, "claiming and releasing make nothing READY"
    ring.recover(WORKER)
    assert ring.ready_events == 3, "a frame given back to be redone wakes the readers"
    assert ring.recover(WORKER) == (0, 0)
    assert ring.ready_events == 3, "a recovery that gives nothing back does not"


# -- a dead owner's slots --------------------------------------------------------------------------


def test_recover_when_an_owner_died_gives_back_only_its_slots(ring: FrameRing) -> None:
    # given a worker holding seq 0 (claimed) and seq 1 (sent), another worker holding seq 2, a capture writing
    for seq in range(3):
        _write(ring, seq)
    mine = ring.take_ready(WORKER, newest=False, limit=2)
    ring.mark_sent(mine[1].slot, 1, WORKER)
    (theirs,) = ring.take_ready(OTHER_WORKER, newest=False, limit=1)
    writing, _ = ring.acquire_for_write(CAPTURE, drop_ready=False)
    # when WORKER dies
    assert ring.recover(WORKER) == (2, 0)
    # then its two frames are READY for anyone, and nobody else lost anything
    assert [_state(ring, info.slot) for info in mine] == [SlotState.READY, SlotState.READY]
    assert _state(ring, theirs.slot) == SlotState.IN_USE and _owner(ring, theirs.slot) == OTHER_WORKER
    assert writing is not None and _state(ring, writing) == SlotState.WRITING
    assert not ring.mark_sent(mine[0].slot, 0, WORKER), "the dead worker's late messages are refused"
    assert [info.seq for info in ring.take_ready(OTHER_WORKER, newest=False, limit=4)] == [0, 1]


def test_recover_when_a_held_frame_is_no_newer_than_one_delivered_frees_it_instead_of_redoing(
    ring: FrameRing,
) -> None:
    for seq in range(3):
        _write(ring, seq)
    old, middle, new = ring.take_ready(WORKER, newest=False, limit=3)
    ring.release(middle.slot, delivered=True)  # seq 1 reached the sinks
    assert ring.recover(WORKER) == (1, 1), "seq 0 is older than a delivered frame: freed; seq 2 is redone"
    assert _state(ring, old.slot) == SlotState.FREE and _state(ring, new.slot) == SlotState.READY


def test_recover_when_a_live_frame_was_overtaken_frees_it_and_counts_it_dropped(ring: FrameRing) -> None:
    # given a worker of a live source holding seq 0 while seq 1 (another worker's) was delivered
    for seq in range(2):
        _write(ring, seq)
    old, newer = ring.take_ready(WORKER, newest=False, limit=2)
    ring.release(newer.slot, delivered=True)
    # when the worker dies
    assert ring.recover(WORKER, latest=True) == (0, 1)
    # then the overtaken frame was never delivered: it is counted, not lost
    assert ring.dropped == 1 and ring.delivered == 1
    assert _state(ring, old.slot) == SlotState.FREE


def test_recover_after_a_clean_exit_leaves_the_owners_sent_frames_to_the_output_stage(ring: FrameRing) -> None:
    # given a worker that sent seq 0 (its message is in the output stage's socket) and exited cleanly
    _write(ring, 0)
    (info,) = ring.take_ready(WORKER, newest=False, limit=1)
    assert ring.mark_sent(info.slot, 0, WORKER)
    # when the runtime recovers the worker's slots
    assert ring.recover(WORKER, clean=True) == (0, 0)
    # then the output stage can still take the frame over and deliver it (it is not redone)
    assert _state(ring, info.slot) == SlotState.SENT
    assert ring.take_over(info.slot, 0, WORKER, OUTPUT)


# -- attach, another process, and the segment's lifetime --------------------------------------------


def test_attach_when_opened_by_name_sees_the_same_slots_and_only_the_creator_unlinks() -> None:
    ring = FrameRing.create(LAYOUT, new_run_token())
    path = SHM_DIR / ring.name
    try:
        other = FrameRing.attach(ring.name, LAYOUT)
        slot = _write(other, seq=9, height=3, width=2)
        (info,) = ring.take_ready(WORKER, newest=False, limit=1)
        assert info == SlotInfo(slot, 9, 3, 2, 109.0)
        assert np.array_equal(ring.frame(info), _pixels(9, 3, 2)), "both handles map the same pixels"
        other.close()
        assert path.exists(), "an attached stage closing does not remove the ring under the others"
    finally:
        ring.close()
    assert not path.exists(), "the creator's close unlinks the segment"
    assert ring.name not in segments_of(os.getpid())


FRAMES = 60
SIZES = [(6, 8), (3, 5), (1, 1), (6, 1)]


def _write_frames(name: str, frames: int) -> None:
    """A capture stage: every frame in a slot, waiting for a slot when all are busy (a file's back-pressure)."""
    ring = FrameRing.attach(name, LAYOUT)
    try:
        for seq in range(frames):
            height, width = SIZES[seq % len(SIZES)]
            deadline = time.monotonic() + 20
            while (slot := ring.acquire_for_write(CAPTURE, drop_ready=False)[0]) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no slot for frame {seq}")
                time.sleep(0.0005)
            buffer = ring.frame_buffer(slot, height, width)
            buffer[...] = _pixels(seq, height, width)
            ring.commit(slot, seq, height, width, float(seq))
    finally:
        ring.close()


def test_ring_when_written_by_another_process_delivers_every_frame_intact_in_order_and_leaves_no_segment() -> None:
    # given a ring and a writer process (spawned, like the runtime's stages) that fills it faster than we read
    ring = FrameRing.create(LAYOUT, new_run_token())
    path = SHM_DIR / ring.name
    writer = mp.get_context("spawn").Process(target=_write_frames, args=(ring.name, FRAMES))
    received: list[int] = []
    try:
        writer.start()
        # when this process reads as a worker would, a few frames at a time
        deadline = time.monotonic() + 30
        while len(received) < FRAMES and time.monotonic() < deadline:
            taken = ring.take_ready(WORKER, newest=False, limit=3)
            if not taken:
                assert writer.is_alive() or ring.states()["ready"], f"the writer died after {received}"
                time.sleep(0.0005)
                continue
            for info in taken:
                height, width = SIZES[info.seq % len(SIZES)]
                assert (info.height, info.width, info.timestamp) == (height, width, float(info.seq))
                assert np.array_equal(ring.frame(info), _pixels(info.seq, height, width)), f"frame {info.seq} torn"
                received.append(info.seq)
                ring.release(info.slot, delivered=True)
        writer.join(timeout=10)
        # then every frame arrived once, in order, and the counters agree
        assert writer.exitcode == 0
        assert received == list(range(FRAMES))
        assert (ring.written, ring.delivered, ring.delivered_through, ring.dropped) == (FRAMES, FRAMES, FRAMES - 1, 0)
        assert ring.states()["free"] == LAYOUT.slots
    finally:
        if writer.is_alive():
            writer.kill()
            writer.join(timeout=10)
        ring.close()
    assert not path.exists(), "no segment is left in /dev/shm"
    assert ring.name not in segments_of(os.getpid())


# -- refusals of out-of-order calls ------------------------------------------------------------------


def test_commit_of_a_slot_not_being_written_is_refused_and_changes_nothing(ring: FrameRing) -> None:
    slot = _write(ring, 0)  # READY now
    with pytest.raises(EdgeSDKError, match=f"slot {slot} is READY, not being written"):
        ring.commit(slot, 9, 6, 8, 0.0)
    with pytest.raises(EdgeSDKError, match="not being written"):
        ring.commit(3, 9, 6, 8, 0.0)  # FREE
    assert [info.seq for info in ring.take_ready(WORKER, newest=False, limit=4)] == [0]
    assert ring.written == 1


def test_release_of_a_free_slot_counts_no_delivery(ring: FrameRing) -> None:
    slot = _write(ring, 0)
    [info] = ring.take_ready(WORKER, newest=False, limit=1)
    ring.release(info.slot, delivered=True)
    ring.release(slot, delivered=True)  # a second release of the same slot
    assert ring.delivered == 1


def test_take_ready_with_a_limit_of_zero_claims_nothing(ring: FrameRing) -> None:
    _write(ring, 0)
    assert ring.take_ready(WORKER, newest=True, limit=0) == []
    assert ring.take_ready(WORKER, newest=False, limit=0) == []
    assert [info.seq for info in ring.take_ready(WORKER, newest=True, limit=1)] == [0]


def test_close_twice_does_nothing_the_second_time() -> None:
    ring = FrameRing.create(LAYOUT, new_run_token())
    ring.close()
    ring.close()
