"""The SLO batcher's decisions, on a simulated clock: what a worker or an inference stage would do."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_sdk.serving.batching import HEADROOM, BatchLatency, SloBatcher, SloUnreachable


def gpu_like(batch: int) -> float:
    """A fixed cost and a small one per frame: batching pays."""
    return 8.0 + 0.5 * batch


def cpu_like(batch: int) -> float:
    """Nearly all cost per frame: batching barely pays."""
    return 0.5 + 10.0 * batch


def seeded(slo_ms: float, max_batch: int, cost=gpu_like, sizes=None) -> SloBatcher:  # type: ignore[no-untyped-def]
    batcher = SloBatcher(slo_ms, max_batch, sizes)
    for size in sizes or (1, 2, 4, 8, 16, 32):
        if size <= batcher.max_batch:
            for _ in range(3):
                batcher.ran(size, cost(size))
    return batcher


def poisson(rate_per_s: float, seconds: float, seed: int = 1, start_ms: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return start_ms + np.cumsum(rng.exponential(1000.0 / rate_per_s, int(rate_per_s * seconds)))


def simulate(batcher: SloBatcher, cost, rate_per_s: float, seconds: float = 20.0, seed: int = 1, arrivals=None):  # type: ignore[no-untyped-def]
    """Poisson arrivals (or `arrivals`, ms) served one batch at a time as the batcher decides:
    (latencies ms, shed)."""
    if arrivals is None:
        arrivals = poisson(rate_per_s, seconds, seed)
    queue: list[float] = []
    latencies: list[float] = []
    now, next_arrival, shed = 0.0, 0, 0
    while next_arrival < len(arrivals) or queue:
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= now:
            queue.append(float(arrivals[next_arrival]))
            batcher.arrivals.arrived(1, float(arrivals[next_arrival]))
            next_arrival += 1
        if not queue:
            now = float(arrivals[next_arrival])
            continue
        decision = batcher.decide([now - arrived for arrived in queue], now)
        shed += decision.shed
        del queue[: decision.shed]
        if decision.take:
            batch, queue = queue[: decision.take], queue[decision.take :]
            took = cost(decision.size)
            batcher.ran(decision.take, took)
            now += took
            latencies += [now - arrived for arrived in batch]
        elif decision.wait_ms:
            now += decision.wait_ms
    return np.array(latencies), shed


def test_a_lone_frame_runs_at_once() -> None:
    batcher = seeded(50.0, 32)
    decision = batcher.decide([0.1], now_ms=0.0)
    assert (decision.shed, decision.take, decision.wait_ms) == (0, 1, 0.0)


def test_what_waits_runs_as_one_batch_bounded_by_the_oldest_frames_deadline() -> None:
    batcher = seeded(50.0, 32)
    assert batcher.decide([1.0] * 32, now_ms=0.0).take == 32
    # on a dynamic engine it runs the batch sizes warmed at start: 20 waiting run as 16, then 4
    assert batcher.decide([1.0] * 20, now_ms=0.0).take == 16
    assert batcher.choices(32) == [1, 2, 4, 8, 16, 32]
    assert SloBatcher(50.0, 12).choices(12) == [1, 2, 4, 8, 12]
    # the oldest waited 30 ms: of the 45 ms planned, a batch may take 15 ms at most (8 + 0.5 b, +2 deviations)
    decision = batcher.decide([30.0] + [1.0] * 20, now_ms=0.0)
    assert decision.take == 8, "16 would take 16 ms more: past the 45 ms planned for the oldest"
    assert 30.0 + batcher.estimate(decision.take) <= 50.0 * HEADROOM


def test_a_frame_that_cannot_meet_the_slo_even_alone_is_shed_and_counted() -> None:
    batcher = seeded(50.0, 32)
    decision = batcher.decide([44.0, 2.0, 1.0], now_ms=0.0)
    assert decision.shed == 1 and decision.take == 2
    assert batcher.shed == 1


def test_at_a_high_arrival_rate_it_waits_for_a_batch_that_keeps_up_but_not_past_the_slack() -> None:
    batcher = seeded(50.0, 32)
    for at in range(0, 200):  # 1 frame per ms for 200 ms: batches of 1 (8.5 ms) carry 0.12 per ms
        batcher.arrivals.arrived(1, float(at))
    decision = batcher.decide([0.5], now_ms=200.0)
    assert decision.take == 0 and 0.0 < decision.wait_ms <= 45.0


def test_the_arrival_rate_follows_a_step_within_a_second() -> None:
    batcher = seeded(50.0, 32)
    for tick in range(1000):  # 100 frames/s for a second
        if tick % 10 == 0:
            batcher.arrivals.arrived(1, float(tick))
    assert batcher.arrivals.per_ms(1000.0) == pytest.approx(0.1, rel=0.15)
    for tick in range(1000, 2000):  # then 1000 frames/s
        batcher.arrivals.arrived(1, float(tick))
    assert batcher.arrivals.per_ms(2000.0) > 0.95


def simulate_static(batch: int, timeout_ms: float, cost, rate_per_s: float, seconds: float = 20.0, seed: int = 1):  # type: ignore[no-untyped-def]
    """The same arrivals served by a static batch: up to `batch` frames, waiting up to `timeout_ms` to fill."""
    rng = np.random.default_rng(seed)
    arrivals = list(np.cumsum(rng.exponential(1000.0 / rate_per_s, int(rate_per_s * seconds))))
    latencies: list[float] = []
    now, position = 0.0, 0
    while position < len(arrivals):
        now = max(now, arrivals[position])
        fill_by = min(now + timeout_ms, arrivals[min(position + batch, len(arrivals)) - 1])
        now = max(now, fill_by)
        taken = [at for at in arrivals[position : position + batch] if at <= now]
        position += len(taken)
        now += cost(len(taken))
        latencies += [now - at for at in taken]
    return np.array(latencies)


def goodput(latencies: np.ndarray, slo_ms: float, seconds: float = 20.0) -> float:
    """Frames per second served within the SLO."""
    return float(np.sum(latencies <= slo_ms)) / seconds


@pytest.mark.parametrize("cost", [gpu_like, cpu_like], ids=["batching-pays", "per-frame-cost"])
@pytest.mark.parametrize("load", [0.3, 0.7, 0.9, 1.2, 2.0])
def test_at_every_load_it_serves_as_many_frames_within_the_slo_as_the_best_static_batch(cost, load: float) -> None:  # type: ignore[no-untyped-def]
    """Issue 15's target, on a simulated engine: within-SLO throughput >= 0.95 of the best static batch
    for that load (each static batch tried with no delay and with a delay), and p99 within the SLO."""
    slo = 80.0
    capacity = max(size / cost(size) for size in range(1, 33)) * 1000
    rate = load * capacity
    latencies, shed = simulate(seeded(slo, 32, cost), cost, rate)
    static = max(
        goodput(simulate_static(batch, timeout, cost, rate), slo)
        for batch in (1, 2, 4, 8, 16, 32)
        for timeout in (0.0, 5.0, 20.0)
    )
    assert goodput(latencies, slo) >= 0.95 * static
    assert np.percentile(latencies, 99) <= slo
    if load <= 0.3:
        assert shed == 0


@pytest.mark.parametrize("cost", [gpu_like, cpu_like], ids=["batching-pays", "per-frame-cost"])
def test_past_capacity_it_sheds_explicitly_and_what_it_serves_meets_the_slo(cost) -> None:  # type: ignore[no-untyped-def]
    slo = 80.0
    capacity = max(size / cost(size) for size in range(1, 33)) * 1000
    latencies, shed = simulate(seeded(slo, 32, cost), cost, 1.5 * capacity)
    assert shed > 0.1 * len(latencies)
    assert np.percentile(latencies, 99) <= slo
    served_per_s = len(latencies) / 20.0
    assert served_per_s > 0.6 * capacity  # it keeps serving near capacity instead of missing every deadline


@pytest.mark.parametrize("cost", [gpu_like, cpu_like], ids=["batching-pays", "per-frame-cost"])
def test_a_load_step_from_light_to_past_capacity_is_followed_within_a_second(cost) -> None:  # type: ignore[no-untyped-def]
    slo = 80.0
    capacity = max(size / cost(size) for size in range(1, 33)) * 1000
    light = poisson(0.3 * capacity, 5.0, seed=2)
    heavy = poisson(2.0 * capacity, 5.0, seed=3, start_ms=5000.0)
    arrivals = np.concatenate([light, heavy])
    latencies, shed = simulate(seeded(slo, 32, cost), cost, 0.0, arrivals=arrivals)
    assert shed > 0
    # every frame served meets the SLO, before, across and after the step: the batcher reacts to the
    # queue it sees at once, and the arrival rate it waits on follows the step within 250 ms
    assert np.max(latencies) <= slo


def test_a_fixed_batch_engine_pads_to_its_built_size() -> None:
    batcher = seeded(100.0, 16, sizes=[4])
    assert batcher.max_batch == 4
    assert batcher.engine_size(3) == 4
    assert batcher.estimate(1) == batcher.estimate(4)
    assert batcher.decide([1.0] * 3, now_ms=0.0).size == 4


def test_an_slo_no_batch_can_meet_is_refused_with_the_measured_best_latency() -> None:
    batcher = seeded(5.0, 8)
    with pytest.raises(
        SloUnreachable, match=r"latency_slo_ms 5 cannot be met: the best measured batch latency is \d+\.\d ms"
    ):
        batcher.check_reachable()
    seeded(20.0, 8).check_reachable()


def test_unmeasured_sizes_are_estimated_from_the_measured_ones() -> None:
    latency = BatchLatency()
    assert math.isinf(latency.estimate(1))
    for _ in range(50):
        latency.observe(1, 10.0)
        latency.observe(8, 24.0)
    assert latency.estimate(4) == pytest.approx(16.0, abs=0.5)  # 10 ms + 2 ms per frame
    assert latency.estimate(16) == pytest.approx(40.0, abs=1.0)
