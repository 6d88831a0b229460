"""The worker's bounded request queue, and the batches it hands the engines.

A request is admitted only while the queue has room: a worker that cannot keep up answers "worker
overloaded" at once instead of letting requests age past their deadlines (the edge then computes the
frame itself without waiting). A batch is the oldest request and every later one of the same model,
part and input shape, up to the batch size, collected for at most the batch delay: requests of other
shapes or models wait their turn in arrival order, never behind a batch that is still filling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from edge_sdk.serving.batching import SloBatcher

from .tensor_codec import TensorPayload

BatchKey = tuple[str, str, Hashable]
"""(model key, part, input shape): requests that can share one engine call."""


@dataclass(frozen=True)
class Request:
    device: str
    model_key: str
    part: str
    shape: Hashable
    """What decides whether two requests of one model and part can be stacked into one tensor."""
    response_topic: str
    correlation: bytes
    payload: TensorPayload
    arrived: float = field(default_factory=time.monotonic)

    @property
    def batch_key(self) -> BatchKey:
        return (self.model_key, self.part, self.shape)


def _age_ms(request: Request, slo_ms: float, now: float, wall_now: float) -> float:
    """How long a request has waited, as the SLO sees it: since it reached the worker, or more when the
    edge's deadline leaves it less than the SLO (it waited in the broker or on the link on its way, and
    past that deadline the edge has computed the frame itself)."""
    waited = (now - request.arrived) * 1000
    return max(waited, slo_ms - (request.payload.deadline - wall_now) * 1000)


class SloBatchers:
    """One SloBatcher per batch key (each model, part and shape has its own latencies), made on the key's
    first request and seeded with the batch times the worker measured at start (`seed`: ms by size)."""

    def __init__(self, slo_ms: float, max_batch: int, seed: Callable[[BatchKey], dict[int, float]]):
        self.slo_ms, self.max_batch, self.seed = slo_ms, max_batch, seed
        self._batchers: dict[BatchKey, SloBatcher] = {}

    def __call__(self, key: BatchKey) -> SloBatcher:
        batcher = self._batchers.get(key)
        if batcher is None:
            batcher = self._batchers[key] = SloBatcher(self.slo_ms, self.max_batch)
            for size, ms in self.seed(key).items():
                batcher.ran(size, ms)
        return batcher


class RequestQueue:
    """Thread-safe, bounded, FIFO across batch keys; `close` lets the consumer drain what is left.
    With `slo`, batches are what each key's SloBatcher decides (`take_slo_batch`)."""

    def __init__(self, capacity: int, slo: SloBatchers | None = None):
        self.capacity = capacity
        self.slo = slo
        self._items: deque[Request] = deque()
        self._condition = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        with self._condition:
            return len(self._items)

    def put(self, request: Request) -> bool:
        """False when the queue is full or closed (the caller answers the request itself)."""
        with self._condition:
            if self._closed or len(self._items) >= self.capacity:
                return False
            self._items.append(request)
            if self.slo is not None:
                self.slo(request.batch_key).arrivals.arrived(1, request.arrived * 1000)
            self._condition.notify_all()
            return True

    def take_batch(self, batch_size: int, delay_s: float, timeout: float | None = None) -> list[Request]:
        """The next batch (see the module's docstring); [] after `timeout` s with nothing queued, or once
        the queue is closed and empty. A closed queue hands out batches without waiting for them to fill."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._items or self._closed, timeout) or not self._items:
                return []
            key = self._items[0].batch_key
            fill_by = time.monotonic() + delay_s
            while True:
                matching = [request for request in self._items if request.batch_key == key][:batch_size]
                left = fill_by - time.monotonic()
                if len(matching) >= batch_size or left <= 0 or self._closed:
                    break
                self._condition.wait(left)
            taken = {id(request) for request in matching}
            self._items = deque(request for request in self._items if id(request) not in taken)
            return matching

    def take_slo_batch(self, timeout: float | None = None) -> tuple[list[Request], list[Request]]:
        """(the batch to run, the requests shed because they cannot meet the SLO) for the oldest request's
        key, as its SloBatcher decides; ([], []) as take_batch's []. A closed queue runs what is left."""
        assert self.slo is not None
        with self._condition:
            if not self._condition.wait_for(lambda: self._items or self._closed, timeout) or not self._items:
                return [], []
            key = self._items[0].batch_key
            batcher = self.slo(key)
            while True:
                # the oldest few batches' worth decide: a longer queue only adds frames younger than those
                now, wall = time.monotonic(), time.time()
                aged = sorted(
                    ((_age_ms(request, batcher.slo_ms, now, wall), request) for request in self._items
                     if request.batch_key == key),
                    key=lambda pair: -pair[0],
                )[: 4 * batcher.max_batch]  # fmt: skip
                matching = [request for _age, request in aged]
                decision = batcher.decide([age for age, _request in aged], now * 1000)
                if decision.take or decision.shed or self._closed or not decision.wait_ms:
                    break
                self._condition.wait(decision.wait_ms / 1000)
            shed = matching[: decision.shed]
            batch = matching[decision.shed : decision.shed + decision.take]
            if self._closed and not batch and not shed:
                batch = matching[: batcher.max_batch]
            taken = {id(request) for request in [*shed, *batch]}
            self._items = deque(request for request in self._items if id(request) not in taken)
            return batch, shed

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def drain(self) -> list[Request]:
        """Everything still queued, removed."""
        with self._condition:
            items, self._items = list(self._items), deque()
            return items


