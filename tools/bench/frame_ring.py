"""FrameRing vs multiprocessing.Queue: 1080p RGB frames from one process to another, side by side.

Usage: python tools/bench/frame_ring.py [--frames 300] [--slots 8]

Both producers fill each frame (a memset, so the pixels really change), both consumers read every
frame's checksum pixel row; the ring passes only slot ids, the queue pickles the whole array.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Any

import numpy as np

from edge_sdk.pipeline.frame_ring import FrameRing, RingLayout
from edge_sdk.pipeline.shared_segments import new_run_token

HEIGHT, WIDTH = 1080, 1920


def ring_producer(name: str, layout: RingLayout, ids: Any, frames: int) -> None:
    ring = FrameRing.attach(name, layout)
    for seq in range(frames):
        slot = None
        while slot is None:
            slot, _ = ring.acquire_for_write(owner=1, drop_ready=False)
            if slot is None:
                time.sleep(0.0002)
        ring.frame_buffer(slot, HEIGHT, WIDTH).fill(seq % 251)
        ring.commit(slot, seq, HEIGHT, WIDTH, time.monotonic())
        ids.put(slot)
    ids.put(None)
    ring.close()


def queue_producer(frames_queue: Any, frames: int) -> None:
    for seq in range(frames):
        frames_queue.put(np.full((HEIGHT, WIDTH, 3), seq % 251, np.uint8))  # the queue pickles later
    frames_queue.put(None)


def run_ring(frames: int, slots: int) -> float:
    ctx = mp.get_context("spawn")
    layout = RingLayout(slots, HEIGHT, WIDTH)
    ring = FrameRing.create(layout, new_run_token())
    ids = ctx.Queue()
    producer = ctx.Process(target=ring_producer, args=(ring.name, layout, ids, frames))
    producer.start()
    first = ids.get()  # start the clock once the producer runs, as for the queue
    started = time.perf_counter()
    count, slot = 0, first
    while slot is not None:
        infos = ring.take_ready(owner=2, newest=False, limit=1)
        for info in infos:
            assert int(ring.frame(info)[0, :8, 0].sum()) == 8 * (info.seq % 251), "pixels must arrive intact"
            ring.release(info.slot)
            count += 1
        slot = ids.get()
    while count < frames:  # frames committed before their id was read
        for info in ring.take_ready(owner=2, newest=False, limit=slots):
            ring.release(info.slot)
            count += 1
    seconds = time.perf_counter() - started
    producer.join()
    ring.close()
    return (frames - 1) / seconds


def run_queue(frames: int) -> float:
    ctx = mp.get_context("spawn")
    frames_queue = ctx.Queue(maxsize=8)
    producer = ctx.Process(target=queue_producer, args=(frames_queue, frames))
    producer.start()
    frame = frames_queue.get()
    started = time.perf_counter()
    received = 1
    while (frame := frames_queue.get()) is not None:
        assert int(frame[0, :8, 0].sum()) == 8 * (received % 251)
        received += 1
    seconds = time.perf_counter() - started
    producer.join()
    return (frames - 1) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ring_rates, queue_rates = [], []
    for _ in range(args.rounds):
        ring_rates.append(run_ring(args.frames, args.slots))
        queue_rates.append(run_queue(args.frames))
    ring_fps, queue_fps = float(np.median(ring_rates)), float(np.median(queue_rates))
    print(f"1080p RGB frames ({HEIGHT}x{WIDTH}x3 uint8), {args.frames} per round, {args.rounds} rounds, medians")
    print(f"FrameRing (shared memory, slot ids on a queue): {ring_fps:8.1f} frames/s  {[round(r) for r in ring_rates]}")
    print(
        f"multiprocessing.Queue (pickled arrays):         {queue_fps:8.1f} frames/s  {[round(r) for r in queue_rates]}"
    )
    print(f"ratio: {ring_fps / queue_fps:.1f}x")


if __name__ == "__main__":
    main()
