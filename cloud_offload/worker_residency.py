"""Which of a worker's models are loaded: all of them (no budget), or those the hot-model cache keeps
within `--model-memory-mb` (edge_sdk/serving/model_cache.py decides; this module loads and closes).

At start every served model's engine is built or found in the engine cache, opened and warmed up once
(a broken engine fails the start, and the load report has every model's compute time for the edges
to decide on); with a budget, only the pinned models and then the others in order while they fit stay
open. The size of a model is its engine's files in the engine cache: what the budget can know before
loading it (a runtime's memory for activations and workspace comes on top).

A request for a model not loaded is answered at once ("model loading": the edge computes that frame
itself) and, when the policy admits it, a loader thread of its own opens the engine and warms it up
on the shipped scene; requests for it are hits only after the warm-up. Requests for loaded models
never wait for a load: paho's thread only asks the policy, and the compute thread only runs engines
that are open. An evicted engine is closed once the batch using it (if any) is done. Load and
eviction events are log lines; `stats()` goes into the worker's load report.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from edge_sdk.core.errors import ConfigError, first_line
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.profiles import DeviceProfile
from edge_sdk.serving.model_cache import MB, CacheStats, ModelCache, ModelCacheSettings, Refusal

from .frame_codec import MAX_PIXELS
from .protocol import ModelTimes
from .worker_models import ModelPreparer, ModelSpec, ServedModel, TailRunner, open_model, prepare_model

EVENTS_LOGGER = "cloud_offload.worker.cache"
"""Load and eviction events: `edge-sdk offload worker` shows them (info lines on stderr)."""
log = logging.getLogger(EVENTS_LOGGER)

LOADING = "model loading"
"""The answer to a request for a model that is not loaded yet (its load has started or is queued)."""


@dataclass
class _Open:
    """An open engine, with the batches using it now; closed by whoever lets go of it last."""

    served: ServedModel
    stack: ExitStack
    users: int = 0
    retired: bool = False


class WorkerModels:
    """The models a worker serves, by key; `start()` loads them, `close()` closes them."""

    def __init__(
        self,
        pipelines: Sequence[PipelineConfig],
        profile: DeviceProfile,
        cache: EngineCache,
        threads: int | None = None,
        max_pixels: int = MAX_PIXELS,
        budget: ModelCacheSettings | None = None,
        prepare: ModelPreparer | None = None,
    ):
        """`prepare`: how a pipeline's model is had (default: its local engine, `prepare_model`)."""
        self.pipelines, self.profile, self.cache = list(pipelines), profile, cache
        self.prepare: ModelPreparer = prepare or (lambda config: prepare_model(config, profile, cache))
        self.threads, self.max_pixels, self.budget = threads, max_pixels, budget
        self.policy: ModelCache | None = None
        self._specs: dict[str, ModelSpec] = {}
        self._open: dict[str, _Open] = {}
        self._times: dict[str, ModelTimes] = {}
        """Each model's last compute times, kept while it is not loaded (the edges decide on them)."""
        self._tails: dict[str, dict[str, TailRunner]] = {}
        self._failed: dict[str, str] = {}
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[str | _Open | None] = queue.SimpleQueue()
        """For the loader thread: a model to load, an evicted engine to close, or None to stop."""
        self._loader: threading.Thread | None = None
        self._closing = threading.Event()

    # --- life ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Build or find every engine, check the budget, open what stays loaded (see the module)."""
        for config in self.pipelines:
            spec = self.prepare(config)
            self._specs.setdefault(spec.key, spec)
        keep = list(self._specs)
        if self.budget is not None:
            names = {spec.name: key for key, spec in self._specs.items()}
            unknown = [pin for pin in self.budget.pinned if pin not in names and pin not in self._specs]
            if unknown:
                served = ", ".join(f"{name} ({key})" for name, key in names.items())
                raise ConfigError(f"pinned {', '.join(unknown)}: not a served pipeline's name or model key ({served})")
            pinned = tuple(names.get(pin, pin) for pin in self.budget.pinned)
            settings = self.budget.model_copy(update={"pinned": pinned})
            sizes = {key: spec.engine_bytes for key, spec in self._specs.items()}
            self.policy = ModelCache(settings, sizes)
            keep = self.policy.start_order(self._specs)
        for key, spec in self._specs.items():
            if key not in keep:
                with ExitStack() as stack:  # opened, timed and closed: loaded again when asked for
                    self._times[key] = open_model(spec, stack, self.threads, self.max_pixels).times()
                log.info("offload worker: model %s (%s, %.2f MB) checked, not kept loaded", key, spec.name, _mb(spec))
        for key in keep:
            if self.policy is not None:
                self.policy.admit(key)
            self._load(key, at_start=True)
        self._loader = threading.Thread(target=self._load_loop, name="offload-worker-loader", daemon=True)
        self._loader.start()

    def close(self) -> None:
        """Stop the loader (after the load under way) and close every engine."""
        self._closing.set()
        if self._loader is not None:
            self._jobs.put(None)
            self._loader.join()
            self._loader = None
        with self._lock:
            engines, self._open = list(self._open.values()), {}
        for engine in engines:
            engine.stack.close()

    # --- what it serves ----------------------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> dict[str, str]:
        """Pipeline name by model key."""
        return {key: spec.name for key, spec in self._specs.items()}

    def get(self, key: str) -> ServedModel | None:
        """The model if it is loaded (not counted as a request)."""
        with self._lock:
            engine = self._open.get(key)
        return engine.served if engine is not None else None

    def loaded(self) -> dict[str, ServedModel]:
        """The models loaded now, by key."""
        with self._lock:
            return {key: engine.served for key, engine in self._open.items()}

    def request(self, key: str) -> ServedModel | str:
        """A request for `key` (served here) arrived: the model if loaded, else why not (the answer),
        and its load queued when the policy admits it. Counted as a hit or a miss."""
        with self._lock:
            engine = self._open.get(key)
            if self.policy is None:
                return engine.served if engine is not None else f"unknown model {key}"
            if self.policy.lookup(key) and engine is not None:
                return engine.served
            if key in self._failed:
                return f"model cannot be loaded ({self._failed[key]})"
            if self.policy.holds(key):
                return LOADING
            decision = self.policy.admit(key)
            if isinstance(decision, Refusal):
                log.debug("offload worker: model %s not loaded: %s", key, decision.reason)
                return f"model not loaded ({decision.reason})"
            for victim in decision:
                self._retire(victim, key)
            self._jobs.put(key)
        return LOADING

    @contextmanager
    def use(self, key: str) -> Iterator[ServedModel | None]:
        """The loaded model, kept open until the block ends (an eviction meanwhile closes it after);
        None if it is not loaded (evicted while its requests waited)."""
        with self._lock:
            engine = self._open.get(key)
            if engine is not None:
                engine.users += 1
        try:
            yield engine.served if engine is not None else None
        finally:
            if engine is not None:
                with self._lock:
                    engine.users -= 1
                    close = engine.retired and engine.users == 0
                if close:
                    engine.stack.close()

    def add_tail(self, key: str, part: str, runner: TailRunner, warm_up: bool = True) -> None:
        """Serve `runner` as the tail `part` of `key`, now if the model is loaded and whenever it is
        loaded again (tails stay open while their model is not loaded, outside the budget)."""
        with self._lock:
            self._tails.setdefault(key, {})[part] = runner
            engine = self._open.get(key)
        if engine is not None:
            engine.served.add_tail(part, runner, warm_up)

    def times(self) -> dict[str, ModelTimes]:
        """Every served model's compute times: measured now when loaded, the last ones otherwise."""
        with self._lock:
            loaded = {key: engine.served for key, engine in self._open.items()}
        return {key: loaded[key].times() if key in loaded else self._times.get(key, ModelTimes()) for key in self}

    def stats(self) -> CacheStats | None:
        """The cache's counters and contents; None without a budget."""
        with self._lock:
            return self.policy.stats() if self.policy is not None else None

    # --- loading and evicting -----------------------------------------------------------------------------

    def _load_loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            if isinstance(job, _Open):
                job.stack.close()
            elif not self._closing.is_set():
                self._load(job)

    def _load(self, key: str, at_start: bool = False) -> None:
        spec = self._specs[key]
        began = time.perf_counter()
        stack = ExitStack()
        try:
            served = open_model(spec, stack, self.threads, self.max_pixels)
            with self._lock:
                tails = dict(self._tails.get(key, {}))
            for part, runner in tails.items():
                served.add_tail(part, runner)
        except Exception as exc:  # remembered: every later request for it is answered at once
            stack.close()
            if at_start:
                raise
            with self._lock:
                self._failed[key] = first_line(exc)
                if self.policy is not None:
                    self.policy.failed(key)
            log.warning("offload worker: model %s (%s) cannot be loaded: %s", key, spec.name, first_line(exc))
            return
        with self._lock:
            self._open[key] = _Open(served, stack)
            if self.policy is not None:
                self.policy.loaded(key)
            stats = self.policy.stats() if self.policy is not None else None
        seconds = time.perf_counter() - began
        where = f"; {len(stats.resident)} loaded, {stats.used_mb:.2f} of {stats.budget_mb:g} MB" if stats else ""
        log.info("offload worker: loaded model %s (%s, %.2f MB) in %.2f s%s", key, spec.name, _mb(spec), seconds, where)

    def _retire(self, key: str, newcomer: str) -> None:
        """Evicted by the policy (the lock is held): no new request gets it; closed now or after its batch."""
        engine = self._open.pop(key, None)
        if engine is None:
            return
        self._times[key] = engine.served.times()
        engine.retired = True
        log.info(
            "offload worker: evicted model %s (%s, %.2f MB) for %s",
            key,
            engine.served.name,
            _mb(self._specs[key]),
            self._specs[newcomer].name,
        )
        if engine.users == 0:  # closed by the loader (the batch using it closes it otherwise)
            self._jobs.put(engine)


def _mb(spec: ModelSpec) -> float:
    return spec.engine_bytes / MB
