"""Batch size and queue delay chosen under a latency SLO (p99 from a frame's arrival to its result).

The rule, and why (figures: docs/benchmarks.md, "Adaptive batching"):

- **Run at once what is waiting (Triton's "start with no delay").** While the engine is busy, the
  queue fills, so batches grow with the load by themselves; a static batch that waits to fill adds
  its whole delay at light load.
- **Bounded by the oldest frame's deadline.** The batch is the largest whose estimated latency still
  lets the oldest waiting frame finish within the SLO (`estimate(b)`: each batch size's measured
  latency, mean plus twice its mean deviation, seeded at start and updated after every call).
- **Wait only to keep up (Clipper's batch = throughput x time left).** When the arrival rate needs
  batches larger than what is waiting (`b / estimate(b)` below the rate), and such a batch serves at
  least 10% more frames per ms (where batching pays: a GPU), it waits for them, at most until the
  oldest frame's slack is spent.
- **Past what the hardware carries, shed the oldest, counted.** A frame that cannot meet the SLO
  even alone is dropped. When arrivals outpace the batch the oldest frame allows, the frames too old
  for the most efficient batch are dropped so that batch can run: serving the younger frames keeps
  the rest within the SLO instead of every frame missing it.

Everything is in milliseconds and takes the clock's readings from the caller, so the inference stage,
the offload worker and the tests drive one policy.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from edge_sdk.core.errors import ConfigError

HEADROOM = 0.9
"""The share of the SLO the batcher plans to use: the rest absorbs what a batch's estimate cannot
see (the hop to the sinks, a busy core)."""
DEVIATIONS = 2.0
"""Mean deviations added to a batch size's mean latency in its estimate."""
LATENCY_WEIGHT = 0.1
"""Weight of a batch's newest latency in its size's running mean and deviation."""
RATE_TIME_CONSTANT_MS = 250.0
"""How fast the arrival rate follows a change of load: a step is two thirds seen after 250 ms."""
KEEP_UP_MARGIN = 1.1
"""Batches are sized to carry 10% more than the measured arrival rate."""
SHED_GAIN = 1.25
"""Frames are dropped to run a larger batch only when it serves at least 25% more frames per ms: on an
engine where batching barely pays, dropping the old frames for the young ones gains nothing."""
WAIT_GAIN = 1.1
"""It waits for a larger batch only when that batch serves at least 10% more frames per ms than running
what waits now: on an engine whose cost is per frame (a CPU), waiting is latency for nothing."""
MIN_WAIT_MS = 0.2
"""A wait shorter than this is not worth a decision: run now."""


class SloUnreachable(ConfigError):
    """No batch can meet the SLO on this engine, even a batch of one on an idle engine."""


@dataclass(frozen=True)
class BatchDecision:
    shed: int
    """The oldest frames to drop now: they cannot meet the SLO."""
    take: int
    """The frames after those to run now (0: none)."""
    wait_ms: float = 0.0
    """With take 0 and frames waiting: how long to wait for more before deciding again."""
    size: int = 0
    """The engine batch they run as: `take`, or the built size it is padded to on a fixed-shape engine."""


class BatchLatency:
    """Each batch size's latency (ms): a running mean and mean deviation per size seen, a straight line
    through the sizes seen for the others (a batch costs a fixed part and a part per frame)."""

    def __init__(self) -> None:
        self._mean: dict[int, float] = {}
        self._deviation: dict[int, float] = {}

    @property
    def sizes(self) -> list[int]:
        return sorted(self._mean)

    def observe(self, size: int, ms: float) -> None:
        mean = self._mean.get(size)
        if mean is None:
            self._mean[size], self._deviation[size] = ms, 0.1 * ms
            return
        self._deviation[size] += LATENCY_WEIGHT * (abs(ms - mean) - self._deviation[size])
        self._mean[size] = mean + LATENCY_WEIGHT * (ms - mean)
        # The sizes not run now follow at half the pace: a busier or quieter machine changes every
        # size's latency, and a size the batcher stopped choosing must not keep its old figure.
        drift = 1.0 + 0.5 * LATENCY_WEIGHT * (ms / mean - 1.0)
        for other in self._mean:
            if other != size:
                self._mean[other] *= drift
                self._deviation[other] *= drift

    def estimate(self, size: int) -> float:
        """The latency to plan with for a batch of `size`; inf before any batch was measured."""
        if not self._mean:
            return math.inf
        if size in self._mean:
            return self._mean[size] + DEVIATIONS * self._deviation[size]
        sizes = self.sizes
        if len(sizes) == 1:  # one size seen: a batch costs at most its share per frame more
            only = sizes[0]
            return self.estimate(only) * max(1.0, size / only)
        position = bisect.bisect_left(sizes, size)
        low, high = (sizes[0], sizes[1]) if position == 0 else (sizes[-2], sizes[-1])
        if 0 < position < len(sizes):
            low, high = sizes[position - 1], sizes[position]
        low_ms, high_ms = self.estimate(low), self.estimate(high)
        slope = max(0.0, (high_ms - low_ms) / (high - low))
        return max(low_ms + slope * (size - low), 1e-3)


