"""The worker's hot-model cache (cloud_offload/worker_residency.py) against a real Mosquitto and real
ONNX Runtime engines: with a budget for two of its three models it serves all three, answers "model
loading" at once for the cold one while the hot one keeps being computed, evicts per policy, reports
the cache in its load report, and refuses a budget smaller than an engine at start."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from cloud_offload import protocol
from cloud_offload.cli import offload
from cloud_offload.worker import OffloadWorker, WorkerSettings
from cloud_offload.worker_models import prepare_model
from edge_sdk.core.errors import ConfigError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.profiles import DeviceProfile
from edge_sdk.serving.model_cache import MB, ModelCacheSettings
from tests.cloud_offload.test_worker import SOURCE, Edge, error_of, image, retained, wait_for_report
from tests.conftest import REPO_ROOT
from tests.support.waits import wait_until
from tools.harness import onnx_models
from tools.harness.broker import BrokerFactory, MosquittoBroker

pytestmark = pytest.mark.slow


def pipeline_of(path: Path, name: str, size: int) -> dict[str, object]:
    return {
        "name": name,
        "model": {"path": str(path)},
        "preprocess": {"resize": [size, size], "layout": "nchw", "dtype": "float32", "scale": 1 / 255},
        "sources": [SOURCE],
        "postprocess": {"type": "classification", "output": "logits"},
    }


def classifier(path: Path, name: str, size: int) -> PipelineConfig:
    return PipelineConfig.model_validate(pipeline_of(path, name, size))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PipelineConfig]:
    """Two tiny classifiers and a heavier ResNet-18-shaped one (hundreds of ms to load and warm up here)."""
    folder = tmp_path_factory.mktemp("models")
    return {
        "small4": classifier(onnx_models.float_classifier(folder / "small4.onnx", classes=4), "small4", 8),
        "small5": classifier(onnx_models.float_classifier(folder / "small5.onnx", classes=5), "small5", 8),
        "resnet": classifier(onnx_models.resnet18_like(folder / "resnet.onnx", size=320, classes=10), "resnet", 320),
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> EngineCache:
    return EngineCache(tmp_path_factory.mktemp("engines"))


@pytest.fixture(scope="module")
def sizes(models: dict[str, PipelineConfig], cpu_profile: DeviceProfile, cache: EngineCache) -> dict[str, int]:
    """Each model's engine bytes (built here once: the workers only load them)."""
    return {name: prepare_model(config, cpu_profile, cache).engine_bytes for name, config in models.items()}


@pytest.fixture(scope="module")
def keys(models: dict[str, PipelineConfig], cache: EngineCache) -> dict[str, str]:
    return {
        name: protocol.model_key(cache.models.load(config.model.path).sha256, config.preprocess)
        for name, config in models.items()
    }


@pytest.fixture
def broker(start_broker: BrokerFactory) -> MosquittoBroker:
    return start_broker()


@pytest.fixture
def edge(broker: MosquittoBroker) -> Iterator[Edge]:
    device = Edge(broker)
    yield device
    device.close()


def two_of_three_mb(sizes: dict[str, int]) -> float:
    """A budget for the ResNet and one small model, or both small ones: not all three."""
    budget = sizes["resnet"] + max(sizes["small4"], sizes["small5"]) + 64
    assert budget < sum(sizes.values())
    return budget / MB


def frame() -> dict[str, np.ndarray]:
    return image(np.full((240, 320, 3), 90, np.uint8))


def computed(edge: Edge, key: str) -> bool:
    return protocol.ERROR_TENSOR not in edge.answer(edge.send(key, frame())).tensors


