"""Which engines stay loaded within a memory budget: LRU with pinning, a minimum residency and a
frequency rule, so a burst of rare models cannot push out the hot ones and a newly hot model still
gets in.

The policy holds no engine and no thread: the caller asks `lookup(key)` for each request (a hit or a
miss, counted), `admit(key, bytes)` on a miss (which resident keys to evict to make room, or
`Refusal`), then reports `loaded(key)` once the engine is open and warmed up (or `failed(key)`).
Time comes from an injected clock, so tests and the benchmark drive it.

Eviction, for a model C that is asked for and does not fit: victims are taken least recently used
first among the resident, unpinned models, and a victim V is passed over (protected) when

- V was asked for more often than C over the last `min_residency_s` seconds, or
- V was loaded less than `min_residency_s` ago and was asked for at least as often as C.

So a model that just paid for its load stays for the residency time unless a model asked more often
needs its room, and a hot model is not evicted for a rarer one, however long ago it was loaded. If
passing over the protected ones leaves too little room, nothing is evicted and C is refused (the
caller serves the request some other way, e.g. the edge computes the frame itself). With
`min_residency_s` = 0 the window is empty, every count is 0 and the policy is plain LRU: the
benchmark compares the two with one class.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.core.errors import ConfigError

MB = 1_000_000
"""A megabyte of the budget: 10^6 bytes."""


class ModelCacheSettings(BaseModel):
    """How many engines a worker or a multi-model pipeline keeps loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mb: float = Field(gt=0, description="Budget for loaded engines, in MB (10^6 bytes) of engine files.")
    pinned: tuple[str, ...] = Field((), description="Models always loaded, never evicted (by key).")
    min_residency_s: float = Field(
        30.0,
        ge=0,
        description="A model loaded less than this ago is evicted only for one asked for more often; "
        "also the window over which requests are counted. 0: plain LRU.",
    )

    @property
    def budget_bytes(self) -> int:
        return int(self.memory_mb * MB)


class CacheStats(BaseModel):
    """What a cache did since it started, and what it holds now."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget_mb: float
    used_mb: float = Field(description="Engine files of the resident and loading models, in MB.")
    resident: list[str] = Field(default_factory=list, description="Loaded, warmed-up models, most recent use first.")
    loading: list[str] = Field(default_factory=list, description="Models admitted whose load has not finished.")
    pinned: list[str] = Field(default_factory=list)
    hits: int = 0
    misses: int = 0
    loads: int = Field(0, description="Loads finished (warmed up and ready).")
    evictions: int = 0
    refused: int = Field(0, description="Misses not admitted: every model that could make room was protected.")
    hit_rate: float = Field(0.0, ge=0, le=1, description="hits / (hits + misses); 0 before any request.")

    def line(self) -> str:
        return (
            f"hit rate {self.hit_rate:.1%} ({self.hits} of {self.hits + self.misses}), loads {self.loads}, "
            f"evictions {self.evictions}, refused {self.refused}, {self.used_mb:.1f} of {self.budget_mb:.1f} MB"
        )


@dataclass(frozen=True)
class Refusal:
    """A miss that is not admitted now; `reason` says why, for the caller's answer and log."""

    key: str
    reason: str


@dataclass
class _Entry:
    key: str
    size: int
    admitted_at: float
    ready: bool = False
    loaded_at: float = 0.0
    last_use: float = 0.0
    uses: int = 0


@dataclass
class _Window:
    """Requests per model over the last `span` seconds."""

    span: float
    asked: dict[str, deque[float]] = field(default_factory=dict)

    def add(self, key: str, now: float) -> None:
        if self.span > 0:
            self.asked.setdefault(key, deque()).append(now)

    def count(self, key: str, now: float) -> int:
        times = self.asked.get(key)
        if not times:
            return 0
        while times and now - times[0] > self.span:
            times.popleft()
        return len(times)


