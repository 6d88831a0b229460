"""What stages share cannot be left held by a dead process: ring locks, run flags, message sockets."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.pipeline.control import RunControl
from edge_sdk.pipeline.frame_ring import FrameRing, RingLayout, SlotState
from edge_sdk.pipeline.message_socket import MessageListener, MessageSender, abstract_address, listening_socket
from edge_sdk.pipeline.shared_segments import SHM_DIR, new_run_token, remove_stale_segments, segment_name
from tests.support.waits import wait_until

LAYOUT = RingLayout(4, 8, 8)


@pytest.fixture
def ring() -> Iterator[FrameRing]:
    ring = FrameRing.create(LAYOUT, new_run_token())
    yield ring
    ring.close()


def _hold_lock_forever(name: str, ready: Path) -> None:
    ring = FrameRing.attach(name, LAYOUT)
    ring.lock.__enter__()
    ready.write_text("locked")
    time.sleep(3600)


def test_ring_lock_when_its_holder_is_killed_is_free_again(ring: FrameRing, tmp_path: Path) -> None:
    # given another process that took the ring's lock and never lets go
    ready = tmp_path / "ready"
    holder = mp.get_context("spawn").Process(target=_hold_lock_forever, args=(ring.name, ready))
    holder.start()
    wait_until(ready.exists, 30, "the holder to take the lock")
    # when it is SIGKILLed while holding it
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(timeout=10)
    # then the ring works for everyone else (a multiprocessing.Lock would stay held forever)
    slot, _ = ring.acquire_for_write(owner=1, drop_ready=False)
    assert slot is not None, "the kernel released the dead holder's lock"


def _claim(ring: FrameRing, seq: int, owner: int) -> int:
    slot, _ = ring.acquire_for_write(owner=1, drop_ready=False)
    assert slot is not None
    ring.commit(slot, seq, 8, 8, 0.0)
    (info,) = ring.take_ready(owner, newest=False, limit=1)
    return info.slot


def test_ring_recover_when_a_worker_died_puts_its_frames_back_to_be_redone(ring: FrameRing) -> None:
    # given two frames claimed by worker 1000 and one half-written by the capture
    _claim(ring, 0, 1000)
    _claim(ring, 1, 1000)
    ring.acquire_for_write(owner=7, drop_ready=False)
    # when both die
    assert ring.recover(1000) == (2, 0), "claimed frames are redone, none lost"
    assert ring.recover(7) == (0, 1), "a half-written frame is incomplete: its slot is freed"
    # then the frames are READY again, oldest first
    assert [info.seq for info in ring.take_ready(1001, newest=False, limit=4)] == [0, 1]


def test_ring_recover_when_the_output_died_after_delivering_frees_the_delivered_frame(ring: FrameRing) -> None:
    # given the output stage (2000) holding frames 0 and 1, of which 0 reached the sinks
    first = _claim(ring, 0, 1000)
    second = _claim(ring, 1, 1000)
    for slot, seq in ((first, 0), (second, 1)):
        assert ring.mark_sent(slot, seq, 1000) and ring.take_over(slot, seq, 1000, 2000)
    ring.release(first, delivered=True)
    third = _claim(ring, 2, 1000)
    ring.mark_sent(third, 2, 1000)
    ring.take_over(third, 2, 1000, 2000)
    # when the output dies holding 1 and 2
    redone, freed = ring.recover(2000, sent=True)
    # then both are redone (neither was delivered) and the count of delivered frames stays 1
    assert (redone, freed) == (2, 0)
    assert ring.delivered == 1 and ring.delivered_through == 0


def test_ring_take_over_when_the_message_is_stale_refuses(ring: FrameRing) -> None:
    # given a frame claimed by worker 1000 that died: the frame went back and worker 1001 has it now
    slot = _claim(ring, 5, 1000)
    ring.recover(1000)
    (info,) = ring.take_ready(1001, newest=False, limit=1)
    assert info.slot == slot
    ring.mark_sent(info.slot, 5, 1001)
    # when the dead worker's message arrives late
    # then the output stage does not take the frame from the live worker
    assert not ring.take_over(slot, 5, 1000, 2000)
    assert ring.take_over(slot, 5, 1001, 2000)
    assert ring.states()["in_use"] == 1 and int(ring._state[slot]) == SlotState.IN_USE


def test_ring_recover_when_the_output_died_with_messages_unread_redoes_the_sent_frames(ring: FrameRing) -> None:
    # given a frame a worker sent that the output stage never read (it sat in the dead process's socket)
    slot = _claim(ring, 3, 1000)
    assert ring.mark_sent(slot, 3, 1000)
    # when the output stage's death is recovered
    redone, _freed = ring.recover(2000, sent=True)
    # then the frame is redone instead of waiting forever for a message that is gone
    assert redone == 1 and ring.states()["ready"] == 1


def test_run_flags_when_set_are_seen_by_an_attached_copy_and_waits_are_bounded() -> None:
    control = RunControl.create(new_run_token())
    try:
        other = RunControl.attach(control.handle)
        started = time.monotonic()
        assert not other.stop.wait(0.05), "an unset flag's wait times out"
        assert time.monotonic() - started < 1.0
        control.stop.set()
        assert other.stop.is_set() and other.stop.wait(0)
        other.close()
    finally:
        control.close()
    assert not (SHM_DIR / control.segment.name).exists(), "the creator unlinks the flags"


def test_message_socket_when_a_sender_dies_mid_message_drops_only_that_message() -> None:
    # given a listener and two senders, one of which sends half a message and dies
    address = abstract_address(segment_name(new_run_token(), "test"))
    listener = MessageListener(listening_socket(address))
    try:
        broken = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        broken.connect(address)
        broken.sendall((1000).to_bytes(8, "big") + b"half")
        sender = MessageSender(address, give_up=lambda: True)
        assert sender.send({"frame": 1})
        # when the broken one goes away
        broken.close()
        received: list[object] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not received:
            received += listener.receive(0.05)
        # then the whole message arrives and the half one is gone with its connection
        assert received == [{"frame": 1}]
        assert listener.receive(0.05) == []
        sender.close()
    finally:
        listener.close()


def test_message_sender_when_nobody_listens_gives_up_when_told() -> None:
    sender = MessageSender(abstract_address(segment_name(new_run_token(), "nobody")), give_up=lambda: True)
    assert not sender.send("hello"), "a send with no receiver ends instead of blocking"


def test_stale_segments_when_their_creator_is_gone_are_removed_and_live_ones_kept(ring: FrameRing) -> None:
    dead = SHM_DIR / "edgesdk-999999999-0badf00d-ring0"
    dead.write_bytes(b"x")
    foreign = SHM_DIR / "edgesdk-notours"
    foreign.write_bytes(b"x")
    try:
        removed = remove_stale_segments()
        assert dead.name in removed and not dead.exists()
        assert (SHM_DIR / ring.name).exists(), "a live run's segment stays"
        assert foreign.exists(), "a name the SDK did not make is left alone"
    finally:
        foreign.unlink(missing_ok=True)
        dead.unlink(missing_ok=True)
