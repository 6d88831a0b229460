"""The circuit breaker's states, driven by a clock the test moves."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edge_sdk.serving.breaker import BreakerSettings, BreakerState, CircuitBreaker, Transition, nearest_rank


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(**settings: object) -> tuple[CircuitBreaker, Clock, list[Transition]]:
    clock, changes = Clock(), []
    return CircuitBreaker(BreakerSettings.model_validate(settings), clock, changes.append), clock, changes


def test_defaults_are_the_documented_hystrix_and_envoy_ones() -> None:
    settings = BreakerSettings()
    assert (settings.p99_ms, settings.window_s, settings.min_requests) == (None, 10.0, 20)
    assert (settings.consecutive_errors, settings.error_ratio) == (5, 0.5)
    assert (settings.ejection_s, settings.max_ejection_s, settings.half_open_probes) == (5.0, 60.0, 3)


def test_p99_over_the_threshold_opens_it_only_from_min_requests_frames() -> None:
    cb, clock, changes = breaker(p99_ms=100, min_requests=5)
    for _ in range(4):
        cb.record(250)
        clock.now += 0.1
    assert cb.state is BreakerState.CLOSED, "4 frames are fewer than min_requests"

    cb.record(250)

    assert cb.state is BreakerState.OPEN and not cb.use_primary()
    assert changes[-1].before is BreakerState.CLOSED and changes[-1].reason.startswith("p99 250 ms over 100 ms")


def test_fast_frames_keep_it_closed_and_old_slow_ones_leave_the_window() -> None:
    cb, clock, _ = breaker(p99_ms=100, min_requests=3, window_s=1.0)
    cb.record(300)
    cb.record(300)
    clock.now += 2.0  # both slow frames are older than the window now
    for _ in range(10):
        cb.record(20)
    assert cb.state is BreakerState.CLOSED and cb.use_primary() and cb.openings == 0


def test_consecutive_errors_open_it_at_once_and_a_success_resets_the_count() -> None:
    cb, _clock, changes = breaker(consecutive_errors=3, min_requests=100)
    cb.record(5, failed=True)
    cb.record(5, failed=True)
    cb.record(5)
    cb.record(5, failed=True)
    cb.record(5, failed=True)
    assert cb.state is BreakerState.CLOSED

    cb.record(5, failed=True)

    assert cb.state is BreakerState.OPEN and changes[-1].reason.startswith("3 errors in a row")


def test_error_ratio_over_min_requests_opens_it() -> None:
    cb, _clock, changes = breaker(error_ratio=0.5, min_requests=4, consecutive_errors=100)
    for failed in (True, False, True):
        cb.record(5, failed=failed)
    assert cb.state is BreakerState.CLOSED, "3 frames are fewer than min_requests"

    cb.record(5, failed=True)

    assert cb.state is BreakerState.OPEN and changes[-1].reason.startswith("3 of 4 frames failed")


def test_it_half_opens_after_the_ejection_and_closes_when_the_probes_keep_up() -> None:
    cb, clock, changes = breaker(p99_ms=100, min_requests=1, ejection_s=5, half_open_probes=2)
    cb.record(500)
    clock.now += 4.9
    assert not cb.use_primary(), "still within the ejection time"

    clock.now += 0.2
    assert cb.use_primary() and cb.state is BreakerState.HALF_OPEN
    cb.record(40)
    assert cb.state is BreakerState.HALF_OPEN, "one probe of two"
    cb.record(40)

    assert cb.state is BreakerState.CLOSED
    assert [(c.before, c.after) for c in changes] == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]


def test_a_slow_probe_opens_it_again_for_longer_up_to_the_maximum() -> None:
    cb, clock, changes = breaker(p99_ms=100, min_requests=1, ejection_s=5, max_ejection_s=12)
    cb.record(500)
    ejections = []
    for _ in range(3):
        clock.now += cb.ejection_s()
        assert cb.use_primary()
        cb.record(150)  # a probe over p99_ms
        ejections.append(cb.ejection_s())
    assert ejections == [10, 12, 12], "5 s x openings in a row, capped at max_ejection_s"
    assert changes[-1].reason.startswith("a probe of the primary took 150 ms, over 100 ms")
    assert cb.openings == 4

    clock.now += cb.ejection_s()
    for _ in range(3):
        cb.use_primary()
        cb.record(10)
    assert cb.state is BreakerState.CLOSED and cb.ejection_s() == 5, "closing starts the openings in a row again"


def test_a_probe_slower_than_the_frames_come_opens_it_again_even_within_p99() -> None:
    # given a primary that answers its probe in 60 ms (within 100) but computes a frame in 30 ms while
    # frames come every 10 ms: it answered in time only because the fallback had drained the queue
    cb, clock, changes = breaker(p99_ms=100, min_requests=1, half_open_probes=2)
    cb.record(500)
    clock.now += cb.ejection_s()
    assert cb.use_primary()

    cb.record(60, compute_ms=30, interval_ms=10)

    assert cb.state is BreakerState.OPEN
    assert changes[-1].reason == "a probe of the primary computed a frame in 30 ms, frames come every 10 ms"

    # when the frames slow down to one every 50 ms, then the same primary keeps up and closes it
    clock.now += cb.ejection_s()
    assert cb.use_primary()
    cb.record(60, compute_ms=30, interval_ms=50)
    cb.record(40, compute_ms=30, interval_ms=None)  # frames without a pace: latency alone judges
    assert cb.state is BreakerState.CLOSED


def test_a_failed_probe_opens_it_again() -> None:
    cb, clock, _ = breaker(consecutive_errors=1)
    cb.record(5, failed=True)
    clock.now += cb.ejection_s()
    assert cb.use_primary()
    cb.record(5, failed=True)
    assert cb.state is BreakerState.OPEN and cb.openings == 2


def test_without_p99_ms_latency_never_opens_it() -> None:
    cb, _clock, _ = breaker(min_requests=1)
    for _ in range(50):
        cb.record(10_000)
    assert cb.state is BreakerState.CLOSED


def test_bad_settings_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="error_ratio"):
        BreakerSettings.model_validate({"error_ratio": 1.5})
    with pytest.raises(ValidationError, match="consecutive_errors"):
        BreakerSettings.model_validate({"consecutive_errors": 0})
    with pytest.raises(ValidationError, match="probes"):
        BreakerSettings.model_validate({"probes": 3})


def test_nearest_rank_p99_below_100_samples_is_the_slowest() -> None:
    assert nearest_rank([1.0] * 50 + [90.0], 99) == 90.0
    assert nearest_rank([float(v) for v in range(1, 201)], 99) == 198.0
    assert nearest_rank([], 99) == 0.0
