"""Throughput mode's arithmetic (cloud_offload/throughput.py): the cameras' pace from frame numbers and
capture times, the share of frames an edge that cannot keep pace sends away, and how they are spread."""

from __future__ import annotations

import pytest

from cloud_offload.throughput import CameraPace, ShareCredit, ThroughputMode, throughput_share
from edge_sdk.core.results import FrameMeta


def frame(source: str, index: int, fps: float = 15.0) -> FrameMeta:
    return FrameMeta(source, index, 1000.0 + index / fps, 640, 480)


def test_a_camera_whose_frames_were_dropped_still_shows_its_own_pace() -> None:
    pace = CameraPace()
    for index in (0, 1, 3, 6, 8, 11):  # a busy edge took only some of the camera's frames
        pace.add(frame("door", index))
    assert pace.interval_ms() == pytest.approx(1000 / 15)


def test_the_pace_adds_up_over_sources_and_is_shared_by_the_inference_workers() -> None:
    pace = CameraPace()
    assert pace.interval_ms() is None, "no pace before two frames of a source"
    for index in range(5):
        pace.add(frame("door", index, fps=10))
        pace.add(frame("yard", index, fps=30))
    assert pace.interval_ms() == pytest.approx(1000 / 40)
    assert pace.interval_ms(workers=2) == pytest.approx(2000 / 40), "each of two workers sees half the frames"


def test_an_edge_that_keeps_pace_sends_nothing_away_for_throughput() -> None:
    assert throughput_share(edge_ms=60, remote_edge_ms=2, interval_ms=67) == 0
    assert throughput_share(edge_ms=70, remote_edge_ms=2, interval_ms=67) == 0, "within the 10 % margin"
    assert throughput_share(edge_ms=120, remote_edge_ms=2, interval_ms=None) == 0, "no pace known yet"


def test_a_slow_edge_sends_away_just_the_share_it_cannot_compute() -> None:
    share = throughput_share(edge_ms=120, remote_edge_ms=2, interval_ms=67)
    assert share == pytest.approx((120 - 67) / (120 - 2))
    assert (1 - share) * 120 + share * 2 == pytest.approx(67), "what is left keeps the camera's pace"
    assert throughput_share(edge_ms=1000, remote_edge_ms=900, interval_ms=67) == 1, "capped at every frame"
    assert throughput_share(edge_ms=120, remote_edge_ms=150, interval_ms=67) == 0, "sending costs more than computing"


def test_the_share_is_spread_evenly_over_the_frames() -> None:
    credit = ShareCredit()
    picked = [credit.take(0.25) for _ in range(12)]
    assert picked == [False, False, False, True] * 3
    assert not credit.take(0) and credit.credit == 0, "a share of 0 forgets what was owed"


def test_throughput_mode_says_when_it_starts_and_stops_but_not_every_small_move() -> None:
    mode = ThroughputMode(workers=1, live_sources={"door"})
    for index in range(3):
        mode.add(frame("door", index))
        mode.add(frame("file", index * 7))  # a source read ahead: not a camera's pace
    picks = [mode.pick(120.0, {"cloud": 2.0}, {"cloud": 150.0}) for _ in range(9)]
    assert mode.news is None, "no news after the first frame of the spell"
    assert picks.count("cloud") == 4 and mode.share == pytest.approx((120 - 200 / 3) / 118)
    mode.pick(125.0, {"cloud": 2.0}, {"cloud": 150.0})
    assert mode.news is None, "a move of under 10 points is not news"
    mode.pick(120.0, {"cloud": 2.0}, {})
    assert mode.news == "throughput: every frame on the edge again: no remote mode is available"
    assert mode.share == 0 and mode.pick(60.0, {"cloud": 2.0}, {"cloud": 150.0}) is None
