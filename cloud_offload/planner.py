"""Measure what every offload mode of a pipeline costs: `plan_offload` -> an `OffloadPlan`.

On the frames given, for the edge profile and the cloud profile:
- `edge`: the pipeline's own engine (prepare_models, as `run` builds it), its feed and inference;
- `cloud`, at each JPEG quality: the frame at the size the pipeline's `offload.image.max_side` says
  (default: the camera's), and also shrunk to the model input's longer side when that differs,
  encoded (edge; frame_codec.py), decoded and run through the whole engine of the cloud profile
  (worker);
- `split@<tensor>`, at each tensor precision, for every useful cut (split_engines.split_candidates):
  host preprocessing, the head on the edge profile and the tensors' encoding (edge), their decoding
  and the tail on the cloud profile (worker).

Times are medians over the frames (and `repeats` runs of each), after `warmup` runs; bytes are means.
The plan runs on one machine: the cloud profile's engines are built and timed here, so its times
are this machine's with that profile's settings, not a remote worker's (a worker reports its own
times on its load topic, protocol.ModelTimes).

Accuracy: each row's outputs against one reference, the pipeline's model after the graph passes run
by ONNX Runtime on the CPU in FP32 on the host-preprocessed frames (the equivalence gate's reference),
with the engines' metric (backends/int8/accuracy.compare_outputs: matched boxes for a detector, top-1
for a classifier, cosine otherwise) and judged by the equivalence gate's thresholds of the edge
profile. A row that fails them is refused, as is a cut whose tail computes almost nothing (the cut
after a detector's NMS: the edge has done all the work, and the link only adds; the rule the agent
follows too, split_engines.TRIVIAL_TAIL_SHARE).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from edge_sdk.backends.calibration.setup import task_spec
from edge_sdk.backends.int8.accuracy import AccuracyGate, compare_outputs
from edge_sdk.core.errors import ConfigError, EdgeSDKError, first_line
from edge_sdk.core.preprocess import frame_feed
from edge_sdk.core.progress import report
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import forgiving_one_box
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.profiles.equivalence_settings import EquivalenceSettings
from edge_sdk.profiles.model import DeviceProfile

from . import tensor_codec
from .config import ImageSettings
from .cost_model import CLOUD, EDGE, ModeCost
from .frame_codec import decode_frame, encode_frame
from .offload_plan import OffloadPlan, PlanRow
from .partition import cut_points
from .plan_measure import (
    Outputs,
    answered,
    cloud_sides,
    first_item,
    max_side,
    mean_bytes,
    ms_since,
    timed,
    with_time,
)
from .protocol import WHOLE
from .split_engines import SplitCandidate, SplitModel, prepare_split, sample_feed, split_candidates, split_model_of

QUALITIES = (50, 75, 90)
PRECISIONS: tuple[tensor_codec.Precision, ...] = ("fp16", "int8")
REFERENCE = "the model after the graph passes, ONNX Runtime CPU FP32, frames preprocessed on the host"
PROGRESS = "offload plan"
T = TypeVar("T")


@dataclass(frozen=True)
class _Context:
    split: SplitModel
    frames: Sequence[np.ndarray]
    reference: list[Outputs]
    judge: Callable[[list[Outputs], str], tuple[dict[str, object], list[str]]]
    threads: int | None
    warmup: int
    repeats: int

    def timed(self, once: Callable[[np.ndarray], tuple[T, float]]) -> tuple[list[T], list[float]]:
        """`once` on every frame (plan_measure.timed)."""
        return timed(self.frames, self.warmup, self.repeats, once)


def plan_offload(
    config: PipelineConfig,
    edge_profile: DeviceProfile,
    cloud_profile: DeviceProfile,
    cache: EngineCache,
    frames: Sequence[np.ndarray],
    *,
    threads: int | None = None,
    qualities: Sequence[int] = QUALITIES,
    precisions: Sequence[tensor_codec.Precision] = PRECISIONS,
    warmup: int = 2,
    repeats: int = 2,
) -> OffloadPlan:
    """Measure every mode of `config` on `frames` (BGR uint8, as a source gives them); `threads`:
    threads per inference for every engine (None: each profile's own)."""
    if not frames:
        raise ConfigError("offload plan: expected at least one frame to measure on, got none")
    if repeats < 1 or warmup < 0:
        raise ConfigError(f"offload plan: expected repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    split = split_model_of(config, cache)
    reference = _reference_outputs(split, frames)
    gate_settings = edge_profile.equivalence or EquivalenceSettings()
    gate = AccuracyGate(gate_settings.max_drop, gate_settings.min_cosine)
    task = task_spec(None, config.postprocess, outputs=split.model.outputs)

    def judge(outputs: list[Outputs], label: str) -> tuple[dict[str, object], list[str]]:
        shared = [name for name in reference[0] if name in outputs[0]]
        accuracy = compare_outputs(
            [{n: r[n] for n in shared} for r in reference], [{n: o[n] for n in shared} for o in outputs], task
        )
        failures = forgiving_one_box(gate, accuracy).failures(accuracy, names=("FP32 CPU", label))
        return accuracy.to_dict(), failures

    context = _Context(split, frames, reference, judge, threads, warmup, repeats)
    candidates = split_candidates(split)
    steps = 2 + len(candidates)
    report(PROGRESS, 0, steps, "edge")
    edge_row, edge_failures = _edge_row(context, config, edge_profile, cache)
    report(PROGRESS, 1, steps, "cloud")
    cloud_rows, whole_cloud_ms = _cloud_rows(context, config, cloud_profile, cache, qualities)
    rows = [edge_row, *cloud_rows]
    notes = []
    if edge_failures:
        notes.append(f"the edge's own engine differs from the FP32 model on these frames: {'; '.join(edge_failures)}")
    if not candidates:
        notes.append(_no_cut_reason(split))
    for index, candidate in enumerate(candidates):
        report(PROGRESS, 2 + index, steps, candidate.name)
        rows += _split_rows(context, candidate, edge_profile, cloud_profile, cache, precisions, whole_cloud_ms)
    report(PROGRESS, steps, steps, "done", finished=True)
    return OffloadPlan(
        model=str(split.model.path),
        model_key=split.key,
        edge_profile=edge_profile.name,
        cloud_profile=cloud_profile.name,
        frames=len(frames),
        threads=threads,
        reference=REFERENCE,
        rows=tuple(rows),
        notes=tuple(notes),
    )


def _reference_outputs(split: SplitModel, frames: Sequence[np.ndarray]) -> list[Outputs]:
    import onnxruntime

    session = onnxruntime.InferenceSession(split.graph.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return [
        first_item(dict(zip(names, session.run(names, sample_feed(split, frame)), strict=True))) for frame in frames
    ]


def _edge_row(
    context: _Context, config: PipelineConfig, profile: DeviceProfile, cache: EngineCache
) -> tuple[PlanRow, list[str]]:
    """The edge's row (never refused: it is the fallback of every mode), and how its own accuracy
    fails the gate on these frames, if it does."""
    models = prepare_models(config, profile, cache)
    feed = frame_feed(models.preprocess, models.engine_input)
    with models.primary.open(context.threads) as runner:

        def once(frame: np.ndarray) -> tuple[Outputs, float]:
            started = time.perf_counter()
            outputs = runner.infer({models.input_name: feed(frame)})
            return first_item(outputs), ms_since(started)

        outputs, times = context.timed(once)
    accuracy, failures = context.judge(outputs, "edge")
    return PlanRow(EDGE, "", ModeCost(EDGE, None, statistics.median(times)), accuracy), failures


def _cloud_rows(
    context: _Context, config: PipelineConfig, profile: DeviceProfile, cache: EngineCache, qualities: Sequence[int]
) -> tuple[list[PlanRow], float]:
    """A row per image size and quality, and the whole model's inference time on the cloud profile (ms)."""
    models = prepare_models(config, profile, cache)
    feed = frame_feed(models.preprocess, models.engine_input)
    image = getattr(config, "offload", None)
    settings: ImageSettings = image.image if image is not None else ImageSettings()
    rows = []
    with models.primary.open(context.threads) as runner:

        def infer(frame: np.ndarray) -> Outputs:
            return first_item(runner.infer({models.input_name: feed(frame)}))

        _outputs, whole = context.timed(lambda frame: with_time(infer, frame))
        for side in cloud_sides(settings.max_side, max_side(config.preprocess, context.split.input)):
            for quality in qualities:

                def once(
                    frame: np.ndarray, quality: int = quality, side: int | None = side
                ) -> tuple[tuple[Outputs, int, float], float]:
                    started = time.perf_counter()
                    data = encode_frame(frame, side, quality, settings.format)
                    encoded = time.perf_counter()
                    outputs = infer(decode_frame(data))
                    return (outputs, len(data), (encoded - started) * 1000.0), ms_since(encoded)

                results, worker_ms = context.timed(once)
                variant = f"{settings.format} q{quality}" + ("" if side is None else f" @{side}px")
                answers = [answered(outputs) for outputs, _size, _ms in results]
                accuracy, failures = context.judge([outputs for _size, outputs in answers], f"cloud {variant}")
                cost = ModeCost(
                    CLOUD,
                    WHOLE,
                    edge_ms=statistics.median(ms for _o, _size, ms in results),
                    up_bytes=mean_bytes(size for _o, size, _ms in results),
                    down_bytes=mean_bytes(size for size, _outputs in answers),
                    cloud_ms=statistics.median(worker_ms),
                )
                refused = f"accuracy: {'; '.join(failures)}" if failures else None
                rows.append(PlanRow(CLOUD, variant, cost, accuracy, refused, {"max_side": side}))
    return rows, statistics.median(whole)


def _split_rows(
    context: _Context,
    candidate: SplitCandidate,
    edge_profile: DeviceProfile,
    cloud_profile: DeviceProfile,
    cache: EngineCache,
    precisions: Sequence[tensor_codec.Precision],
    whole_cloud_ms: float,
) -> list[PlanRow]:
    split, measured = context.split, candidate.measured
    detail = {"after": measured.cut.after, "tensors": list(measured.cut.tensors), "raw_bytes": measured.bytes}
    try:
        head = prepare_split(split, candidate, "head", edge_profile, cache)
        tail = prepare_split(split, candidate, "tail", cloud_profile, cache)
    except EdgeSDKError as exc:
        reason = f"its head or tail does not build: {first_line(exc)}"
        return [PlanRow(candidate.name, f"{p}+zstd", None, None, reason, detail) for p in precisions]
    rows = []
    with head.open(context.threads) as head_runner, tail.open(context.threads) as tail_runner:

        def run_head(frame: np.ndarray) -> Outputs:
            return head_runner.infer(sample_feed(split, frame))

        crossing, head_ms = context.timed(lambda frame: with_time(run_head, frame))
        _answers, tail_alone = timed(
            crossing, context.warmup, context.repeats, lambda tensors: with_time(tail_runner.infer, dict(tensors))
        )
        for precision in precisions:
            sizes: list[int] = []
            outputs: list[Outputs] = []
            encode_ms, worker_ms = [], []
            for index, tensors in enumerate(crossing):
                for repeat in range(context.repeats):
                    started = time.perf_counter()
                    data = tensor_codec.encode(tensor_codec.TensorPayload(index, 0.0, tensors), precision)
                    encoded = time.perf_counter()
                    answer = tail_runner.infer(dict(tensor_codec.decode(data).tensors))
                    worker_ms.append(ms_since(encoded))
                    encode_ms.append((encoded - started) * 1000.0)
                    if repeat == 0:
                        sizes.append(len(data))
                        outputs.append(first_item(answer))
            answers = [answered(each) for each in outputs]
            cost = ModeCost(
                candidate.name,
                candidate.part,
                edge_ms=statistics.median(head_ms) + statistics.median(encode_ms),
                up_bytes=mean_bytes(sizes),
                down_bytes=mean_bytes(size for size, _outputs in answers),
                cloud_ms=statistics.median(worker_ms),
            )
            accuracy, failures = context.judge([each for _size, each in answers], f"{candidate.name} {precision}")
            refused = None
            if candidate.trivial_tail:
                assert candidate.tail_share is not None
                refused = (
                    f"the tail computes almost nothing ({candidate.tail_share:.1%} of the model's time in its per-layer "
                    f"profile; {statistics.median(tail_alone):.2f} ms of the whole model's {whole_cloud_ms:.1f} ms on "
                    f"{cloud_profile.name}): the edge has done the work, the link only adds"
                )
            elif failures:
                refused = f"accuracy: {'; '.join(failures)}"
            rows.append(PlanRow(candidate.name, f"{precision}+zstd", cost, accuracy, refused, detail))
    return rows


def _no_cut_reason(split: SplitModel) -> str:
    if not cut_points(split.graph):
        nodes = len(split.graph.graph.node)
        return (
            f"no split: no cut of the model's {nodes} node{'' if nodes == 1 else 's'} leaves the tail without "
            "the model's input, so only edge and cloud are planned"
        )
    return (
        "no split: no cut sends fewer bytes than the model's input itself (cloud mode sends the frame, "
        "compressed), so only edge and cloud are planned"
    )
