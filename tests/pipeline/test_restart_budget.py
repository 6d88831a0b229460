"""RestartBudget: at most max_restarts within any window of window_seconds, on an injected clock."""

from __future__ import annotations

import time

from edge_sdk.pipeline.watchdog import RestartBudget


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_allow_when_restarts_stay_within_the_budget_spends_one_each_then_refuses() -> None:
    clock = FakeClock()
    budget = RestartBudget(max_restarts=3, window_seconds=60, clock=clock)
    spent = []
    for _ in range(3):
        spent.append(budget.allow())
        clock.now += 1
    assert spent == [True, True, True]
    assert budget.used == 3
    assert not budget.allow(), "a fourth crash within the window stops the stage for good"
    assert budget.used == 3, "a refusal spends nothing"


def test_allow_when_the_oldest_restart_leaves_the_window_allows_exactly_one_more() -> None:
    # given restarts at t=0, 10 and 20 of a budget of 3 per 60 s
    clock = FakeClock(0.0)
    budget = RestartBudget(max_restarts=3, window_seconds=60, clock=clock)
    for t in (0.0, 10.0, 20.0):
        clock.now = t
        assert budget.allow()
    # then the window slides: each restart is forgotten 60 s after it, not all at once
    clock.now = 60.0
    assert not budget.allow(), "a restart exactly window_seconds old still counts"
    clock.now = 60.5
    assert budget.allow(), "the t=0 restart has left the window"
    assert not budget.allow(), "t=10, t=20 and t=60.5 are still in it"
    clock.now = 70.5
    assert budget.allow(), "the t=10 restart has left"
    assert budget.used == 3


def test_allow_when_refused_repeatedly_does_not_push_the_window_back() -> None:
    clock = FakeClock(0.0)
    budget = RestartBudget(max_restarts=1, window_seconds=5, clock=clock)
    assert budget.allow()
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        clock.now = t
        assert not budget.allow()
    clock.now = 5.01
    assert budget.allow(), "only restarts that happened count, not the crashes that were refused"


def test_allow_when_every_restart_has_left_the_window_gives_the_whole_budget_back() -> None:
    clock = FakeClock(0.0)
    budget = RestartBudget(max_restarts=2, window_seconds=30, clock=clock)
    assert budget.allow() and budget.allow() and not budget.allow()
    clock.now = 100.0
    assert budget.allow()
    assert budget.used == 1, "both old restarts are forgotten, not only the oldest"
    assert budget.allow() and not budget.allow()


def test_allow_when_max_restarts_is_zero_never_allows() -> None:
    budget = RestartBudget(max_restarts=0, window_seconds=60, clock=FakeClock())
    assert not budget.allow()
    assert budget.used == 0


def test_restart_budget_when_no_clock_is_given_reads_the_monotonic_clock() -> None:
    budget = RestartBudget(max_restarts=1, window_seconds=60)
    assert budget.clock is time.monotonic, "restarts are timed on a clock that wall-clock changes do not move"