class ModelCache:
    """The policy (see the module's docstring). Not thread-safe: a caller with threads holds a lock."""

    def __init__(
        self,
        settings: ModelCacheSettings,
        sizes: Mapping[str, int],
        clock: Callable[[], float] = time.monotonic,
    ):
        """`sizes`: every model that may be asked for, with its bytes. Refuses (ConfigError) a budget
        smaller than any one of them, an unknown pinned model, and pinned models that overflow it."""
        if not sizes:
            raise ConfigError("a model cache needs at least one model")
        budget = settings.budget_bytes
        too_big = {key: size for key, size in sizes.items() if size > budget}
        if too_big:
            listed = ", ".join(f"{key} ({size / MB:.2f} MB)" for key, size in sorted(too_big.items()))
            raise ConfigError(
                f"model memory budget {settings.memory_mb:g} MB is smaller than the engine of {listed}: "
                f"give at least {max(too_big.values()) / MB:.2f} MB"
            )
        unknown = [key for key in settings.pinned if key not in sizes]
        if unknown:
            raise ConfigError(f"pinned model(s) {', '.join(unknown)} not served (served: {', '.join(sorted(sizes))})")
        pinned_bytes = sum(sizes[key] for key in set(settings.pinned))
        if pinned_bytes > budget:
            raise ConfigError(
                f"the pinned models need {pinned_bytes / MB:.2f} MB, more than the budget of {settings.memory_mb:g} MB"
            )
        self.settings, self.sizes, self.clock = settings, dict(sizes), clock
        self.pinned = frozenset(settings.pinned)
        self._entries: dict[str, _Entry] = {}
        self._window = _Window(settings.min_residency_s)
        self._counts = dict.fromkeys(("hits", "misses", "loads", "evictions", "refused"), 0)

    # --- per request --------------------------------------------------------------------------------

    def lookup(self, key: str) -> bool:
        """Whether `key` is loaded and ready (a hit); counted either way, and as a use when a hit."""
        now = self.clock()
        self._window.add(key, now)
        entry = self._entries.get(key)
        if entry is None or not entry.ready:
            self._counts["misses"] += 1
            return False
        self._counts["hits"] += 1
        entry.last_use, entry.uses = now, entry.uses + 1
        return True

    def admit(self, key: str, size: int | None = None) -> list[str] | Refusal:
        """Room for `key` (loading from now on, its bytes counted): the keys to evict first, least
        recently used first; [] if it fits or is already admitted; Refusal when it cannot get in now."""
        if key in self._entries:
            return []
        size = self.sizes[key] if size is None else size
        if size > self.settings.budget_bytes:
            return Refusal(key, f"its engine ({size / MB:.2f} MB) is larger than the budget")
        now = self.clock()
        need = self.used_bytes + size - self.settings.budget_bytes
        victims: list[str] = []
        if need > 0:
            asked = self._window.count(key, now)
            for entry in sorted(self._entries.values(), key=lambda e: e.last_use):
                if need <= 0:
                    break
                if entry.key in self.pinned or not entry.ready or self._protected(entry, asked, now):
                    continue
                victims.append(entry.key)
                need -= entry.size
            if need > 0:
                self._counts["refused"] += 1
                return Refusal(key, "the cache is full of models asked for as often or loaded recently")
        for victim in victims:
            del self._entries[victim]
            self._counts["evictions"] += 1
        self._entries[key] = _Entry(key, size, admitted_at=now, last_use=now)
        return victims

    def loaded(self, key: str) -> None:
        """`key`'s engine is open and warmed up: requests for it are hits from now on."""
        entry = self._entries.get(key)
        if entry is None:
            return
        now = self.clock()
        entry.ready, entry.loaded_at, entry.last_use = True, now, now
        self._counts["loads"] += 1

    def failed(self, key: str) -> None:
        """`key`'s load failed: its room is given back."""
        self._entries.pop(key, None)

    def _protected(self, entry: _Entry, asked: int, now: float) -> bool:
        victim_asked = self._window.count(entry.key, now)
        young = now - entry.loaded_at < self.settings.min_residency_s
        return victim_asked > asked or (young and victim_asked >= asked)

    # --- what it holds ------------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return sum(entry.size for entry in self._entries.values())

    def resident(self) -> list[str]:
        """Ready models, most recently used first."""
        ready = [entry for entry in self._entries.values() if entry.ready]
        return [entry.key for entry in sorted(ready, key=lambda e: e.last_use, reverse=True)]

    def holds(self, key: str) -> bool:
        """Admitted: loading or ready."""
        return key in self._entries

    def stats(self) -> CacheStats:
        hits, misses = self._counts["hits"], self._counts["misses"]
        return CacheStats(
            budget_mb=self.settings.memory_mb,
            used_mb=round(self.used_bytes / MB, 3),
            resident=self.resident(),
            loading=[entry.key for entry in self._entries.values() if not entry.ready],
            pinned=sorted(self.pinned),
            hit_rate=hits / (hits + misses) if hits + misses else 0.0,
            **self._counts,
        )

    def start_order(self, keys: Iterable[str]) -> list[str]:
        """The models to load at start: the pinned ones, then `keys` in order while they fit (no evictions)."""
        order = list(dict.fromkeys(self.settings.pinned))
        room = self.settings.budget_bytes - sum(self.sizes[key] for key in order)
        for key in dict.fromkeys(keys):
            if key not in order and self.sizes[key] <= room:
                order.append(key)
                room -= self.sizes[key]
        return order