class ArrivalRate:
    """Frames per millisecond, an exponentially weighted rate with `RATE_TIME_CONSTANT_MS`."""

    def __init__(self) -> None:
        self._rate = 0.0
        self._at: float | None = None

    def arrived(self, frames: float, now_ms: float) -> None:
        """`frames` arrived at `now_ms` (a share of a frame where workers split the arrivals)."""
        self._decay(now_ms)
        self._rate += frames / RATE_TIME_CONSTANT_MS

    def per_ms(self, now_ms: float) -> float:
        self._decay(now_ms)
        return self._rate

    def _decay(self, now_ms: float) -> None:
        if self._at is not None and now_ms > self._at:
            self._rate *= math.exp(-(now_ms - self._at) / RATE_TIME_CONSTANT_MS)
        self._at = now_ms if self._at is None else max(self._at, now_ms)


class SloBatcher:
    """Decides, when the engine is free, what to run, drop or wait for (the module's docstring).

    `sizes`: the batch sizes the engine was built for when its batch axis is fixed (a static
    TensorRT/DLA profile); a batch is padded to the nearest one up, and `padded` counts the empty
    rows that cost. None: any size up to `max_batch`.
    """

    def __init__(self, slo_ms: float, max_batch: int, sizes: Sequence[int] | None = None):
        if slo_ms <= 0:
            raise ConfigError(f"latency_slo_ms must be above 0, got {slo_ms:g}")
        if max_batch < 1:
            raise ConfigError(f"the batch size must be at least 1, got {max_batch}")
        self.slo_ms, self.max_batch = slo_ms, max_batch
        self.sizes = sorted({size for size in sizes if size >= 1}) if sizes else None
        if self.sizes is not None:
            self.max_batch = min(max_batch, self.sizes[-1])
        self.latency = BatchLatency()
        self.arrivals = ArrivalRate()
        self.shed = 0
        """Frames dropped because they could not meet the SLO."""
        self._table: list[float] | None = None

    @property
    def budget_ms(self) -> float:
        return self.slo_ms * HEADROOM

    def engine_size(self, frames: int) -> int:
        """The batch `frames` run as: the smallest built size that holds them."""
        if self.sizes is None:
            return frames
        return next((size for size in self.sizes if size >= frames), self.sizes[-1])

    def estimate(self, frames: int) -> float:
        return self.latency.estimate(self.engine_size(frames))

    def choices(self, most: int) -> list[int]:
        """The batch sizes it may run, up to `most`: any on a fixed-size engine (padded to its size); on a
        dynamic one the powers of two and `max_batch`, the shapes timed at start: few shapes, because on
        ONNX Runtime's CUDA provider each needs a session of its own (a session that changes shape pays
        28 ms to 2 s each time; docs/benchmarks.md, "Adaptive batching")."""
        if self.sizes is not None:
            return list(range(1, most + 1))
        return [size for size in batch_buckets(self.max_batch) if size <= most]

    def check_reachable(self) -> None:
        """Raise SloUnreachable when even the smallest batch, measured on an idle engine, misses the SLO."""
        best = self.estimate(1)
        if best > self.budget_ms:
            raise SloUnreachable(
                f"latency_slo_ms {self.slo_ms:g} cannot be met: the best measured batch latency is {best:.1f} ms "
                f"(batch of {self.engine_size(1)}, mean plus {DEVIATIONS:g} deviations), and the batcher plans "
                f"with {HEADROOM:.0%} of the SLO; raise the SLO to at least {best / HEADROOM:.1f} ms or use a "
                "faster engine"
            )

    def ran(self, frames: int, ms: float) -> None:
        """A batch of `frames` took `ms` from its start to its results."""
        self.latency.observe(self.engine_size(frames), ms)
        self._table = None

    def decide(self, ages_ms: Sequence[float], now_ms: float) -> BatchDecision:
        """`ages_ms`: how long each waiting frame has waited, oldest first."""
        if not self.latency.sizes:  # nothing measured yet: run what is waiting
            take = min(len(ages_ms), self.max_batch)
            return BatchDecision(0, take, size=self.engine_size(take) if take else 0)
        decision = self._decide(ages_ms, now_ms)
        self.shed += decision.shed
        return decision

    def _decide(self, ages_ms: Sequence[float], now_ms: float) -> BatchDecision:
        budget, estimate = self.budget_ms, self._estimates()
        older = _OlderThan(ages_ms)
        dead = older.count(budget - estimate[1])
        ages = ages_ms[dead:]
        if not ages:
            return BatchDecision(dead, 0)
        most = min(len(ages), self.max_batch)
        take = max((size for size in self.choices(most) if ages[0] + estimate[size] <= budget), default=1)
        rate = self.arrivals.per_ms(now_ms)
        if take < most and rate > take / estimate[take]:
            dropped, take = self._shed_for_throughput(older, dead, most, take)
            return self._decision(dead + dropped, take)
        if take == len(ages) and take < self.max_batch:
            wait = self._wait_to_keep_up(ages, rate, budget)
            if wait >= MIN_WAIT_MS:
                return BatchDecision(dead, 0, wait_ms=wait)
        return self._decision(dead, take)

    def _estimates(self) -> list[float]:
        """estimate(size) for 0..max_batch, kept until the next batch is measured (a decision over a long
        queue must not cost what the engine does)."""
        if self._table is None:
            self._table = [0.0] + [self.estimate(size) for size in range(1, self.max_batch + 1)]
        return self._table

    def _decision(self, shed: int, take: int) -> BatchDecision:
        return BatchDecision(shed, take, size=self.engine_size(take) if take else 0)

    def _shed_for_throughput(self, older: _OlderThan, dead: int, most: int, take: int) -> tuple[int, int]:
        """(frames to drop, frames to run): the batch that serves frames fastest, dropping the frames too
        old for it, when it is at least `SHED_GAIN` faster than the `take` the oldest frame allows (else
        no frame is dropped for it); the smallest such batch among those within 3% of the fastest."""
        budget, estimate = self.budget_ms, self._estimates()
        waiting = older.total - dead
        options = []
        for size in self.choices(most):
            too_old = older.count(budget - estimate[size]) - dead
            if waiting - too_old >= size:
                options.append((size / estimate[size], size, too_old))
        fastest = max((rate for rate, _size, _old in options), default=0.0)
        if fastest < SHED_GAIN * take / estimate[take]:
            return 0, take
        _rate, size, too_old = next(option for option in options if option[0] >= 0.97 * fastest)
        return too_old, size

    def _wait_to_keep_up(self, ages: Sequence[float], rate: float, budget: float) -> float:
        if rate <= 0:
            return 0.0
        estimate = self._estimates()
        sizes = self.choices(self.max_batch)
        fastest = max(size / estimate[size] for size in sizes)
        wanted = min(rate * KEEP_UP_MARGIN, 0.97 * fastest)
        target = next(size for size in sizes if size / estimate[size] >= wanted)
        waiting = len(ages)
        if target <= waiting or target / estimate[target] < WAIT_GAIN * waiting / estimate[waiting]:
            return 0.0
        slack = budget - ages[0] - estimate[target]
        return max(0.0, min(slack, (target - len(ages)) / rate))


def batch_buckets(largest: int) -> list[int]:
    """1, 2, 4 ... up to `largest`, and `largest` itself."""
    sizes = [1]
    while sizes[-1] * 2 <= largest:
        sizes.append(sizes[-1] * 2)
    return sizes if sizes[-1] == largest else [*sizes, largest]


class _OlderThan:
    """How many of the waiting frames (ages oldest first) are older than a limit, by bisection."""

    def __init__(self, ages_oldest_first: Sequence[float]):
        self._negated = [-age for age in ages_oldest_first]
        self.total = len(self._negated)

    def count(self, limit_ms: float) -> int:
        return bisect.bisect_left(self._negated, -limit_ms)
