"""The hot-model cache's policy (edge_sdk/serving/model_cache.py) on a clock the test moves: LRU
order, pinning, the residency and frequency rules, the budget's refusals and the hit-rate arithmetic."""

from __future__ import annotations

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.serving.model_cache import MB, ModelCache, ModelCacheSettings, Refusal


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SIZES = {name: 10 * MB for name in "abcdef"}


def make(clock: Clock, memory_mb: float = 30, min_residency_s: float = 0.0, **settings: object) -> ModelCache:
    return ModelCache(
        ModelCacheSettings(memory_mb=memory_mb, min_residency_s=min_residency_s, **settings),  # type: ignore[arg-type]
        SIZES,
        clock,
    )


def ask(cache: ModelCache, clock: Clock, key: str, step_s: float = 1.0) -> list[str] | Refusal | None:
    """One request: a hit returns None; a miss is admitted (and loaded at once) or refused."""
    clock.now += step_s
    if cache.lookup(key):
        return None
    decision = cache.admit(key)
    if not isinstance(decision, Refusal):
        cache.loaded(key)
    return decision


def test_plain_lru_evicts_the_least_recently_used_and_counts_hits_and_misses() -> None:
    clock = Clock()
    cache = make(clock)
    for key in "abc":
        assert ask(cache, clock, key) == []
    assert ask(cache, clock, "a") is None  # b is now the least recently used
    assert ask(cache, clock, "d") == ["b"]
    assert ask(cache, clock, "e") == ["c"]
    assert cache.resident() == ["e", "d", "a"]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.loads, stats.evictions, stats.refused) == (1, 5, 5, 2, 0)
    assert stats.hit_rate == pytest.approx(1 / 6)
    assert stats.used_mb == 30 and stats.budget_mb == 30


def test_a_pinned_model_is_never_evicted_even_when_least_recently_used() -> None:
    clock = Clock()
    cache = make(clock, pinned=("a",))
    for key in "abc":
        ask(cache, clock, key)
    assert ask(cache, clock, "d") == ["b"]  # a is older but pinned
    assert ask(cache, clock, "e") == ["c"]
    assert "a" in cache.resident() and cache.stats().pinned == ["a"]


def test_a_burst_of_rare_models_does_not_push_out_the_hot_ones() -> None:
    clock = Clock()
    cache = make(clock, min_residency_s=60)
    for _round in range(5):  # a, b and c are asked for 5 times each over the window
        for key in "abc":
            ask(cache, clock, key)
    # then a burst: d, e, f once each, twice over
    refusals = [ask(cache, clock, key) for key in "defdef"]
    assert all(isinstance(decision, Refusal) for decision in refusals), refusals
    assert sorted(cache.resident()) == ["a", "b", "c"]
    assert cache.stats().evictions == 0 and cache.stats().refused == 6
    # the same stream through plain LRU: every rare request evicts a hot model
    lru_clock = Clock()
    lru = make(lru_clock)
    for _round in range(5):
        for key in "abc":
            ask(lru, lru_clock, key)
    assert [ask(lru, lru_clock, key) for key in "def"] == [["a"], ["b"], ["c"]]


def test_a_model_that_becomes_hot_gets_in_once_asked_for_more_often_than_a_resident() -> None:
    clock = Clock()
    cache = make(clock, min_residency_s=60)
    for key in "abc":
        ask(cache, clock, key)
    ask(cache, clock, "a")
    ask(cache, clock, "b")  # a and b asked twice, c once in the window
    assert isinstance(ask(cache, clock, "d"), Refusal), "d asked once, as often as young c"
    assert ask(cache, clock, "d") == ["c"], "d asked twice now, more often than c"
    assert sorted(cache.resident()) == ["a", "b", "d"]


def test_a_recently_loaded_model_stays_for_its_residency_then_lru_applies_again() -> None:
    clock = Clock()
    cache = make(clock, min_residency_s=10)
    for key in "abc":
        ask(cache, clock, key, step_s=0.1)
    assert isinstance(ask(cache, clock, "d", step_s=0.1), Refusal), "a, b, c are young and asked as often"
    # after the residency (and the counting window) has passed, nobody is protected: LRU again
    clock.now += 11
    assert ask(cache, clock, "d") == ["a"]


def test_a_hot_model_is_kept_however_long_ago_it_was_loaded_and_a_cold_one_goes_first() -> None:
    clock = Clock()
    cache = make(clock, min_residency_s=10)
    for key in "abc":
        ask(cache, clock, key)
    clock.now += 20  # all loaded long ago, and the window is empty
    for _ in range(3):
        ask(cache, clock, "a")
    ask(cache, clock, "b")
    ask(cache, clock, "c")
    # a is the least recently used but asked 3 times in the window; b once, as often as d will be
    assert ask(cache, clock, "d") == ["b"]
    assert sorted(cache.resident()) == ["a", "c", "d"]


def test_a_model_still_loading_is_a_miss_and_cannot_be_evicted_and_a_failed_load_gives_its_room_back() -> None:
    clock = Clock()
    cache = make(clock, memory_mb=20)
    assert cache.lookup("a") is False and cache.admit("a") == []
    assert cache.lookup("a") is False, "not ready before loaded()"
    assert cache.admit("a") == [], "admitted once"
    assert cache.admit("b") == []
    assert isinstance(cache.admit("c"), Refusal), "a and b are loading: nothing can make room"
    assert cache.stats().loading == ["a", "b"] and cache.stats().used_mb == 20
    cache.failed("b")
    cache.loaded("a")
    assert cache.lookup("a") is True
    assert cache.admit("c") == [] and cache.stats().used_mb == 20


def test_models_of_different_sizes_evict_as_many_as_needed() -> None:
    clock = Clock()
    cache = ModelCache(
        ModelCacheSettings(memory_mb=30, min_residency_s=0), {"s1": 8 * MB, "s2": 8 * MB, "big": 25 * MB}, clock
    )
    ask(cache, clock, "s1")
    ask(cache, clock, "s2")
    assert ask(cache, clock, "big") == ["s1", "s2"]
    assert cache.stats().used_mb == 25


def test_a_budget_smaller_than_an_engine_is_refused_at_start_saying_how_much_is_needed() -> None:
    with pytest.raises(
        ConfigError, match=r"budget 15 MB is smaller than the engine of big \(25.00 MB\).*at least 25.00 MB"
    ):
        ModelCache(ModelCacheSettings(memory_mb=15), {"small": 5 * MB, "big": 25 * MB})
    with pytest.raises(ConfigError, match=r"pinned model.*nope not served"):
        ModelCache(ModelCacheSettings(memory_mb=30, pinned=("nope",)), SIZES)
    with pytest.raises(ConfigError, match=r"pinned models need 30\.00 MB, more than the budget of 25 MB"):
        ModelCache(ModelCacheSettings(memory_mb=25, pinned=("a", "b", "c")), SIZES)
    with pytest.raises(ValueError, match="greater than 0"):
        ModelCacheSettings(memory_mb=0)


def test_the_start_order_is_the_pinned_models_then_the_rest_while_they_fit() -> None:
    cache = make(Clock(), memory_mb=35, pinned=("e",))
    assert cache.start_order("abcdef") == ["e", "a", "b"]


def test_the_hit_rate_is_hits_over_requests() -> None:
    clock = Clock()
    cache = make(clock)
    assert cache.stats().hit_rate == 0.0
    for key in "aaab":  # a: miss, hit, hit; b: miss
        ask(cache, clock, key)
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.hit_rate) == (2, 2, 0.5)
    assert "hit rate 50.0% (2 of 4)" in stats.line()
