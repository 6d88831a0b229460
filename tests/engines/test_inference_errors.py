"""An engine that fails while it runs (out of device memory, a shape its kernels refuse) says so in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge_sdk.core.errors import InferenceError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import DeviceProfile, ProfileCatalog
from tools.harness.onnx_models import make_model

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def reshape_to_one_row(path: Path) -> Path:
    """[N, 4] -> Reshape [1, 4]: builds, loads and runs a batch of one, and fails at run time on more."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "one_row",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [1, 4])],
    )
    onnx.save(make_model(graph), str(path))
    return path


def test_an_engine_that_fails_while_it_runs_raises_one_line_naming_the_provider_and_the_shapes(
    tmp_path: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given an engine that builds (the gate runs a batch of one)
    model = reshape_to_one_row(tmp_path / "one_row.onnx")
    prepared = prepare_engine(model, cpu_profile, cache=engine_cache)
    # when a batch its kernels refuse is run
    with prepared.open() as runner, pytest.raises(InferenceError) as failed:
        runner.infer({"x": np.zeros((2, 4), np.float32)})
    # then one line names the provider, the input's shape and ONNX Runtime's reason
    message = str(failed.value)
    assert "\n" not in message and "CPUExecutionProvider" in message and "x (2, 4)" in message, message


def test_bench_of_a_batch_the_engine_cannot_run_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    model = reshape_to_one_row(tmp_path / "one_row.onnx")
    done = subprocess.run(
        [EDGE_SDK, "bench", str(model), "--profile", "x86-cpu", "--batch", "2", "--iterations", "1", "--warmup", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "failed to run" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and "[E:onnxruntime" not in done.stderr, "no ONNX Runtime log dump"


def tile_rows(path: Path, repeats: int) -> Path:
    """[N, 1] -> Tile [1, repeats]: a tiny input whose output holds N x `repeats` floats."""
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "repeats"], ["y"])],
        "tile_rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", repeats])],
        [helper.make_tensor("repeats", TensorProto.INT64, [2], [1, repeats])],
    )
    onnx.save(make_model(graph), str(path))
    return path


@pytest.mark.gpu
def test_a_batch_that_does_not_fit_in_gpu_memory_raises_one_line_and_the_engine_runs_on(
    tmp_path: Path, catalog: ProfileCatalog, engine_cache: EngineCache
) -> None:
    # given an engine whose output is 256 MiB per item (the gate's batch of one fits)
    model = tile_rows(tmp_path / "tile_rows.onnx", 1 << 26)
    prepared = prepare_engine(model, catalog.load("x86-nvidia"), "fp32", engine_cache)
    with prepared.open() as runner:
        # when a batch of 2,048 (512 GiB of output) is run
        with pytest.raises(InferenceError) as failed:
            runner.infer({"x": np.ones((2048, 1), np.float32)})
        # then one line names the provider, the shape and the reason, and the engine still runs a batch that fits
        message = str(failed.value)
        assert "\n" not in message and "CUDAExecutionProvider" in message and "x (2048, 1)" in message, message
        assert runner.infer({"x": np.full((1, 1), 3.0, np.float32)})["y"][0, -1] == 3.0
    # and the cache entry is intact
    assert [(e.directory, e.problem) for e in engine_cache.entries()] == [(prepared.entry.directory, None)]
