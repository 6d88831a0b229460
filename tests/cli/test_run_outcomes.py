"""What `edge-sdk run` tells a script about a run: its exit code, and only outputs it really wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.waits import poll_until

from ..conftest import ASTRONAUT
from .conftest import Run

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def write_pipeline(folder: Path, model: Path, sinks: list[dict[str, object]], mode: str = "processes") -> Path:
    path = folder / "pipeline.yaml"
    uri = f"synthetic://?image={ASTRONAUT}&frames=30&size=320x240&fps=30&realtime=true"
    document = {
        "name": "door",
        "model": {"path": str(model)},
        "sources": [{"uri": uri, "name": "door", "max_frames": 20}],
        "postprocess": {"type": "ssd", "labels": ["person"]},
        "sinks": sinks,
        "runtime": {"mode": mode, "inference_workers": 1},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("mode", ["inline", "processes"])
def test_run_when_every_sink_fails_exits_non_zero_and_claims_no_output(
    edge_sdk: Run, tmp_path: Path, demo_model: Path, mode: str
) -> None:
    # given a JSONL sink whose folder cannot be made (a file stands where it should be)
    (tmp_path / "out").write_text("not a folder")
    pipeline = write_pipeline(tmp_path, demo_model, [{"type": "jsonl", "path": "out/results.jsonl"}], mode)
    # when
    code, out, err = edge_sdk("run", pipeline, "--profile", "x86-cpu")
    # then
    assert code == 1, f"a run that kept no result is not a success: {out} {err}"
    assert "every sink failed" in err
    assert "outputs in" not in out, f"no output is claimed: {out}"
    assert "Traceback" not in out + err


def test_run_when_interrupted_while_starting_exits_130_with_no_child_traceback_and_no_claimed_output(
    tmp_path: Path, demo_model: Path
) -> None:
    # given a pipeline with a video and a JSONL sink, interrupted by Ctrl-C while its stages start
    pipeline = write_pipeline(
        tmp_path,
        demo_model,
        [{"type": "jsonl", "path": "out/results.jsonl"}, {"type": "video", "path": "out/annotated.mp4"}],
    )
    process = subprocess.Popen(
        [EDGE_SDK, "run", str(pipeline), "--profile", "x86-cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "EDGE_SDK_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"},
        start_new_session=True,
    )
    time.sleep(2.5)  # the engine is built and the stage processes are importing
    # when the terminal's Ctrl-C reaches the whole group
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    # then
    assert process.returncode == 130, f"Ctrl-C exits 130: {err}"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, f"no child tracebacks: {err}"
    claimed = [line for line in out.splitlines() if "outputs in" in line]
    for name in ("results.jsonl", "annotated.mp4"):
        if any(name in line for line in claimed):
            assert (tmp_path / "out" / name).exists(), f"{name} is claimed only if it was written: {out}"


def test_run_when_sigterm_arrives_while_the_engine_is_built_stops_at_once_and_leaves_no_lock(
    tmp_path: Path, demo_model: Path
) -> None:
    # given a first run, which builds the detector's engine (several seconds here)
    pipeline = write_pipeline(tmp_path, demo_model, [{"type": "jsonl", "path": "out/results.jsonl"}])
    cache = tmp_path / "cache"
    process = subprocess.Popen(
        [EDGE_SDK, "run", str(pipeline), "--profile", "x86-cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "EDGE_SDK_CACHE_DIR": str(cache)},
        start_new_session=True,
    )
    poll_until(lambda: any(cache.glob("*.lock")), 60, interval=0.01)
    assert any(cache.glob("*.lock")), "the build has begun (it holds its key's lock)"
    # when systemd stops it
    os.killpg(process.pid, signal.SIGTERM)
    # then it does not finish the build first: it stops well within the stop timeout
    _out, err = process.communicate(timeout=10)
    assert process.returncode == 143, err
    assert "stopped during start-up" in err and "Traceback" not in err, err
    assert not list(cache.glob("*.lock")), "an interrupted build leaves no lock file"
    assert not (tmp_path / "out").exists(), "and no output"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_cli_when_stopped_while_it_loads_prints_one_line_and_exits_128_plus_the_signal(sig: signal.Signals) -> None:
    # given the CLI just launched (it spends about a second importing its libraries)
    process = subprocess.Popen(
        [EDGE_SDK, "profiles", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.15)
    # when the signal arrives while it imports
    process.send_signal(sig)
    _out, err = process.communicate(timeout=30)
    # then
    assert process.returncode == 128 + sig, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, f"one line: {err!r}"


SLOW_COMMAND_IMPORT = """
import importlib.abc, pathlib, sys, time
class _SlowRunCommand(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "edge_sdk.cli.pipeline_commands":
            pathlib.Path({marker!r}).touch()
            time.sleep(3)
        return None
sys.meta_path.insert(0, _SlowRunCommand())
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_run_when_stopped_while_its_command_module_loads_prints_one_line_and_exits_128_plus_the_signal(
    sig: signal.Signals, tmp_path: Path, demo_model: Path
) -> None:
    # given `edge-sdk run`, whose command module is imported only when the command is used (made slow
    # here by an import hook, so the signal surely lands inside that import)
    marker = tmp_path / "importing"
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(SLOW_COMMAND_IMPORT.format(marker=str(marker)))
    pipeline = write_pipeline(tmp_path, demo_model, [{"type": "jsonl", "path": "out/results.jsonl"}])
    process = subprocess.Popen(
        [EDGE_SDK, "run", str(pipeline), "--profile", "x86-cpu", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "hook"), "EDGE_SDK_CACHE_DIR": str(tmp_path / "cache")},
    )
    poll_until(marker.exists, 30, interval=0.01)
    # when the signal arrives during that import
    process.send_signal(sig)
    out, err = process.communicate(timeout=30)
    # then: one line, 128 + the signal, nothing on stdout, no output written
    assert process.returncode == 128 + sig, err
    assert err.strip() == f"stopped during start-up ({sig.name})", err
    assert out == "" and not (tmp_path / "out").exists()


def test_run_when_a_signal_during_start_up_comes_back_as_an_import_error_still_exits_for_the_signal(
    tmp_path: Path, demo_model: Path, edge_sdk: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a start-up in which Ctrl-C lands inside a C extension's import, which (as numpy's and
    # onnxruntime's do) replaces the signal's exception with its own ImportError
    from edge_sdk.cli import pipeline_commands
    from edge_sdk.core.errors import BackendUnavailableError

    def start_that_converts_the_signal(*_args: object, **_kwargs: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except BaseException:
            raise BackendUnavailableError("the onnxruntime backend needs the onnxruntime package") from None

    monkeypatch.setattr(pipeline_commands, "run_pipeline", start_that_converts_the_signal)
    pipeline = write_pipeline(tmp_path, demo_model, [{"type": "jsonl", "path": "out/results.jsonl"}])
    # when it runs
    code, _out, err = edge_sdk("run", pipeline, "--profile", "x86-cpu")
    # then the user is told about the stop, not about a missing package
    assert code == 130, err
    assert "stopped during start-up" in err and "onnxruntime package" not in err, err
