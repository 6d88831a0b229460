"""The cloud worker (`edge-sdk offload worker`): serves whole models and tails to edge devices over
MQTT v5 request/response, through the shared subscription of its group, so workers can be added and
stopped at any time and each request reaches one of them.

Its life: build and warm up every served model (readiness comes after the warm-up, so the first
request never pays for a session's first run), connect with a retained empty last will on its load
topic, subscribe, then report its load (retained, every second) until stopped. A clean stop
unsubscribes first, answers what is queued (or says it is stopping), clears the report and
disconnects; a dead worker's report is cleared by its will, so the edges stop counting on it.

Threads: paho's thread checks each request as it arrives (topic, response topic, correlation data,
payload, model, part, inputs) and answers what it can at once (errors, "worker overloaded"); one
compute thread runs the batches (one engine call at a time keeps an engine's threads to itself); a
third publishes the load. Nothing a client sends can stop any of them: every failure is an answer or
a counted drop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.core.errors import ConfigError, first_line
from edge_sdk.engines.cache import EngineCache
from edge_sdk.mqtt import MqttSettings
from edge_sdk.mqtt.errors import MqttError
from edge_sdk.mqtt.messages import Message
from edge_sdk.mqtt.topics import check_identity
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.profiles import DeviceProfile
from edge_sdk.serving.model_cache import ModelCacheSettings

from . import tensor_codec
from .frame_codec import MAX_PIXELS
from .protocol import DEFAULT_GROUP, RESERVED_PREFIX, WHOLE, WorkerLoad, load_topic, worker_subscription
from .tensor_codec import PayloadError, TensorPayload
from .worker_batches import Counters, LoadMeter, RateLimitedLog, Request, RequestQueue, WorkerStats
from .worker_models import ModelPreparer, Outcome, TailRunner
from .worker_residency import WorkerModels
from .worker_slo import WorkerSlo
from .worker_tail_builds import TailBuilder, TailBuilds
from .worker_wire import Refused, SharedSubscriber, check_request, error_answer, output_answer, worker_mqtt_settings

log = logging.getLogger("cloud_offload.worker")


class WorkerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    worker_id: str = Field(min_length=1, description="The worker's name: its load topic and MQTT client id.")
    group: str = Field(DEFAULT_GROUP, description="The shared-subscription group it serves requests of.")
    batch_size: int = Field(8, ge=1, le=256, description="Most requests of one model, part and shape per call.")
    batch_delay_ms: float = Field(2.0, ge=0, le=1000, description="Longest wait for a batch to fill.")
    latency_slo_ms: float | None = Field(
        None,
        gt=0,
        le=60_000,
        description="p99 target from a request's arrival to its answer. Set, batch size (up to batch_size) and "
        "delay follow measured batch latency and arrival rate instead of batch_delay_ms, and a request that "
        "cannot meet it is answered 'shed' (the edge computes it). A target the warm-up shows no batch can meet "
        "is refused at start.",
    )
    queue_size: int = Field(64, ge=1, description="Requests waiting at most; beyond, 'worker overloaded' at once.")
    threads: int | None = Field(None, ge=1, description="Engine threads (default: the profile's).")
    answer_precision: Literal["fp32", "fp16"] = Field("fp16", description="Float outputs are answered as this.")
    report_interval_s: float = Field(1.0, gt=0, description="Seconds between load reports.")
    drain_timeout_s: float = Field(5.0, ge=0, description="On stop, how long queued requests may still run.")
    max_pixels: int = Field(MAX_PIXELS, ge=1, description="Largest frame a request may hold.")
    model_cache: ModelCacheSettings | None = Field(
        None, description="Keep only the models this budget holds loaded (worker_residency.py); None: all."
    )


class OffloadWorker:
    """Serves the whole models of `pipelines` (and tails added with `add_tail` or made by
    `tail_builder`) for `profile`; `start()` ... `stop()`, or `run(stop_event)`, or a context manager."""

    def __init__(
        self,
        pipelines: Sequence[PipelineConfig],
        profile: DeviceProfile,
        broker: MqttSettings,
        settings: WorkerSettings,
        cache: EngineCache | None = None,
        tail_builder: TailBuilder | None = None,
        prepare_model: ModelPreparer | None = None,
    ):
        """`prepare_model`: how a pipeline's whole model is had (default: a local engine through `cache`;
        `triton_runner.triton_preparer`: a Triton server's)."""
        check_identity(settings.worker_id)
        check_identity(settings.group)
        self.pipelines, self.profile, self.settings = list(pipelines), profile, settings
        self.cache = cache or EngineCache()
        self.load_topic = load_topic(settings.worker_id)
        self.subscription = worker_subscription(settings.group)
        self.broker = worker_mqtt_settings(broker, settings.worker_id, self.load_topic)
        self.models = WorkerModels(
            self.pipelines,
            profile,
            self.cache,
            settings.threads,
            settings.max_pixels,
            settings.model_cache,
            prepare_model,
        )
        self.ready = threading.Event()
        self._counters = Counters()
        slo = settings.latency_slo_ms
        self._slo = WorkerSlo(slo, settings.batch_size) if slo is not None else None
        self._queue = RequestQueue(settings.queue_size, self._slo.batchers if self._slo else None)
        self._stack = ExitStack()
        self._client: SharedSubscriber | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._stopped = False
        self._tail_builds = TailBuilds(tail_builder, self.add_tail) if tail_builder is not None else None
        self._meter = LoadMeter()
        self._refusals = RateLimitedLog(log)

    # --- life ------------------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._stack.callback(self.models.close)
            self.models.start()
            if self._slo is not None:
                self._slo.prepare(self.models.loaded(), self.models.times())
            for key, name in self.models.names().items():
                log.info("offload worker: serving %s as model %s", name, key)
            self._client = SharedSubscriber(self.broker, self.subscription, self._on_request)
            self._client.connect()
            self._client.subscribe_shared(qos=1)
        except BaseException:
            self._close()
            raise
        self._threads = [
            threading.Thread(target=self._compute_loop, name="offload-worker-compute", daemon=True),
            threading.Thread(target=self._report_loop, name="offload-worker-load", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._publish_load()
        self.ready.set()

    def stop(self) -> WorkerStats:
        """Unsubscribe, answer what is queued, clear the load report, disconnect; idempotent."""
        if self._stopped:
            return self.stats
        self._stopped = True
        client = self._client
        if client is not None and client.is_connected:
            client.unsubscribe(self.subscription)
        self._queue.close()
        compute = self._threads[0] if self._threads else None
        if compute is not None:
            compute.join(self.settings.drain_timeout_s)
        self._stopping.set()
        for request in self._queue.drain():  # what the drain timeout left: the edge need not wait for it
            self._answer_error(request, "worker stopping", counter="overloaded")
        for thread in self._threads:
            thread.join(self.settings.drain_timeout_s + 1.0)
        if self._tail_builds is not None:
            self._tail_builds.join(self.settings.drain_timeout_s + 1.0)
        if client is not None:
            try:
                client.publish(self.load_topic, b"", qos=1, retain=True, wait=True)
            except MqttError as exc:
                log.warning("offload worker %s: could not clear its load report: %s", self.settings.worker_id, exc)
        self._close()
        stats = self.stats
        log.info("offload worker %s stopped: %s", self.settings.worker_id, stats.line())
        return stats

    def run(self, stop: threading.Event) -> WorkerStats:
        """Start, serve until `stop` is set, stop."""
        self.start()
        try:
            stop.wait()
        finally:
            stats = self.stop()
        return stats

    def __enter__(self) -> OffloadWorker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _close(self) -> None:
        if self._client is not None:
            self._client.disconnect(flush_timeout=self.settings.drain_timeout_s)
        self._stack.close()

    # --- what it serves ----------------------------------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        return self._counters.snapshot()

    def add_tail(self, key: str, part: str, runner: TailRunner, warm_up: bool = True) -> None:
        """Serve `runner` as the tail `part` of model `key` (one of the served pipelines' models)."""
        if key not in self.models:
            raise ConfigError(f"model {key} is not served here (served: {', '.join(sorted(self.models)) or 'none'})")
        self.models.add_tail(key, part, runner, warm_up)

    def tail_for(self, key: str, part: str, tensors: Sequence[str] = ()) -> TailRunner | None:
        """The tail's runner when it is ready; else None, and its build started once if a builder is set
        (`tensors`: the cut's tensors, as a request for the tail names them)."""
        served = self.models.get(key)
        runner = served.tail(part) if served is not None else None
        if runner is None and served is not None and self._tail_builds is not None:
            self._tail_builds.start(key, part, tensors)
        return runner

    def load(self) -> WorkerLoad:
        """The report published on the load topic."""
        queue_ms, busy = self._meter.read()
        return WorkerLoad(
            worker=self.settings.worker_id,
            profile=self.profile.name,
            group=self.settings.group,
            queue=len(self._queue),
            queue_ms=queue_ms,
            busy=busy,
            served=self.stats.served,
            models=self.models.times(),
            cache=self.models.stats(),
            at=time.time(),
        )

    # --- paho's thread: each request as it arrives -----------------------------------------------------

    def _on_request(self, message: Message) -> None:
        try:
            address, expected, correlation = check_request(message)
        except Refused as refused:
            self._counters.add("refused")
            self._refusals.warning(f"offload worker refused a request ({refused.reason})", str(refused))
            return
        try:
            payload = tensor_codec.decode(message.payload)
        except PayloadError as exc:
            self._publish_error(expected, correlation, None, f"bad payload: {exc}")
            return
        request = Request(address.device, address.model_key, address.part, None, expected, correlation, payload)
        if payload.deadline <= time.time():  # the edge has computed it already
            self._counters.add("expired")
            return
        if address.model_key not in self.models:
            self._answer_error(request, f"unknown model {address.model_key}")
            return
        served = self.models.request(address.model_key)
        if isinstance(served, str):  # not loaded: answered at once, so the edge computes it itself
            self._answer_error(request, served, counter="cold")
            return
        cut = [name for name in payload.tensors if not name.startswith(RESERVED_PREFIX)]
        if address.part != WHOLE and self.tail_for(address.model_key, address.part, cut) is None:
            failed = self._tail_builds.failure(address.model_key, address.part) if self._tail_builds else None
            self._answer_error(request, "tail not ready" + (f" ({failed})" if failed else ""))
            return
        try:
            shape = served.admit(address.part, payload.tensors)
        except (PayloadError, LookupError) as exc:
            self._answer_error(request, f"bad request: {exc}" if isinstance(exc, PayloadError) else "tail not ready")
            return
        request = Request(address.device, address.model_key, address.part, shape, expected, correlation, payload)
        if not self._queue.put(request):  # full, or closed by stop()
            self._answer_error(request, "worker stopping" if self._stopped else "worker overloaded", "overloaded")

    # --- the compute thread --------------------------------------------------------------------------

    def _compute_loop(self) -> None:
        delay_s = self.settings.batch_delay_ms / 1000
        while True:
            if self._queue.slo is None:
                batch = self._queue.take_batch(self.settings.batch_size, delay_s, timeout=0.5)
            else:
                batch, shed = self._queue.take_slo_batch(timeout=0.5)
                for request in shed:
                    self._answer_error(request, "shed: cannot meet the worker's latency SLO", counter="shed")
                if shed and not batch:
                    continue
            if not batch:
                if self._stopped and not len(self._queue):
                    return
                continue
            try:
                self._run_batch(batch)
            except Exception as exc:  # a bug here must not end the worker: answer the batch and go on
                log.exception("offload worker: a batch of %d failed", len(batch))
                for request in batch:
                    self._answer_error(request, f"worker error: {first_line(exc)}")

    def _run_batch(self, batch: list[Request]) -> None:
        now = time.time()
        live = [request for request in batch if request.payload.deadline > now]
        if len(live) < len(batch):
            self._counters.add("expired", len(batch) - len(live))
        if not live:
            return
        started = time.monotonic()
        with self.models.use(live[0].model_key) as served:
            if served is None:  # evicted while these waited
                for request in live:
                    self._answer_error(request, "model loading", counter="cold")
                return
            result = served.run(live, started)
        self._meter.batch_ran(started, time.monotonic(), [outcome.queued_ms for outcome in result.outcomes])
        self._counters.add("batches", len(result.calls))
        self._counters.add("batched", sum(result.calls))
        for outcome in result.outcomes:
            self._answer(outcome)

    def _answer(self, outcome: Outcome) -> None:
        request = outcome.request
        if outcome.outputs is None:
            self._answer_error(request, outcome.error or "no outputs")
            return
        try:
            data = output_answer(
                request.payload, outcome.outputs, outcome.queued_ms, outcome.compute_ms, self.settings.answer_precision
            )
        except PayloadError as exc:
            self._answer_error(request, f"outputs cannot be sent: {exc}")
            return
        if self._publish(request.response_topic, data, request.correlation):
            self._counters.add("served")

    # --- answers -------------------------------------------------------------------------------------------

    def _answer_error(self, request: Request, error: str, counter: str = "errors") -> None:
        self._publish_error(request.response_topic, request.correlation, request.payload, error, counter)

    def _publish_error(
        self,
        topic: str,
        correlation: bytes,
        payload: TensorPayload | None,
        error: str,
        counter: str = "errors",
    ) -> None:
        self._counters.add(counter)
        log.debug("offload worker: answering an error on %s: %s", topic, error)
        self._publish(topic, error_answer(payload, error), correlation)

    def _publish(self, topic: str, data: bytes, correlation: bytes) -> bool:
        client = self._client
        if client is None:
            return False
        try:  # never wait here: paho's thread calls this too, and the PUBACK comes on that thread
            client.publish(topic, data, qos=1, wait=False, correlation_data=correlation)
        except MqttError as exc:
            log.warning("offload worker: an answer on %s was not sent: %s", topic, exc)
            return False
        return True

    # --- the load thread ---------------------------------------------------------------------------------

    def _report_loop(self) -> None:
        while not self._stopping.wait(self.settings.report_interval_s):
            self._publish_load()

    def _publish_load(self) -> None:
        client = self._client
        if client is None or self._stopping.is_set():
            return
        try:
            client.publish(self.load_topic, self.load().model_dump_json(), qos=1, retain=True, wait=False)
        except MqttError as exc:
            log.debug("offload worker: load report not sent: %s", exc)
