"""The edge agent: the pipeline's `FrameDispatch` when its file has an `offload:` section.

For each frame it asks the decision (decision.py) which mode is expected fastest now, from each
mode's live costs (modes.py), the link estimate (remote_link.py), the workers' reported queue and
the frames already away, and runs it:
- edge: the pipeline's own engine, at once;
- cloud / split@...: a request to the workers; the frame stays in hand until the answer, which
  holds the model's raw outputs, is post-processed here, as the edge would have;
- escalate (beside the others): an edge result whose detections are unsure also goes to the bigger
  cloud model, and its result follows as an update of the same frame.

Every frame gets exactly one final result, saying where it was computed (`Result.computed_at`).
A frame whose answer does not come by its deadline, whose request could not be sent, whose answer
is malformed (not the model's outputs: names, dtypes, shapes) or whose link is lost is computed
here, with the reason counted. An answer that comes after that is dropped and counted as late; one
for no frame this agent sent (a forged or replayed correlation) is dropped and counted. Deadlines
missed in a row rest the remote modes for a while (`misses_to_back_off`, `back_off_s`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_sdk.core.errors import ConfigError, EdgeSDKError
from edge_sdk.core.preprocess import Preprocessor
from edge_sdk.core.results import Frame, FrameMeta, Result
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import scene_frames
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.extensions import DispatchContext
from edge_sdk.postprocess import Postprocessor, build_postprocessor

from . import tensor_codec
from .config import OffloadSettings
from .cost_model import EDGE, MAX_UTILISATION, expected_ms, uplink_capacity_fps
from .decision import Decision
from .modes import CloudMode, LiveCost, Request, RunningMean, SplitMode, edge_cost
from .protocol import (
    ERROR_TENSOR,
    RESERVED_PREFIX,
    WHOLE,
    WORKER_MS_TENSOR,
    ModelTimes,
    model_key,
    new_correlation,
    request_topic,
)
from .remote_link import Answer, RemoteLink
from .throughput import ThroughputMode

log = logging.getLogger(__name__)

FRAME_INTERVAL_WEIGHT = 0.1
THROUGHPUT_UTILISATION = 0.7
"""The most of the uplink throughput mode keeps busy: its frames wait behind each other 1.2 transfers
on average there (cost_model's M/D/1 queue), and the link's own traffic has room."""
SETTLED_REMEMBERED = 1024


@dataclass
class _Away:
    """A frame sent away: its final result (or, escalated, its update) is owed."""

    frame: Frame
    queued_ms: float
    mode: LiveCost | None
    """None for an escalation (its answer is an update, decoded by the escalation model's post-processor)."""
    submitted_at: float
    deadline: float
    """time.monotonic() after which the frame is computed here (an escalation is given up)."""
    expected_ms: float
    request: Request
    correction: float = 1.0
    """The mode's correction that `expected_ms` holds."""
    failed: str | None = None
    """Why the request never reached the broker (set by the sender thread; settled by the caller's)."""


@dataclass(frozen=True)
class _Escalation:
    key: str
    mode: CloudMode
    postprocess: Postprocessor
    preprocess: Preprocessor


class OffloadDispatch:
    def __init__(self, context: DispatchContext):
        settings: OffloadSettings = context.options
        self.settings, self.config, self.local = settings, context.config, context.local
        self.on_status, self.subject = context.on_status, f"{context.config.name}:{context.worker}"
        broker = load_broker_file(settings.broker)
        device = settings.device or broker.username or broker.client_id
        if not device:
            raise ConfigError("offload: name this device (offload.device), or give the broker file a username")
        self.device = device
        broker = broker.model_copy(
            update={"client_id": f"{device}-offload-{context.worker}-{os.getpid()}", "will": None}
        )
        cache = EngineCache(context.cache_dir) if context.cache_dir else EngineCache()
        model = cache.models.load(context.config.model.path)
        self.key = model_key(model.sha256, context.config.preprocess)
        self.outputs = {meta.name: meta for meta in self.local.runner.outputs}
        sample = scene_frames(1)[0]
        self.edge = edge_cost(self._time_local(sample))
        self.modes: dict[str, LiveCost] = {EDGE: self.edge}
        self._cloud: CloudMode | None = None
        self._splits: dict[str, SplitMode] = {}
        self._runners: list[Any] = []
        down_bytes = float(self._answer_bytes(sample))
        if "cloud" in settings.modes:
            self._cloud = self._cloud_mode(context.config, sample, down_bytes)
            self.modes[self._cloud.cost.name] = self._cloud.cost
        if "split" in settings.modes:
            self._add_splits(context, cache, sample, down_bytes)
        self._escalation = self._escalation_of(settings, cache) if "escalate" in settings.modes else None
        if settings.fixed is not None and settings.fixed not in self.modes:
            raise ConfigError(f"offload.fixed: expected one of {', '.join(self.modes)}, got {settings.fixed!r}")
        self.decision = Decision(settings.hysteresis, time.monotonic())
        self._lock = threading.Condition()
        self._away: dict[bytes, _Away] = {}
        self._answers: list[Answer] = []
        self._ready: list[tuple[FrameMeta, Result]] = []
        self._next_frame_id = 1
        self._settled: OrderedDict[bytes, None] = OrderedDict()
        """Correlations of frames computed here after all, so a late answer is told from a forged one."""
        self._misses = 0
        self._rest_until = 0.0
        self._last_submit: float | None = None
        self._frame_interval_s = 0.0
        self.throughput = ThroughputMode(context.workers, context.live_sources)
        self._answer_ms = RunningMean(0.0)
        """Edge time an answer costs (decoding, checking and post-processing it), a running mean."""
        self.counts: Counter[str] = Counter()
        self.link = RemoteLink(broker, device, self._on_answer, self.stats)
        self.link.start()

    # --- FrameDispatch ---------------------------------------------------------------------------

    def submit(self, frames: Sequence[Frame], queued_ms: Sequence[float]) -> None:
        for frame, queued in zip(frames, queued_ms, strict=True):
            now = time.monotonic()
            if self._last_submit is not None:
                interval = now - self._last_submit
                self._frame_interval_s += FRAME_INTERVAL_WEIGHT * (interval - self._frame_interval_s)
            self._last_submit = now
            self.throughput.add(frame.meta)
            mode, expected = self._choose(now)
            if mode is not self.edge and self._send(frame, queued, mode, now, expected):
                continue
            self._compute_here(frame, queued, "edge")

    def collect(self, wait_s: float = 0.0) -> list[tuple[FrameMeta, Result]]:
        deadline = time.monotonic() + wait_s
        while True:
            self._take_answers()
            self._settle_overdue()
            with self._lock:
                if self._ready or not self._away or time.monotonic() >= deadline:
                    ready, self._ready = self._ready, []
                    return ready
                soonest = min(0.0 if away.failed else away.deadline for away in self._away.values())
                self._lock.wait(max(0.0, min(deadline, soonest) - time.monotonic()))

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._ready) + len(self._away)  # escalations owe their update until it comes or expires

    def stats(self) -> dict[str, Any]:
        estimate = self.link.estimate()
        counts = Counter(dict(self.counts))  # one C-level copy: the sender thread reads it for its probe
        with self._lock:
            away = len(self._away)
        return {
            "mode": self.settings.fixed or self.decision.mode,
            "computed": {k.removeprefix("at:"): v for k, v in counts.items() if k.startswith("at:")},
            "fallbacks": {k.removeprefix("fallback:"): v for k, v in counts.items() if k.startswith("fallback:")},
            "late_answers": counts["late"],
            "unknown_answers": counts["unknown"],
            "escalated": counts["escalated"],
            "updates": counts["updates"],
            "refused": {k.removeprefix("refused:"): v for k, v in counts.items() if k.startswith("refused:")},
            "bad_answers": counts["bad_answers"],
            "worker_errors": counts["worker_errors"],
            "away": away,
            "throughput_share": round(self.throughput.share, 3),
            "bandwidth_mbps": round(estimate.bandwidth_bps / 1e6, 3) if estimate.bandwidth_bps else None,
            "rtt_ms": round(estimate.rtt_s * 1000, 2) if estimate.rtt_s else None,
            "cloud_ms": {
                name: round(cost.cloud_ms.value, 2) for name, cost in self.modes.items() if cost.cloud_ms is not None
            },
            "connected": self.link.connected,
        }

    def close(self) -> None:
        self.link.close()
        for runner in self._runners:
            runner.deactivate()

    # --- the decision ------------------------------------------------------------------------------

    def _choose(self, now: float) -> tuple[LiveCost, float]:
        """The mode of the next frame, and its expected latency (ms)."""
        if self.settings.fixed is not None:  # each frame as it comes, however many the link carries
            alone = self._expected(now, 0.0)
            fixed = self.settings.fixed if self.settings.fixed in alone else EDGE
            return self.modes[fixed], alone[fixed]
        expected = self._expected(now, self._frames_per_s())
        switch = self.decision.choose(expected, now)
        if switch is not None:
            log.info("offload %s: %s -> %s: %s", self.subject, switch.previous, switch.mode, switch.reason)
            self.on_status(
                StatusEvent(
                    StatusKind.OFFLOAD_MODE,
                    self.subject,
                    f"switched to {switch.mode}: {switch.reason}",
                    data={"mode": switch.mode, "previous": switch.previous},
                )
            )
        if self.decision.mode == EDGE and self.settings.throughput:
            return self._throughput_mode(now)
        return self.modes[self.decision.mode], expected[self.decision.mode]

    def _throughput_mode(self, now: float) -> tuple[LiveCost, float]:
        """The edge, or for the share of frames the edge cannot keep pace with, a remote mode: at most the
        share of the frames its uplink and its workers carry (remote modes' latencies for that share)."""
        rate = self._frames_per_s()
        alone = self._expected(now, 0.0)
        carried = {name: self._carried_share(self.modes[name], rate) for name in alone if name != EDGE and rate > 0}
        remote = {
            name: value
            for name, value in self._expected(now, rate * max(carried.values(), default=0.0)).items()
            if name in carried
        }
        own_work = {name: self.modes[name].edge_ms.value + self._answer_ms.value for name in remote}
        picked = self.throughput.pick(self.edge.edge_ms.value, own_work, remote, carried)
        if self.throughput.news is not None:
            log.info("offload %s: %s", self.subject, self.throughput.news)
            data = {"share": round(self.throughput.share, 3), "mode": self.throughput.mode}
            self.on_status(StatusEvent(StatusKind.OFFLOAD_THROUGHPUT, self.subject, self.throughput.news, data=data))
        if picked is None:
            return self.edge, alone[EDGE]
        return self.modes[picked], remote[picked]

    def _carried_share(self, mode: LiveCost, rate: float) -> float:
        """The share of frames arriving at `rate` that `mode` can take: its uplink at THROUGHPUT_UTILISATION,
        and its workers at THROUGHPUT_UTILISATION of their compute (they serve other edges too)."""
        bandwidth = self.link.estimate().bandwidth_bps
        cost = mode.cost()
        uplink = THROUGHPUT_UTILISATION / MAX_UTILISATION * uplink_capacity_fps(cost, bandwidth) if bandwidth else 0.0
        workers = len(self.link.workers(self.key))
        compute = THROUGHPUT_UTILISATION * workers * 1000.0 / cost.cloud_ms if cost.cloud_ms > 0 else uplink
        return min(1.0, uplink / rate, compute / rate)

    def _frames_per_s(self) -> float:
        """Frames reaching this inference worker a second: the live sources' pace, else the submissions'."""
        interval_ms = self.throughput.pace.interval_ms(self.throughput.workers)
        if interval_ms is not None:
            return 1000.0 / interval_ms
        return 1.0 / self._frame_interval_s if self._frame_interval_s > 0 else 0.0

    def _expected(self, now: float, frames_per_s: float) -> dict[str, float]:
        """Expected latency (ms) of each mode available now, with frames sent away at `frames_per_s`;
        the edge is always available."""
        expected = {EDGE: expected_ms(self.edge.cost(), 1.0, 0.0)}
        estimate = self.link.estimate()
        if (
            len(self.modes) == 1
            or not self.link.connected
            or now < self._rest_until
            or estimate.bandwidth_bps is None
            or estimate.rtt_s is None
            or self.in_flight >= self.settings.max_in_flight
        ):
            return expected
        workers = self.link.workers(self.key)
        if not workers:
            return expected
        if self._cloud is not None:
            self._cloud.adapt_quality(estimate.bandwidth_bps, 1.0 / frames_per_s if frames_per_s > 0 else 0.0)
        queue_ms = sum(load.queue_ms for load in workers) / len(workers)
        backlog_ms = self.link.backlog_bytes * 8000 / estimate.bandwidth_bps
        for name, mode in self.modes.items():
            if mode is self.edge:
                continue
            reported = [_reported_ms(load.models[self.key], mode.part) for load in workers]
            if mode.cloud_ms is None:
                known = [ms for ms in reported if ms is not None]
                if not known:
                    continue  # no worker has this part ready yet
                mode.observe_cloud(sum(known) / len(known))
            cost = mode.cost()
            if self.link.max_packet_size is not None and cost.up_bytes + 512 > self.link.max_packet_size:
                self.counts["refused:packet_size"] += 1
                continue
            value = expected_ms(cost, estimate.bandwidth_bps, estimate.rtt_s * 1000, queue_ms, 0.0, frames_per_s)
            value = (value + backlog_ms) * mode.correction_now(now)
            if value < self.settings.deadline_ms:
                expected[name] = value
            else:
                self.counts["refused:uplink" if value == math.inf else "refused:deadline"] += 1
        return expected

    # --- sending and answers -----------------------------------------------------------------------

    def _send(self, frame: Frame, queued_ms: float, mode: LiveCost, now: float, expected: float) -> bool:
        if mode.part == WHOLE:
            assert self._cloud is not None
            request = self._cloud.request(frame.image)
        else:
            request = self._splits[mode.name].request(frame.image)
        return self._dispatch(frame, queued_ms, mode, request, self.key, now, expected)

    def _dispatch(
        self, frame: Frame, queued_ms: float, mode: LiveCost | None, request: Request, key: str, now: float,
        expected: float,
    ) -> bool:  # fmt: skip
        frame_id = self._next_frame_id
        self._next_frame_id += 1
        deadline_unix = time.time() + self.settings.deadline_ms / 1000
        payload = tensor_codec.encode(
            tensor_codec.TensorPayload(frame_id, deadline_unix, request.tensors), request.precision, request.compression
        )
        correlation = new_correlation()
        correction = mode.correction_now(now) if mode is not None else 1.0
        away = _Away(frame, queued_ms, mode, now, now + self.settings.deadline_ms / 1000, expected, request, correction)
        with self._lock:
            self._away[correlation] = away
        topic = request_topic(self.device, key, request.part)
        if not self.link.send(topic, payload, correlation, lambda why: self._failed(correlation, why), away.deadline):
            with self._lock:
                self._away.pop(correlation, None)
            self.counts["fallback:not_sent"] += 1
            return False
        if mode is not None:
            mode.up_bytes.add(len(payload))
        return True

    def _on_answer(self, answer: Answer) -> None:
        with self._lock:
            self._answers.append(answer)
            self._lock.notify_all()

    def _failed(self, correlation: bytes, why: str) -> None:
        """The request never reached the broker (refused, not acknowledged): the frame is computed
        here by the next collect, on the caller's thread (the engine is not shared across threads)."""
        log.debug("offload %s: %s", self.subject, why)
        with self._lock:
            away = self._away.get(correlation)
            if away is not None:
                away.failed = "not_sent"
            self._lock.notify_all()

    def _take_answers(self) -> None:
        with self._lock:
            answers, self._answers = self._answers, []
        for answer in answers:
            with self._lock:
                away = self._away.pop(answer.correlation, None)
            if away is None:
                # late: for a frame already computed here; unknown: for no frame this agent sent
                self.counts["late" if answer.correlation in self._settled else "unknown"] += 1
                continue
            self._settle_answer(away, answer)

    def _settle_answer(self, away: _Away, answer: Answer) -> None:
        started = time.perf_counter()
        try:
            payload = tensor_codec.decode(answer.payload)
            if ERROR_TENSOR in payload.tensors:
                raise _WorkerError(bytes(payload.tensors[ERROR_TENSOR]).decode("utf-8", "replace"))
            timing = payload.tensors.get(WORKER_MS_TENSOR)
            outputs = {name: value for name, value in payload.tensors.items() if not name.startswith(RESERVED_PREFIX)}
            if away.mode is None:
                self._settle_escalation(away, outputs)
                return
            self._check_outputs(outputs)
        except _WorkerError as error:
            log.debug("offload %s: the worker could not compute a frame: %s", self.subject, error)
            self.counts["worker_errors"] += 1
            if away.mode is not None:
                self._settle_here(away, "worker_error")
            return
        except (tensor_codec.PayloadError, _BadAnswer) as error:
            log.warning("offload %s: a malformed answer, computing the frame here: %s", self.subject, error)
            self.counts["bad_answers"] += 1
            if away.mode is not None:
                self._settle_here(away, "bad_answer")
            return
        mode = away.mode
        waited_ms = (answer.arrived_at - away.submitted_at) * 1000 - away.request.edge_ms  # after the edge work
        if timing is not None and timing.size == 2:
            mode.observe_cloud(float(timing[1]))
        mode.down_bytes.add(len(answer.payload))
        observed_ms = (answer.arrived_at - away.submitted_at) * 1000
        log.debug(
            "offload %s: %s answered in %.1f ms, expected %.1f", self.subject, mode.name, observed_ms, away.expected_ms
        )
        mode.observe_latency(observed_ms, away.expected_ms / away.correction, answer.arrived_at)
        self._misses = 0
        result = self._postprocessed(away, outputs, mode.name, waited_ms)
        self._deliver(away.frame.meta, result, mode.name)
        self._answer_ms.add((time.perf_counter() - started) * 1000)

    def _check_outputs(self, outputs: dict[str, np.ndarray]) -> None:
        if set(outputs) != set(self.outputs):
            raise _BadAnswer(f"expected outputs {sorted(self.outputs)}, got {sorted(outputs)}")
        for name, value in outputs.items():
            meta = self.outputs[name]
            if value.ndim != len(meta.shape) or (value.ndim and value.shape[0] != 1):
                raise _BadAnswer(f"{name}: expected rank {len(meta.shape)} with a batch of 1, got shape {value.shape}")
            for want, got in zip(meta.shape, value.shape, strict=True):
                if isinstance(want, int) and want > 0 and want != got:
                    raise _BadAnswer(f"{name}: expected shape {meta.shape}, got {value.shape}")
            if (meta.dtype.kind == "f") != (value.dtype.kind == "f"):
                raise _BadAnswer(f"{name}: expected {meta.dtype}, got {value.dtype}")

    def _postprocessed(self, away: _Away, outputs: dict[str, np.ndarray], where: str, waited_ms: float) -> Result:
        meta = away.frame.meta
        started = time.perf_counter()
        # an fp16 answer is widened back to the model's own dtype for the post-processor
        rows = {name: np.asarray(value[0], dtype=self.outputs[name].dtype) for name, value in outputs.items()}
        result = self.local.postprocess(rows, meta, self.local.feed.geometry(meta.width, meta.height))
        timings = {
            "preprocess": away.request.edge_ms,
            "infer": waited_ms,
            "batch": 1.0,
            "postprocess": (time.perf_counter() - started) * 1000,
            "queued": away.queued_ms,
        }
        return dataclasses.replace(result, timings_ms=timings, computed_at=where)

    def _settle_overdue(self) -> None:
        now = time.monotonic()
        connected = self.link.connected
        with self._lock:
            overdue = [
                c
                for c, away in self._away.items()
                if away.deadline <= now or away.failed or (not connected and away.mode)
            ]
            settled = [(c, self._away.pop(c)) for c in overdue]
        for correlation, away in settled:
            if away.mode is None:
                self.counts["escalations_expired"] += 1
                continue
            reason = away.failed or ("deadline" if connected else "link_lost")
            self._settle_here(away, reason, correlation)
            if reason == "deadline":
                self._misses += 1
                if self._misses >= self.settings.misses_to_back_off:
                    self._rest_until = now + self.settings.back_off_s
                    self._misses = 0
                    self.counts["back_offs"] += 1

    def _settle_here(self, away: _Away, reason: str, correlation: bytes | None = None) -> None:
        if correlation is not None:
            self._settled[correlation] = None
            while len(self._settled) > SETTLED_REMEMBERED:
                self._settled.popitem(last=False)
        self.counts[f"fallback:{reason}"] += 1
        self._compute_here(away.frame, away.queued_ms, "edge")

    # --- here --------------------------------------------------------------------------------------

    def _compute_here(self, frame: Frame, queued_ms: float, where: str) -> None:
        started = time.perf_counter()
        [result] = self.local([frame], [queued_ms])
        self.edge.edge_ms.add((time.perf_counter() - started) * 1000)
        result = dataclasses.replace(result, computed_at=where)
        self._deliver(frame.meta, result, where)
        if self._escalation is not None and self._unsure(result):
            self._escalate(frame, queued_ms)

    def _deliver(self, meta: FrameMeta, result: Result, where: str) -> None:
        self.counts[f"at:{where}"] += 1
        with self._lock:
            self._ready.append((meta, result))
            self._lock.notify_all()

    def _time_local(self, image: np.ndarray) -> float:
        frame = Frame(FrameMeta("offload-warm-up", 0, 0.0, image.shape[1], image.shape[0]), image)
        self.local([frame])
        started = time.perf_counter()
        self.local([frame])
        return (time.perf_counter() - started) * 1000

    def _answer_bytes(self, image: np.ndarray) -> int:
        """What an answer for this model weighs (its raw outputs at fp16 + zstd, as workers answer)."""
        feed = self.local.feed(image)
        outputs = self.local.runner.infer({self.local.input_name: feed})
        return len(tensor_codec.encode(tensor_codec.TensorPayload(0, 0.0, outputs), "fp16", "zstd"))

    def _cloud_mode(self, config: PipelineConfig, sample: np.ndarray, down_bytes: float) -> CloudMode:
        return CloudMode(self.settings.image, _max_side(self.settings.image.max_side, config), sample, down_bytes)

    def _add_splits(self, context: DispatchContext, cache: EngineCache, sample: np.ndarray, down_bytes: float) -> None:
        from .split_engines import prepare_split, split_candidates, split_model_of  # onnx: only when splitting

        split = split_model_of(context.config, cache)
        wanted = None if self.settings.cuts == "auto" else self.settings.cuts
        for candidate in split_candidates(split, wanted):
            if wanted is None and candidate.trivial_tail:
                continue  # the cut after a detector's NMS: the edge has done the work, the link only adds
            engine = prepare_split(split, candidate, "head", context.profile, cache)
            runner = engine.open(threads=1, share_cpu=True)
            runner.activate()
            self._runners.append(runner)
            mode = SplitMode(split, candidate, runner, self.settings.tensors, sample, down_bytes)
            self._splits[mode.cost.name] = mode
            self.modes[mode.cost.name] = mode.cost

    # --- escalation --------------------------------------------------------------------------------

    def _escalation_of(self, settings: OffloadSettings, cache: EngineCache) -> _Escalation:
        assert settings.escalate is not None
        config = load_pipeline(settings.escalate.pipeline)
        model = cache.models.load(config.model.path)
        model_input = (
            model.inputs[0]
            if config.model.input is None
            else next(meta for meta in model.inputs if meta.name == config.model.input)
        )
        mode = CloudMode(settings.image, _max_side(settings.image.max_side, config), scene_frames(1)[0], 0.0)
        preprocess = Preprocessor(config.preprocess.model_copy(update={"fold": False}), model_input)
        return _Escalation(
            model_key(model.sha256, config.preprocess), mode, build_postprocessor(config.postprocess), preprocess
        )

    def _unsure(self, result: Result) -> bool:
        assert self.settings.escalate is not None
        threshold = self.settings.escalate.threshold
        scores = [d.score for d in result.detections] + [c.score for c in result.classifications[:1]]
        return any(score < threshold for score in scores) or (not scores and self.settings.escalate.empty)

    def _escalate(self, frame: Frame, queued_ms: float) -> None:
        escalation = self._escalation
        assert escalation is not None
        if not self.link.connected or not self.link.workers(escalation.key):
            self.counts["escalations_skipped"] += 1
            return
        # The frame's pixels are released with its final result: the request holds its own copy.
        request = escalation.mode.request(frame.image)
        copy = Frame(frame.meta, np.empty((0, 0, 3), np.uint8))
        now = time.monotonic()
        if self._dispatch(copy, queued_ms, None, request, escalation.key, now, 0.0):
            self.counts["escalated"] += 1

    def _settle_escalation(self, away: _Away, outputs: dict[str, np.ndarray]) -> None:
        escalation = self._escalation
        assert escalation is not None
        meta = away.frame.meta
        rows = {name: np.asarray(value[0]) for name, value in outputs.items()}
        try:
            result = escalation.postprocess(rows, meta, escalation.preprocess.geometry(meta.width, meta.height))
        except (EdgeSDKError, ValueError, KeyError, IndexError) as error:
            raise _BadAnswer(f"the escalation model's answer could not be post-processed: {error}") from None
        waited_ms = (time.monotonic() - away.submitted_at) * 1000
        result = dataclasses.replace(result, computed_at="cloud", update=True, timings_ms={"infer": waited_ms})
        self.counts["updates"] += 1
        with self._lock:
            self._ready.append((meta, result))
            self._lock.notify_all()


class _BadAnswer(Exception):
    pass


class _WorkerError(Exception):
    pass


def _max_side(setting: int | str, config: PipelineConfig) -> int | None:
    """The longer side a cloud request's frame is shrunk to; None sends it at the camera's size."""
    if isinstance(setting, int):
        return setting
    sides = [side for side in (config.preprocess.resize or ()) if isinstance(side, int)]
    return max(sides) if setting == "model" and sides else None


def _reported_ms(times: ModelTimes, part: str | None) -> float | None:
    if part == WHOLE:
        return times.whole_ms
    return times.tails_ms.get(part) if part is not None else None