def test_a_worker_with_room_for_two_of_three_models_serves_all_three_and_never_makes_a_hot_one_wait(
    broker: MosquittoBroker,
    edge: Edge,
    models: dict[str, PipelineConfig],
    keys: dict[str, str],
    sizes: dict[str, int],
    cpu_profile: DeviceProfile,
    cache: EngineCache,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "cloud_offload.worker")
    budget = ModelCacheSettings(memory_mb=two_of_three_mb(sizes), min_residency_s=0)
    settings = WorkerSettings(worker_id="w-cache", model_cache=budget, report_interval_s=0.2)
    pipelines = [models["small4"], models["small5"], models["resnet"]]
    with OffloadWorker(pipelines, cpu_profile, broker.settings(), settings, cache) as worker:
        # the two small ones fit first and stay loaded; the ResNet was checked at start and closed
        assert worker.models.stats().resident == [keys["small5"], keys["small4"]]  # type: ignore[union-attr]
        assert worker.load().models[keys["resnet"]].whole_ms is not None, "its compute time is known to the edges"
        hot, cold = keys["small4"], keys["resnet"]
        assert computed(edge, hot)
        # when the edge asks for the ResNet: answered at once, and its load starts
        assert error_of(edge.answer(edge.send(cold, frame()))) == "model loading"
        # while it loads, the hot model's frames are computed, one after another
        during = 0
        while worker.models.get(cold) is None:
            assert computed(edge, hot)
            during += worker.models.get(cold) is None
        assert during >= 1, "a hot model's frame was answered while the cold one loaded"
        # then the ResNet is served, and plain LRU evicted small5, the least recently used
        wait_until(lambda: computed(edge, cold), 10, "the ResNet's first computed answer", interval=0.1)
        stats = worker.models.stats()
        assert stats is not None
        assert sorted(stats.resident) == sorted([cold, hot]) and stats.evictions == 1 and stats.loads == 3
        assert worker.stats.cold == 1
        # and small5, now cold, comes back the same way (evicting the ResNet, the least recently used)
        assert computed(edge, hot)
        assert error_of(edge.answer(edge.send(keys["small5"], frame()))) == "model loading"
        wait_until(lambda: computed(edge, keys["small5"]), 10, "small5 loaded again", interval=0.1)
        # the load report carries the cache: what is loaded, the hit rate, loads and evictions
        load = worker.load()
        assert load.cache is not None and sorted(load.cache.resident) == sorted([hot, keys["small5"]])
        assert load.cache.evictions == 2 and load.cache.misses >= 2 and 0 < load.cache.hit_rate < 1
        assert load.cache.used_mb <= load.cache.budget_mb
    events = [record.getMessage() for record in caplog.records]
    assert any(f"loaded model {cold} (resnet" in line for line in events), events
    assert any(f"evicted model {keys['small5']} (small5" in line and "for resnet" in line for line in events), events


def test_with_a_residency_time_a_model_loaded_recently_is_not_evicted_for_one_asked_as_rarely(
    broker: MosquittoBroker,
    edge: Edge,
    models: dict[str, PipelineConfig],
    keys: dict[str, str],
    sizes: dict[str, int],
    cpu_profile: DeviceProfile,
    cache: EngineCache,
) -> None:
    budget = ModelCacheSettings(memory_mb=two_of_three_mb(sizes), min_residency_s=60, pinned=("small4",))
    settings = WorkerSettings(worker_id="w-resident", model_cache=budget)
    pipelines = [models["small4"], models["small5"], models["resnet"]]
    with OffloadWorker(pipelines, cpu_profile, broker.settings(), settings, cache) as worker:
        for _ in range(3):
            assert computed(edge, keys["small4"])  # pinned (by its pipeline's name), and hot
        # the ResNet is asked for once, small5 never: small5 makes room
        assert error_of(edge.answer(edge.send(keys["resnet"], frame()))) == "model loading"
        wait_until(lambda: worker.models.get(keys["resnet"]) is not None, 10, "the ResNet loaded")
        # small5, asked for once, does not push out the ResNet: loaded just now, and asked for as often
        answer = error_of(edge.answer(edge.send(keys["small5"], frame())))
        assert answer.startswith("model not loaded (") and "loaded recently" in answer
        assert worker.models.get(keys["resnet"]) is not None
        # asked for a second time, more often than the ResNet, small5 gets in
        assert error_of(edge.answer(edge.send(keys["small5"], frame()))) == "model loading"
        wait_until(lambda: worker.models.get(keys["small5"]) is not None, 10, "small5 loaded")
        stats = worker.models.stats()
        assert stats is not None and stats.refused == 1 and stats.pinned == [keys["small4"]]
        assert keys["small4"] in stats.resident and keys["resnet"] not in stats.resident


