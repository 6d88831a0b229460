"""runtime.latency_slo_ms: the inference stage batches under a p99 target, sheds what cannot meet it
(counted, never lost silently), refuses at start a target no batch can meet, and pads fixed-batch engines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.preprocess import PreprocessSpec, frame_feed
from edge_sdk.core.results import Frame, FrameMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.pipeline.frame_steps import FrameInference
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.pipeline.shared_segments import segments_of
from edge_sdk.pipeline.snapshot import RuntimeSnapshot, StageView
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.postprocess.classification import ClassificationSpec
from edge_sdk.profiles import DeviceProfile
from tests.support.metrics import scraped_metrics, stats_text
from tools.harness import onnx_models

from ..conftest import ASTRONAUT
from .test_runtime import detector_pipeline, read_jsonl

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


@pytest.mark.slow
def test_a_live_camera_five_times_faster_than_the_engine_has_its_excess_shed_and_counted(
    tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a 300 FPS camera whose frames queue in the ring (buffer: block), and a 150 ms SLO
    uri = f"synthetic://?image={ASTRONAUT}&frames=300&size=320x240&fps=300&realtime=true"
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: '{uri}', name: live, buffer: block}}\n",
        runtime="  ring_slots: 32\n  batch_size: 8\n  inference_workers: 1\n  latency_slo_ms: 150\n",
    )
    # when
    snapshots: list[RuntimeSnapshot] = []
    summary = run_pipeline(config, cpu_profile, engine_cache, on_snapshot=snapshots.append)
    # then
    results = read_jsonl(tmp_path / "out" / "results.jsonl")
    frames = [row["frame"] for row in results]
    assert frames == sorted(set(frames)), "results never go back in time"
    assert summary.dropped["live"] > 0, "what cannot meet the SLO is dropped and counted"
    written = len(frames) + summary.dropped["live"] + summary.frames_skipped.get("live", 0)
    assert written == 300, "every frame is delivered, or counted as dropped or skipped by the camera"
    assert all(1 <= row["timings_ms"]["batch"] <= 8 for row in results), "batches stay within batch_size"
    # what --stats and Prometheus show: the target, the batches, what was shed
    reported = [stage.batching for snapshot in snapshots for stage in snapshot.stages if stage.batching]
    assert reported and reported[-1]["slo_ms"] == 150
    assert reported[-1]["shed"] > 0 and reported[-1]["mean_batch"] >= 1
    assert "latency target" in stats_text(snapshots[-1])


def test_an_slo_no_batch_can_meet_is_refused_at_start_with_the_measured_best_latency(
    tmp_path: Path, demo_model: Path
) -> None:
    uri = f"synthetic://?image={ASTRONAUT}&frames=10&size=320x240"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"name: slo\nmodel: {{path: {demo_model}}}\nsources:\n  - {{uri: '{uri}'}}\n"
        "postprocess: {type: ssd, labels: [person]}\nsinks:\n  - {type: jsonl, path: out.jsonl}\n"
        "runtime: {latency_slo_ms: 0.01}\n"
    )
    run = subprocess.Popen(
        [EDGE_SDK, "--cache-dir", str(tmp_path / "cache"), "run", str(pipeline)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _stdout, stderr = run.communicate(timeout=240)
    assert run.returncode != 0
    assert "latency_slo_ms 0.01 cannot be met: the best measured batch latency is" in stderr
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()
    assert segments_of(run.pid) == [], "no shared memory is left behind"


def test_a_fixed_batch_engine_is_padded_to_its_batch_and_only_real_frames_get_results(
    tmp_path: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    model = onnx_models.float_classifier(tmp_path / "b4.onnx", batch=4)
    spec = PreprocessSpec(resize=(8, 8), layout="nchw", dtype="float32", fold=False)
    with prepare_engine(model, cpu_profile, cache=engine_cache).open() as runner:
        meta = runner.inputs[0]
        postprocess = build_postprocessor(ClassificationSpec(type="classification", output=runner.outputs[0].name))
        infer = FrameInference(runner, meta.name, frame_feed(spec, meta), postprocess)
        frames = [
            Frame(FrameMeta("cam", index, 0.0, 16, 16), np.full((16, 16, 3), 40 * index, np.uint8))
            for index in range(5)
        ]
        batched = infer(frames)
        alone = [infer([frame])[0] for frame in frames]
    assert infer.fixed_batch == 4
    assert [r.frame.index for r in batched] == [0, 1, 2, 3, 4]
    assert [r.classifications for r in batched] == [r.classifications for r in alone]
    assert infer.padded_rows == 3 + 5 * 3, "5 frames as 4 + 1 (3 padded), then each alone (3 padded each)"


def test_the_batcher_shows_in_prometheus() -> None:
    batching = {"slo_ms": 50.0, "mean_batch": 3.5, "shed": 7, "padded": 0, "padding_share": 0.0}
    stage = StageView("inference:0", "inference", pid=1, frames=65, state="running", batching=batching)
    metrics = scraped_metrics(RuntimeSnapshot([stage], {}, 10.0, 20.0, 5.0))
    assert 'edge_sdk_batch_mean{stage="inference:0"} 3.5' in metrics
    assert 'edge_sdk_batching_shed{stage="inference:0"} 7.0' in metrics