@dataclass(frozen=True)
class WorkerStats:
    """What a worker did since it started."""

    served: int = 0
    """Requests answered with outputs."""
    expired: int = 0
    """Requests whose deadline passed before their batch ran: dropped unanswered (the edge fell back)."""
    refused: int = 0
    """Requests dropped unanswered: a response topic not the sender's own, no correlation data, a bad topic."""
    errors: int = 0
    """Requests answered with an error: undecodable, unknown model or part, wrong inputs, engine failure."""
    overloaded: int = 0
    """Requests answered "worker overloaded" because the queue was full (or the worker stopping)."""
    cold: int = 0
    """Requests answered at once because their model was not loaded ("model loading"; worker_residency.py)."""
    shed: int = 0
    """Requests answered "shed" because they could not meet the worker's latency SLO."""
    batches: int = 0
    """Engine calls."""
    batched: int = 0
    """Requests those engine calls computed."""

    @property
    def mean_batch(self) -> float:
        return self.batched / self.batches if self.batches else 0.0

    def line(self) -> str:
        return (
            f"served {self.served}, expired {self.expired}, refused {self.refused}, errors {self.errors}, "
            f"overloaded {self.overloaded}, cold {self.cold}, shed {self.shed}, batches {self.batches} (mean batch {self.mean_batch:.2f})"
        )


class Counters:
    """The live counters behind WorkerStats, updated from paho's thread and the compute thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(WorkerStats.__dataclass_fields__, 0)

    def add(self, name: str, count: int = 1) -> None:
        with self._lock:
            self._values[name] += count

    def snapshot(self) -> WorkerStats:
        with self._lock:
            return WorkerStats(**self._values)


class RateLimitedLog:
    """One warning per reason per `every_s` seconds (with how many were quiet since), debug otherwise:
    a client sending garbage at a thousand messages a second must not flood the worker's log."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0):
        self._logger = logger
        self._every_s = every_s
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def warning(self, reason: str, detail: str) -> None:
        now = time.monotonic()
        with self._lock:
            last, quiet = self._last.get(reason, (-1e18, 0))
            loud = now - last >= self._every_s
            self._last[reason] = (now, 0) if loud else (last, quiet + 1)
        if loud:
            more = f" ({quiet} more since the last such line)" if quiet else ""
            self._logger.warning("%s: %s%s", reason, detail, more)
        else:
            self._logger.debug("%s: %s", reason, detail)


class LoadMeter:
    """The queue wait and busy share the load report gives: the mean wait of the requests run in the
    last `window_s` seconds (0 when none ran: an idle worker makes no one wait), and the share of the
    time since the previous reading spent in batches."""

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self._lock = threading.Lock()
        self._waits: deque[tuple[float, float]] = deque()
        self._busy_s = 0.0
        self._read_at = time.monotonic()

    def batch_ran(self, started: float, finished: float, queued_ms: list[float]) -> None:
        with self._lock:
            self._busy_s += finished - started
            self._waits.extend((finished, ms) for ms in queued_ms)

    def read(self) -> tuple[float, float]:
        """(queue_ms, busy) now; resets the busy time."""
        now = time.monotonic()
        with self._lock:
            while self._waits and now - self._waits[0][0] > self.window_s:
                self._waits.popleft()
            waits = [ms for _at, ms in self._waits]
            busy, since = self._busy_s, self._read_at
            self._busy_s, self._read_at = 0.0, now
        queue_ms = sum(waits) / len(waits) if waits else 0.0
        return queue_ms, min(1.0, busy / (now - since)) if now > since else 0.0