def test_a_budget_smaller_than_an_engine_is_refused_at_start_with_how_much_it_needs(
    broker: MosquittoBroker,
    models: dict[str, PipelineConfig],
    sizes: dict[str, int],
    cpu_profile: DeviceProfile,
    cache: EngineCache,
    tmp_path: Path,
) -> None:
    small = ModelCacheSettings(memory_mb=sizes["resnet"] / 2 / MB)
    with pytest.raises(ConfigError, match=r"is smaller than the engine of [0-9a-f]{16} \(.* MB\): give at least"):
        OffloadWorker(
            [models["small4"], models["resnet"]],
            cpu_profile,
            broker.settings(),
            WorkerSettings(worker_id="w-small", model_cache=small),
            cache,
        ).start()
    unknown = ModelCacheSettings(memory_mb=1000, pinned=("small4", "nope"))
    with pytest.raises(ConfigError, match=r"pinned nope: not a served pipeline's name or model key \(small4 \("):
        OffloadWorker(
            [models["small4"]],
            cpu_profile,
            broker.settings(),
            WorkerSettings(worker_id="w-pin", model_cache=unknown),
            cache,
        ).start()
    # and through the command, in one line, before it connects
    broker_file = tmp_path / "broker.yaml"
    broker_file.write_text(yaml.safe_dump({"host": broker.host, "port": broker.port}))
    pipeline = tmp_path / "resnet.yaml"
    pipeline.write_text(yaml.safe_dump(pipeline_of(models["resnet"].model.path, "resnet", 320)))
    arguments = ["worker", "--broker", str(broker_file), "--pipeline", str(pipeline), "--profile", "x86-cpu"]
    result = CliRunner().invoke(
        offload, [*arguments, "--model-memory-mb", "1"], env={"EDGE_SDK_CACHE_DIR": str(cache.root)}
    )
    assert isinstance(result.exception, ConfigError), result.output
    assert "model memory budget 1 MB is smaller than the engine of" in str(result.exception)
    pin = CliRunner().invoke(offload, [*arguments, "--pin", "resnet"])
    assert pin.exit_code == 2 and "--pin needs --model-memory-mb" in pin.output


def test_the_command_keeps_two_of_three_loaded_and_shows_its_loads_evictions_and_cold_answers(
    broker: MosquittoBroker,
    edge: Edge,
    models: dict[str, PipelineConfig],
    keys: dict[str, str],
    sizes: dict[str, int],
    cache: EngineCache,
    tmp_path: Path,
) -> None:
    broker_file = tmp_path / "broker.yaml"
    broker_file.write_text(yaml.safe_dump({"host": broker.host, "port": broker.port}))
    arguments = ["worker", "--broker", str(broker_file), "--profile", "x86-cpu", "--id", "w-cli"]
    for name, size in (("small4", 8), ("small5", 8), ("resnet", 320)):
        pipeline = tmp_path / f"{name}.yaml"
        pipeline.write_text(yaml.safe_dump(pipeline_of(models[name].model.path, name, size)))
        arguments += ["--pipeline", str(pipeline)]
    arguments += ["--model-memory-mb", f"{two_of_three_mb(sizes):.6f}", "--min-residency-s", "0"]
    process = subprocess.Popen(
        [sys.executable, "-c", "from edge_sdk.cli.main import main; main()", "offload", *arguments],
        cwd=REPO_ROOT,
        env={**os.environ, "EDGE_SDK_CACHE_DIR": str(cache.root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_report(broker, "w-cli", process)
        assert error_of(edge.answer(edge.send(keys["resnet"], frame()))) == "model loading"
        wait_until(lambda: computed(edge, keys["resnet"]), 20, "the ResNet loaded and computed", interval=0.2)

        def report() -> protocol.WorkerLoad | None:
            found = retained(broker, protocol.load_topic("w-cli"), 0.2)
            return protocol.WorkerLoad.model_validate_json(found[0].payload) if found else None

        wait_until(
            lambda: (load := report()) is not None and load.cache is not None and load.cache.loads == 3,
            10,
            "a report with the load",
        )
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert f"serving resnet as model {keys['resnet']} (not loaded until asked for)" in output
    assert f"serving small4 as model {keys['small4']}\n" in output
    assert f"info: offload worker: loaded model {keys['resnet']} (resnet" in output
    assert "info: offload worker: evicted model" in output and "for resnet" in output
    cold = re.search(r"stopped; served (\d+), .* cold (\d+),", output)
    assert cold is not None and int(cold[1]) >= 1 and int(cold[2]) >= 1, output  # asked again while it loaded
