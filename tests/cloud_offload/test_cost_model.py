"""The offload cost model (cloud_offload/cost_model.py): expected latency of a mode on a link, pure numbers."""

from __future__ import annotations

import math
import time

import pytest

from cloud_offload.cost_model import (
    DOWN_OVERHEAD_BYTES,
    MAX_UTILISATION,
    UP_OVERHEAD_BYTES,
    ModeCost,
    best_mode,
    expected_all,
    expected_ms,
    transfer_ms,
    uplink_capacity_fps,
)

EDGE = ModeCost("edge", None, edge_ms=40.0)
CLOUD = ModeCost("cloud", "whole", edge_ms=2.0, up_bytes=20_000, down_bytes=2_000, cloud_ms=5.0)
SPLIT = ModeCost("split@conv6", "tail-abc", edge_ms=15.0, up_bytes=5_000, down_bytes=2_000, cloud_ms=3.0)


def test_the_edge_costs_its_compute_and_its_queue_whatever_the_link() -> None:
    assert expected_ms(EDGE, 1e6, 20.0) == 40.0
    assert expected_ms(EDGE, 1e9, 500.0) == 40.0
    assert expected_ms(EDGE, 1e6, 20.0, cloud_queue_ms=100.0, edge_queue_ms=25.0) == 65.0


def test_a_remote_mode_adds_both_transfers_one_rtt_the_worker_queue_and_its_compute() -> None:
    bandwidth = 8e6  # one byte per microsecond: 1000 bytes = 1 ms
    up = (20_000 + UP_OVERHEAD_BYTES) / 1000
    down = (2_000 + DOWN_OVERHEAD_BYTES) / 1000
    expected = 2.0 + up + 20.0 + 7.0 + 5.0 + down
    assert expected_ms(CLOUD, bandwidth, 20.0, cloud_queue_ms=7.0, edge_queue_ms=1000.0) == pytest.approx(expected)


def test_the_per_message_overhead_is_what_an_empty_exchange_costs() -> None:
    empty = ModeCost("cloud", "whole", edge_ms=0.0)
    assert expected_ms(empty, 8e6, 0.0) == pytest.approx((UP_OVERHEAD_BYTES + DOWN_OVERHEAD_BYTES) / 1000)
    assert 100 <= UP_OVERHEAD_BYTES <= 200 and 40 <= DOWN_OVERHEAD_BYTES <= 100, "as measured (module docstring)"


def test_halving_the_bandwidth_doubles_the_transfer_only() -> None:
    fast, slow = expected_ms(SPLIT, 20e6, 10.0), expected_ms(SPLIT, 10e6, 10.0)
    transfer = transfer_ms(SPLIT.up_bytes + UP_OVERHEAD_BYTES + SPLIT.down_bytes + DOWN_OVERHEAD_BYTES, 20e6)
    assert slow - fast == pytest.approx(transfer)


def test_a_slow_link_keeps_frames_on_the_edge_and_a_fast_one_sends_them() -> None:
    costs = [EDGE, CLOUD, SPLIT]
    assert best_mode(costs, 1e6, 20.0) is EDGE
    assert best_mode(costs, 100e6, 20.0) is CLOUD
    assert best_mode(costs, 100e6, 20.0, cloud_queue_ms=50.0) is EDGE, "a busy worker keeps frames home"


def test_the_split_wins_between_the_two_when_it_sends_less_and_leaves_work() -> None:
    # edge 40; split 15 + 20 rtt + 3 + 7128 B; cloud 2 + 20 + 5 + 22192 B
    costs = [EDGE, CLOUD, SPLIT]
    assert best_mode(costs, 10e6, 0.0) is SPLIT
    assert expected_ms(SPLIT, 10e6, 0.0) < min(expected_ms(EDGE, 10e6, 0.0), expected_ms(CLOUD, 10e6, 0.0))


def test_a_tie_stays_with_the_first_given() -> None:
    twin = ModeCost("split@twin", "tail-twin", CLOUD.edge_ms, CLOUD.up_bytes, CLOUD.down_bytes, CLOUD.cloud_ms)
    assert best_mode([CLOUD, twin], 8e6, 20.0) is CLOUD
    assert best_mode([twin, CLOUD], 8e6, 20.0) is twin


def test_expected_all_keeps_each_names_lower_latency() -> None:
    cheaper = ModeCost("cloud", "whole", edge_ms=1.0, up_bytes=10_000, down_bytes=2_000, cloud_ms=5.0)
    expected = expected_all([EDGE, CLOUD, cheaper], 10e6, 20.0)
    assert set(expected) == {"edge", "cloud"}
    assert expected["cloud"] == expected_ms(cheaper, 10e6, 20.0)


def test_bad_numbers_are_refused_with_what_was_expected() -> None:
    with pytest.raises(ValueError, match="bandwidth > 0"):
        expected_ms(CLOUD, 0.0, 20.0)
    with pytest.raises(ValueError, match="RTT >= 0"):
        expected_ms(CLOUD, 1e6, -1.0)
    with pytest.raises(ValueError, match="at least one mode"):
        best_mode([], 1e6, 20.0)
    with pytest.raises(ValueError, match="edge_ms >= 0"):
        ModeCost("edge", None, edge_ms=-1.0)
    with pytest.raises(ValueError, match="edge_ms >= 0"):
        ModeCost("edge", None, edge_ms=math.nan)
    with pytest.raises(ValueError, match="up_bytes >= 0"):
        ModeCost("cloud", "whole", edge_ms=1.0, up_bytes=-5)
    with pytest.raises(ValueError, match="names the part"):
        ModeCost("split@x", None, edge_ms=1.0)


def test_the_edge_ignores_the_link_even_a_dead_one() -> None:
    assert expected_ms(EDGE, 0.0, -1.0) == 40.0, "the edge needs no link: a zero estimate must not raise"


def test_a_cost_goes_to_a_dict_and_back() -> None:
    for cost in (EDGE, CLOUD, SPLIT):
        assert ModeCost.from_dict(cost.to_dict()) == cost


def test_it_is_fast_enough_to_run_for_every_mode_on_every_frame() -> None:
    costs = [EDGE, CLOUD, SPLIT] * 4
    started = time.perf_counter()
    for _ in range(1000):
        best_mode(costs, 20e6, 20.0, 3.0, 1.0)
    per_frame_ms = (time.perf_counter() - started) * 1000 / 1000
    assert per_frame_ms < 1.0, f"{per_frame_ms:.3f} ms to choose among 12 modes"


def test_frames_sent_faster_than_the_uplink_carries_them_are_expected_to_wait_then_never_to_arrive() -> None:
    alone = expected_ms(CLOUD, 5e6, 20.0)
    up_ms = (CLOUD.up_bytes + UP_OVERHEAD_BYTES) * 8 / 5e3
    half = expected_ms(CLOUD, 5e6, 20.0, frames_per_s=500 / up_ms)  # the uplink busy half the time
    assert half == pytest.approx(alone + up_ms * 0.5 / (2 * 0.5)), "M/D/1: waits half a transfer on average"
    assert expected_ms(CLOUD, 5e6, 20.0, frames_per_s=950 / up_ms) == math.inf, "busier than MAX_UTILISATION"
    assert expected_ms(EDGE, 5e6, 20.0, frames_per_s=1000.0) == expected_ms(EDGE, 5e6, 20.0), "no link, no queue"
    assert uplink_capacity_fps(CLOUD, 5e6) == pytest.approx(MAX_UTILISATION * 1000 / up_ms)
