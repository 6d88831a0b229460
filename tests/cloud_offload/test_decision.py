"""The decision's hysteresis: a margin to switch, a band back to the edge, a dwell, and no flapping."""

from __future__ import annotations

import pytest

from cloud_offload.config import HysteresisSettings
from cloud_offload.decision import Decision


def decision(dwell_s: float = 1.0) -> Decision:
    return Decision(HysteresisSettings(enter=0.8, leave=0.95, dwell_s=dwell_s), start_at=0.0)


def test_a_mode_is_taken_only_below_0_8x_of_the_current_one() -> None:
    choose = decision()
    assert choose.choose({"edge": 100.0, "cloud": 85.0}, now=5.0) is None
    switch = choose.choose({"edge": 100.0, "cloud": 79.0}, now=6.0)
    assert switch is not None and (switch.previous, switch.mode) == ("edge", "cloud")
    assert "79 ms" in switch.reason and "0.8x" in switch.reason


def test_a_remote_mode_is_kept_until_over_0_95x_of_the_edge_then_left() -> None:
    choose = decision()
    choose.choose({"edge": 100.0, "cloud": 70.0}, now=5.0)
    assert choose.choose({"edge": 100.0, "cloud": 94.0}, now=7.0) is None, "inside the band: stay"
    switch = choose.choose({"edge": 100.0, "cloud": 96.0}, now=8.0)
    assert switch is not None and switch.mode == "edge"


def test_no_switch_within_the_dwell_but_an_unavailable_mode_is_left_at_once() -> None:
    choose = decision(dwell_s=1.0)
    choose.choose({"edge": 100.0, "cloud": 50.0}, now=5.0)
    assert choose.choose({"edge": 100.0, "cloud": 150.0}, now=5.5) is None, "dwell"
    switch = choose.choose({"edge": 100.0}, now=5.6)
    assert switch is not None and switch.mode == "edge" and "unavailable" in switch.reason


def test_a_wobbling_estimate_does_not_flap() -> None:
    choose = decision(dwell_s=0.0)
    switches = 0
    for step in range(200):  # cloud wobbles between 78% and 92% of the edge: across the entry, inside the band
        cloud = 92.0 if step % 2 else 78.0
        switches += choose.choose({"edge": 100.0, "cloud": cloud}, now=step * 0.05) is not None
    assert switches <= 1


def test_the_edge_is_always_a_choice() -> None:
    with pytest.raises(ValueError):
        decision().choose({"cloud": 10.0}, now=1.0)
