"""The link estimator (cloud_offload/link_estimator.py) on synthetic traffic: it sees a step within
2 s, ignores a spike, does not flap on a noisy steady link, and believes a drop faster than a rise."""

from __future__ import annotations

import numpy as np
import pytest

from cloud_offload.link_estimator import LinkEstimator

MBIT = 1e6
RATE_HZ = 10  # transfers the agent makes a second


def feed(
    estimator: LinkEstimator, start: float, seconds: float, mbit: float, noise: float = 0.0, seed: int = 0
) -> float:
    """Transfers of 20 KB at `mbit` (times a lognormal noise) for `seconds`; returns the end time."""
    rng = np.random.default_rng(seed)
    at = start
    for _ in range(int(seconds * RATE_HZ)):
        at += 1 / RATE_HZ
        rate = mbit * MBIT * float(np.exp(rng.normal(0, noise))) if noise else mbit * MBIT
        estimator.add_transfer(at, 20_000, 20_000 * 8 / rate)
    return at


def mbit_now(estimator: LinkEstimator) -> float:
    bandwidth = estimator.estimate().bandwidth_bps
    assert bandwidth is not None
    return bandwidth / MBIT


@pytest.mark.parametrize(("before", "after"), [(100, 20), (100, 5), (20, 1), (100, 50), (5, 1)])
def test_a_drop_in_bandwidth_is_seen_within_two_seconds(before: float, after: float) -> None:
    estimator = LinkEstimator()
    at = feed(estimator, 0.0, 10, before)
    feed(estimator, at, 2, after)
    assert mbit_now(estimator) == pytest.approx(after, rel=0.1)


def test_a_rise_is_believed_within_a_few_seconds_but_not_from_one_burst() -> None:
    estimator = LinkEstimator()
    at = feed(estimator, 0.0, 10, 5)
    estimator.add_transfer(at + 0.1, 20_000, 20_000 * 8 / (200 * MBIT))  # one burst through a buffer
    assert mbit_now(estimator) == pytest.approx(5, rel=0.05), "a single spike moves nothing"
    at = feed(estimator, at + 0.1, 8, 10)  # the link doubles
    assert mbit_now(estimator) == pytest.approx(10, rel=0.25)


def test_a_noisy_steady_link_does_not_flap() -> None:
    estimator = LinkEstimator()
    at = feed(estimator, 0.0, 5, 20, noise=0.3, seed=1)
    readings = []
    for second in range(30):
        at = feed(estimator, at, 1, 20, noise=0.3, seed=second + 2)
        readings.append(mbit_now(estimator))
    assert min(readings) > 0.6 * 20 and max(readings) < 1.2 * 20, readings


def test_rtt_trusts_the_higher_average_and_nothing_is_known_before_samples() -> None:
    estimator = LinkEstimator()
    assert estimator.estimate().bandwidth_bps is None and estimator.estimate().rtt_s is None
    for step in range(20):
        estimator.add_rtt(step * 0.1, 0.020)
    for step in range(20, 30):
        estimator.add_rtt(step * 0.1, 0.060)  # queueing builds up
    rtt = estimator.estimate().rtt_s
    assert rtt is not None and rtt > 0.045, "a rising RTT is believed within a second (fast half-life 0.5 s)"
    estimator.add_transfer(3.0, 0, 0.1)
    estimator.add_transfer(3.0, 1000, 0.0)
    assert estimator.estimate().bandwidth_bps is None, "empty or instant transfers say nothing"


def test_a_step_waiting_for_confirmation_is_visible_so_the_link_can_be_probed_again() -> None:
    estimator = LinkEstimator()
    for second in range(5):
        estimator.add_transfer(float(second), 125_000, 1.0)  # 1 Mbit/s
    assert not estimator.bandwidth_unconfirmed
    estimator.add_transfer(5.0, 125_000, 0.01)  # 100 Mbit/s: held back
    assert estimator.bandwidth_unconfirmed and estimator.estimate().bandwidth_bps == pytest.approx(1e6)
    estimator.add_transfer(5.2, 125_000, 0.01)
    estimator.add_transfer(5.4, 125_000, 0.01)
    assert not estimator.bandwidth_unconfirmed and estimator.estimate().bandwidth_bps == pytest.approx(100e6)
