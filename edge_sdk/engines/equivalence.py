"""The equivalence gate: each engine a build makes, run as the pipeline will run it (its provider, its
precision, the folded input), against the model as the user gave it (FP32, the CPU, no graph
optimisation) on a few real frames, judged by the INT8 gate's task-aware metric.

It is what catches an engine that builds and runs but answers wrongly: a provider kernel that
differs from the CPU's (CUDA's uint8 Resize gave 0 detections), a graph pass, a precision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.backends.calibration.frame_data import frame_feed
from edge_sdk.backends.calibration.settings import TaskSpec
from edge_sdk.backends.calibration.setup import task_spec
from edge_sdk.backends.int8.accuracy import AccuracyGate, AccuracyReport, compare_outputs, run_samples
from edge_sdk.backends.onnxruntime.reference import ReferenceRunner
from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ConfigError, EngineBuildError, SourceError, first_line
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.graph.options import FRAME_INPUT
from edge_sdk.postprocess.ssd import ssd_decoding
from edge_sdk.postprocess.ssd_decode import BOX_ENCODINGS, CLASS_SCORES, SsdDecoder

from .benchmark import make_input

if TYPE_CHECKING:
    from edge_sdk.core.preprocess import PreprocessSpec
    from edge_sdk.postprocess import AnyPostprocessSpec
    from edge_sdk.sources.base import Source

SCENE_IMAGE = Path(__file__).with_name("gate_scene.jpg")
"""The shipped frame (a person, for detectors) the gate runs when the pipeline's source gives none."""
SOURCE_STRIDE = 8
"""The gate takes every 8th frame of a file source: consecutive frames are nearly the same."""
_RANDOM_SEED = 20261201
_RANDOM_DYNAMIC_SIZE = 64


GateFrames = tuple[tuple[np.ndarray, ...], str]
"""BGR uint8 frames, and where they come from (as the verdict names it)."""


@dataclass(frozen=True)
class GateData:
    """What the gate runs: frames (read only when a build needs them), how they become the model's
    input (the pipeline's preprocessing, when known) and how outputs are judged (the pipeline's
    post-processing)."""

    read_frames: Callable[[int], GateFrames]
    """Up to N frames."""
    preprocess: PreprocessSpec | None = None
    input_name: str | None = None
    postprocess: AnyPostprocessSpec | None = None
    model_samples: Callable[[int], list[dict[str, np.ndarray]]] | None = None
    """Up to N ready model inputs (an int8 build's calibration data), for a model frames cannot feed."""

    @classmethod
    def scene(cls) -> GateData:
        return cls(shipped_frames)


def shipped_frames(count: int) -> GateFrames:
    return scene_frames(count), "the shipped image"


