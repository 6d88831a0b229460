"""A session per input shape (the ONNX Runtime options' `shape_sessions`): on the CUDA provider a session
that changes shape pays tens of ms to seconds each time, so a GPU engine keeps one session per shape.

The bookkeeping runs here on CPU sessions with the limit set by hand; the `gpu` test runs x86-nvidia's
default on a real GPU and skips elsewhere with the provider probe's reason.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from pydantic import ValidationError

from edge_sdk.backends.onnxruntime.builder import OPTIMIZED_MODEL
from edge_sdk.backends.onnxruntime.options import OnnxRuntimeOptions
from edge_sdk.backends.onnxruntime.runner import OnnxRuntimeRunner
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import ProfileCatalog
from tools.harness.onnx_models import float_classifier


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return float_classifier(tmp_path_factory.mktemp("models") / "float_classifier.onnx")


def images(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def reference(classifier: Path, batch: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(classifier), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"images": batch})[0]


def cpu_runner(classifier: Path, folder: Path, **options: Any) -> OnnxRuntimeRunner:
    shutil.copy(classifier, folder / OPTIMIZED_MODEL)
    return OnnxRuntimeRunner(folder, OnnxRuntimeOptions.model_validate({"backend": "onnxruntime", **options}), "fp32")


def opened(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("shape sessions: opened")]


def test_runner_with_two_shape_sessions_keeps_the_two_latest_shapes_and_answers_each_batch_right(
    classifier: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edge_sdk.backends.onnxruntime.shape_sessions")
    runner = cpu_runner(classifier, tmp_path, shape_sessions=2)
    kept = []
    with runner:
        for batch in (1, 2, 1, 3, 1, 2):
            got = runner.infer({"images": images(batch)})["logits"]
            np.testing.assert_allclose(got, reference(classifier, images(batch)), rtol=1e-5, atol=1e-5)
            kept.append(runner.sessions_open)
    assert runner.sessions_open == 0, "closing the runner closes its sessions"

    # The first shape uses the session the runner opened; 2 and 3 open their own; going back to 1 after 2
    # reuses it; 3 closes 2 (the least recently used), so the last 2 opens again
    assert kept == [1, 2, 2, 2, 2, 2]
    assert opened(caplog) == [
        "shape sessions: opened a session for images 2x3x8x8",
        "shape sessions: opened a session for images 3x3x8x8",
        "shape sessions: opened a session for images 2x3x8x8",
    ]


def test_runner_on_the_cpu_by_default_runs_every_shape_on_one_session(
    classifier: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edge_sdk.backends.onnxruntime.shape_sessions")
    with cpu_runner(classifier, tmp_path) as runner:
        for batch in (1, 2, 3):
            runner.infer({"images": images(batch)})
        assert runner.sessions_open == 1
    assert opened(caplog) == []


def test_shape_sessions_auto_is_eight_when_cuda_runs_first_and_one_elsewhere() -> None:
    options = OnnxRuntimeOptions.model_validate({"backend": "onnxruntime"})
    assert options.sessions_per_engine("CUDAExecutionProvider") == 8
    assert options.sessions_per_engine("CPUExecutionProvider") == 1
    assert options.sessions_per_engine("TensorrtExecutionProvider") == 1, "TensorRT keeps its own shape profiles"
    fixed = OnnxRuntimeOptions.model_validate({"backend": "onnxruntime", "shape_sessions": 3})
    assert fixed.sessions_per_engine("CPUExecutionProvider") == 3


@pytest.mark.parametrize("value", [0, 65, True, "many"])
def test_shape_sessions_out_of_range_is_refused_with_the_range(value: object) -> None:
    with pytest.raises(ValidationError) as raised:
        OnnxRuntimeOptions.model_validate({"backend": "onnxruntime", "shape_sessions": value})
    assert "shape_sessions" in str(raised.value)
    assert "1..64" in str(raised.value) or "'auto'" in str(raised.value), str(raised.value)


@pytest.mark.gpu
def test_gpu_engine_keeps_a_session_per_batch_size(
    catalog: ProfileCatalog, engine_cache: EngineCache, classifier: Path
) -> None:
    prepared = prepare_engine(classifier, catalog.load("x86-nvidia"), "fp32", engine_cache)
    with prepared.open() as runner:
        for batch in (1, 4, 1, 4):
            got = runner.infer({"images": images(batch)})["logits"]
            np.testing.assert_allclose(got, reference(classifier, images(batch)), rtol=1e-2, atol=1e-2)  # TF32
        assert runner.sessions_open == 2  # type: ignore[attr-defined]