def scene_frames(count: int) -> tuple[np.ndarray, ...]:
    """`count` frames from the shipped image: as it is, then mirrored, zoomed, stretched to 16:9,
    darker, turned, blurred and small, so sizes, layouts and contrast vary."""

    cv2 = import_cv2()
    image = cv2.imread(str(SCENE_IMAGE), cv2.IMREAD_COLOR)
    if image is None:
        raise ConfigError(f"cannot read the equivalence gate's image {SCENE_IMAGE}: reinstall edge-sdk")
    height, width = image.shape[:2]
    variants = [
        image,
        image[:, ::-1],
        cv2.resize(image[height // 8 : height * 7 // 8, width // 8 : width * 7 // 8], (640, 480)),
        cv2.resize(image, (1280, 720)),
        (image * 0.6).astype(np.uint8),
        np.rot90(image),
        cv2.GaussianBlur(image, (5, 5), 0),
        cv2.resize(image, (320, 240)),
    ]
    return tuple(np.ascontiguousarray(variants[i % len(variants)]) for i in range(count))


def source_frames(source: Source, count: int) -> tuple[np.ndarray, ...]:
    """Up to `count` frames of a file source (opened and closed here): every SOURCE_STRIDE-th one,
    and the last one read when the source ends early. A source that fails gives what it gave before:
    the run reports the failure, the gate only needs frames."""
    kept: list[np.ndarray] = []
    last: np.ndarray | None = None
    try:
        with source:
            for index in range(count * SOURCE_STRIDE):
                frame = source.read()
                if frame is None:
                    break
                last = frame.image
                if index % SOURCE_STRIDE == 0:
                    kept.append(frame.image)
                    last = None
    except SourceError:
        pass
    if last is not None and len(kept) < count:
        kept.append(last)
    return tuple(kept)


@dataclass(frozen=True)
class GateVerdict:
    """What the gate measured on one built engine, as the manifest keeps it."""

    passed: bool
    samples: int
    origin: str
    task: str
    summary: str
    failures: tuple[str, ...]
    seconds: float
    report: dict[str, Any]
    fold_fallback: str | None = None
    """Why the folded preprocessing was dropped for this engine (it failed the gate), if it was."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"failures": list(self.failures)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateVerdict:
        return cls(**(data | {"failures": tuple(data.get("failures", ()))}))

    def line(self) -> str:
        """One line for people: the outcome, the data and the task metric."""
        state = "passed" if self.passed else "FAILED"
        text = f"equivalence gate {state} on {self.origin} ({self.task}), {self.seconds:.2f} s: {self.summary}"
        if self.failures:
            text += "; " + "; ".join(self.failures)
        return text


def check_equivalence(
    reference: ModelFile,
    engine: EngineRunner,
    folded: bool,
    data: GateData,
    frames: Sequence[np.ndarray],
    origin: str,
    gate: AccuracyGate,
) -> GateVerdict:
    """Run `engine` (not yet active) and the reference on `frames` (from `origin`) fed as `data` says;
    `folded`: the engine takes raw frames.

    An engine that cannot run raises EngineBuildError with its first line; a mismatch is a verdict
    that did not pass, with its failures as sentences."""
    started = time.perf_counter()
    reference_feed, origin = _reference_samples(reference, data, frames, origin)
    task = _task(reference, data.postprocess)
    with ReferenceRunner(reference.path) as runner:
        expected = [_first_item(outputs) for outputs in run_samples(runner, reference_feed)]
    try:
        with engine:
            candidate_feed = _engine_samples(engine.inputs, reference_feed, frames, folded)
            actual = [_first_item(outputs) for outputs in run_samples(engine, candidate_feed)]
    except EngineBuildError:
        raise
    except Exception as exc:  # the backend's own errors: the engine does not run where it was built for
        raise EngineBuildError(f"the built engine does not run: {first_line(exc)}") from None
    actual = _host_decoded(actual, expected, reference)
    shared = [name for name in expected[0] if name in actual[0]]
    report = compare_outputs(
        [{n: o[n] for n in shared} for o in expected], [{n: o[n] for n in shared} for o in actual], task
    )
    failures = tuple(forgiving_one_box(gate, report).failures(report, names=("FP32 CPU", "engine")))
    return GateVerdict(
        passed=not failures,
        samples=report.samples,
        origin=origin,
        task=task.kind,
        summary=report.summary(("FP32 CPU", "engine")).split(": ", 1)[-1],
        failures=failures,
        seconds=round(time.perf_counter() - started, 3),
        report=report.to_dict(),
    )


def forgiving_one_box(gate: AccuracyGate, report: AccuracyReport) -> AccuracyGate:
    """`gate`, allowing at least one box for a detector: a few frames hold few boxes, and one whose
    score sits at the decoder's threshold may fall either side on any provider (8 frames of a
    demo video: 7 of 8 boxes found is 87.5%). A wrong engine loses far more (CUDA's uint8 fold: all).
    One box is counted on the reference's boxes alone: counted on the fewer of both, an engine that
    found 1 of 5 was allowed a 100-point drop."""
    boxes = report.reference_boxes or 0
    if report.matched_boxes is None or not boxes:
        return gate
    one_box = 100.0 / boxes  # the share of the reference's boxes that one box lost takes
    return replace(gate, max_accuracy_drop=max(gate.max_accuracy_drop, one_box * (1 + 1e-9)))


def _reference_samples(
    reference: ModelFile, data: GateData, frames: Sequence[np.ndarray], origin: str
) -> tuple[list[dict[str, np.ndarray]], str]:
    """The frames as the model's own input (the pipeline's preprocessing, or raw frames when the input
    takes them); seeded random inputs for a model frames cannot feed."""

    try:
        feed, _target = frame_feed(reference.inputs, data.preprocess, data.input_name, "(equivalence gate)")
    except ConfigError:
        if data.model_samples is not None and (samples := data.model_samples(len(frames))):
            return samples, f"{len(samples)} samples of the calibration data"
        rng = np.random.default_rng(_RANDOM_SEED)

        samples = [
            {meta.name: make_input(meta, _batch_of(meta), _RANDOM_DYNAMIC_SIZE, rng) for meta in reference.inputs}
            for _ in frames
        ]
        return samples, f"{len(samples)} seeded random inputs (frames cannot feed this model without its preprocessing)"
    return [feed(frame) for frame in frames], f"{len(frames)} frames of {origin}"


def _engine_samples(
    inputs: Sequence[TensorMeta],
    reference_feed: list[dict[str, np.ndarray]],
    frames: Sequence[np.ndarray],
    folded: bool,
) -> list[dict[str, np.ndarray]]:
    """What the pipeline gives the engine: raw frames when it folded the preprocessing, else the same
    tensors as the reference; repeated up to a fixed batch larger than one."""
    if folded:
        frame_input = FRAME_INPUT if any(meta.name == FRAME_INPUT for meta in inputs) else inputs[0].name
        samples = [{frame_input: np.ascontiguousarray(frame[np.newaxis])} for frame in frames]
    else:
        samples = reference_feed
    metas = {meta.name: meta for meta in inputs}
    return [{name: _to_batch(array, metas.get(name)) for name, array in sample.items()} for sample in samples]


def _to_batch(array: np.ndarray, meta: TensorMeta | None) -> np.ndarray:
    batch = meta.shape[0] if meta is not None and meta.shape else None
    if isinstance(batch, int) and batch > array.shape[0]:
        return np.repeat(array[:1], batch, axis=0)
    return array


def _batch_of(meta: TensorMeta) -> int:
    first = meta.shape[0] if meta.shape else None
    return first if isinstance(first, int) else 1


def _host_decoded(
    actual: list[dict[str, np.ndarray]], expected: list[dict[str, np.ndarray]], reference: ModelFile
) -> list[dict[str, np.ndarray]]:
    """An SSD engine cut after its box head (graph/ssd_split.py) leaves the box decoder and NMS to the
    host: the pipeline's engine is that engine and that decoder, so it is judged with both, as the
    uncut model's own outputs."""

    if not actual or not {BOX_ENCODINGS, CLASS_SCORES} <= set(actual[0]) or BOX_ENCODINGS in expected[0]:
        return actual

    decoder = SsdDecoder(ssd_decoding(reference.path))
    return [decoder.graph_outputs(outputs[BOX_ENCODINGS][0], outputs[CLASS_SCORES][0]) for outputs in actual]


def _first_item(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Batch item 0 of each output, still as a batch of one (the metric's form)."""
    return {name: value[:1] if np.ndim(value) else value for name, value in outputs.items()}


def _task(reference: ModelFile, postprocess: AnyPostprocessSpec | None) -> TaskSpec:
    """The pipeline's post-processing says what outputs mean; without one, a model whose outputs look
    like a detector's (postprocess/guess.py: SSD detections, a YOLO head) is judged as a detector,
    anything else per output."""

    return task_spec(None, postprocess, outputs=reference.outputs)
