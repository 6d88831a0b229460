"""The `edge-sdk` console script, run as a user runs it: a real process, its output and exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def edge_sdk(*args: str, cache: Path, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EDGE_SDK_CACHE_DIR": str(cache), "COLUMNS": "200"}
    return subprocess.run([EDGE_SDK, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=240)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode != 0, f"a bad input must exit non-zero; stdout: {done.stdout}"
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, f"expected exactly one 'error:' line, got stderr: {done.stderr!r}"
    assert "Traceback" not in done.stderr, "no traceback without --debug"
    for fragment in fragments:
        assert fragment in lines[0], f"the error should mention {fragment!r}: {lines[0]!r}"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "engines"


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory, demo_model: Path) -> Path:
    """A cache holding the detector's x86-cpu engine, built once by the CLI; tests take copies."""
    folder = tmp_path_factory.mktemp("built") / "engines"
    done = edge_sdk("build", demo_model, "--profile", "x86-cpu", cache=folder)
    assert done.returncode == 0, done.stderr
    return folder


def test_profiles_list_when_run_shows_every_shipped_profile(cache: Path) -> None:
    # when
    done = edge_sdk("profiles", "list", cache=cache)
    # then
    assert done.returncode == 0, done.stderr
    for name in ("jetson-orin-dla", "jetson-orin-gpu", "arm-cpu", "atlas-npu", "x86-cpu", "x86-nvidia"):
        assert name in done.stdout, f"profiles list should show {name}"


def test_profiles_show_when_name_is_known_prints_resolved_yaml(cache: Path) -> None:
    done = edge_sdk("profiles", "show", "jetson-orin-dla", cache=cache)
    assert done.returncode == 0, done.stderr
    assert "dla_core: 0" in done.stdout, "the resolved profile should include the DLA core"
    assert "workspace_mb" in done.stdout


def test_profiles_show_when_name_is_unknown_lists_known_profiles(cache: Path) -> None:
    done = edge_sdk("profiles", "show", "jetson-nano-classic", cache=cache)
    assert_one_line_error(done, "unknown profile 'jetson-nano-classic'", "x86-cpu", "jetson-orin-dla")


@pytest.mark.parametrize("name", ["../pipelines/demo", "/etc/hostname"])
def test_profiles_show_when_name_leaves_the_profile_folder_then_one_line_error(cache: Path, name: str) -> None:
    done = edge_sdk("profiles", "show", name, cache=cache)
    assert_one_line_error(done, "expected a profile name", repr(name))
    assert done.stdout == "", "nothing of the file outside the profile folder is shown"


def test_profiles_detect_when_run_on_this_x86_machine_picks_x86_cpu(cache: Path) -> None:
    if os.uname().machine != "x86_64" or shutil.which("nvidia-smi"):
        pytest.skip("this check describes a GPU-less x86_64 host like CI's")
    done = edge_sdk("profiles", "detect", "--json", cache=cache)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["profile"] == "x86-cpu"


def test_build_when_run_twice_builds_once_then_uses_the_cache(cache: Path, demo_model: Path) -> None:
    # given a cold cache, when building twice
    first = edge_sdk("build", demo_model, "--profile", "x86-cpu", cache=cache)
    second = edge_sdk("build", demo_model, "--profile", "x86-cpu", cache=cache)
    # then
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.startswith("built: "), f"first build should build: {first.stdout}"
    assert second.stdout.startswith("cached: "), f"second build should hit the cache: {second.stdout}"
    listing = edge_sdk("cache", "ls", "--json", cache=cache)
    entries = json.loads(listing.stdout)
    assert len(entries) == 1 and entries[0]["problem"] is None, "one healthy entry"
    assert entries[0]["key"]["profile_name"] == "x86-cpu"


def test_cache_inspect_shows_one_entrys_key_facts_and_gate(tmp_path: Path, built_cache: Path) -> None:
    cache = tmp_path / "engines"
    shutil.copytree(built_cache, cache)
    digest = json.loads(edge_sdk("cache", "ls", "--json", cache=cache).stdout)[0]["digest"]
    done = edge_sdk("cache", "inspect", digest[:8], cache=cache)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{digest}: ok"
    assert "  profile_name: x86-cpu" in lines and "  backend: onnxruntime" in lines
    assert any(line.startswith("  equivalence gate: passed") for line in lines)
    assert json.loads(edge_sdk("cache", "inspect", digest, "--json", cache=cache).stdout)["key"]["precision"] == "fp32"
    assert_one_line_error(edge_sdk("cache", "inspect", "ffff", cache=cache), "no cache entry starts with 'ffff'")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["build", "missing.onnx"], ["model file not found", "missing.onnx"]),
        (["build", "{garbage}"], ["is not a valid ONNX model"]),
        (["build", "{model}", "--profile", "nope"], ["unknown profile 'nope'", "x86-cpu"]),
        # (not installed: 'edge-sdk[cuda]'; listed but its libraries missing: 'tensorrt-cu13-libs')
        (["build", "{model}", "--profile", "jetson-orin-dla"], ["tensorrt", "pip install"]),
        (["build", "{model}", "--profile", "x86-cpu", "--precision", "fp16"], ["x86-cpu", "fp32", "fp16"]),
        (["run", "{pipeline_typo}"], ["pipeline.yaml:2", "key 'modle'", "unknown key"]),
        (["run", "{pipeline_malformed}"], ["malformed YAML", "bad.yaml:"]),
        (["run", "{pipeline_wrong_input}"], ["expects float32", "uint8"]),
        (["--cache-dir", "{unwritable}", "build", "{model}"], ["not writable"]),
    ],
    ids=[
        "missing-model",
        "corrupt-model",
        "unknown-profile",
        "provider-not-installed",
        "unsupported-precision",
        "pipeline-unknown-key",
        "pipeline-malformed-yaml",
        "model-input-mismatch",
        "unwritable-cache",
    ],
)
def test_cli_when_input_is_bad_prints_one_line_and_keeps_the_cache(
    tmp_path: Path,
    cache: Path,
    built_cache: Path,
    demo_model: Path,
    tiny_models: dict[str, Path],
    args: list[str],
    fragments: list[str],
) -> None:
    # given a cache holding a good engine, and bad inputs of each kind
    shutil.copytree(built_cache, cache)
    before = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file() and not p.name.startswith(".")}
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not an onnx model" * 50)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    typo = tmp_path / "pipeline.yaml"
    typo.write_text("name: t\nmodle: {path: m.onnx}\n")
    malformed = tmp_path / "bad.yaml"
    malformed.write_text("name: t\nsources: [ {uri: x.mp4}\nsinks: []\n")
    wrong_input = tmp_path / "wrong_input.yaml"
    wrong_input.write_text(
        f"name: t\nmodel: {{path: {tiny_models['float_classifier']}}}\n"
        "sources: [{uri: 'synthetic://?frames=2&size=8x8'}]\n"
        "postprocess: {type: classification, output: logits}\n"
    )
    values = {
        "{model}": str(demo_model),
        "{garbage}": str(garbage),
        "{pipeline_typo}": str(typo),
        "{pipeline_malformed}": str(malformed),
        "{pipeline_wrong_input}": str(wrong_input),
        "{unwritable}": str(blocker / "cache"),
    }
    # when
    done = (
        edge_sdk(*[values.get(a, a) for a in args], "--profile", "x86-cpu", cache=cache)
        if args[0] == "run"
        else (edge_sdk(*[values.get(a, a) for a in args], cache=cache))
    )
    # then
    assert_one_line_error(done, *fragments)
    after = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert after == before, "a failed command must leave the cache exactly as it was"


def test_cli_when_debug_is_given_shows_the_traceback(cache: Path) -> None:
    done = edge_sdk("--debug", "build", "missing.onnx", "--profile", "x86-cpu", cache=cache)
    assert done.returncode != 0
    assert "Traceback" in done.stderr and "ModelError" in done.stderr, "--debug should show where the error came from"


def test_cache_verify_when_an_entry_is_stale_or_corrupt_reports_it_and_rm_stale_removes_only_those(
    cache: Path, demo_model: Path, tiny_models: dict[str, Path]
) -> None:
    # given three entries: one healthy, one built "by another onnxruntime", one truncated
    for model in (demo_model, tiny_models["float_classifier"], tiny_models["uint8_mean_classifier"]):
        assert edge_sdk("build", model, "--profile", "x86-cpu", cache=cache).returncode == 0
    entries = {
        json.loads((d / "manifest.json").read_text())["facts"]["model_path"]: d
        for d in cache.iterdir()
        if d.is_dir() and not d.name.startswith(".")
    }
    stale = entries[str(tiny_models["float_classifier"])]
    manifest = json.loads((stale / "manifest.json").read_text())
    manifest["key"]["backend_version"] = "0.0.1"
    (stale / "manifest.json").write_text(json.dumps(manifest))
    corrupt = entries[str(tiny_models["uint8_mean_classifier"])]
    artifact = corrupt / "model.optimized.onnx"
    artifact.write_bytes(artifact.read_bytes()[:40])
    # when
    verify = edge_sdk("cache", "verify", cache=cache)
    # then
    assert verify.returncode == 1, "verify must fail when an entry is bad"
    assert "stale: built with onnxruntime 0.0.1" in verify.stdout
    assert "does not match its hash" in verify.stdout
    assert "1 ok, 2 bad" in verify.stdout
    # when
    removed = edge_sdk("cache", "rm", "--stale", cache=cache)
    # then
    assert removed.returncode == 0 and "removed 2 entries" in removed.stdout, removed.stdout + removed.stderr
    remaining = [d for d in cache.iterdir() if d.is_dir() and not d.name.startswith(".")]
    assert remaining == [entries[str(demo_model)]], "only the healthy entry stays"
    assert edge_sdk("cache", "verify", cache=cache).returncode == 0


def test_bench_when_batches_are_given_reports_each_as_json(cache: Path, tiny_models: dict[str, Path]) -> None:
    done = edge_sdk(
        "bench", tiny_models["float_classifier"], "--profile", "x86-cpu", "--batch", "1,2,4",
        "--iterations", "5", "--json", cache=cache,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["batch"] for r in results] == [1, 2, 4]
    assert all(r["p99_ms"] >= r["p50_ms"] > 0 and r["throughput"] > 0 for r in results)


def test_bench_when_batch_is_not_a_number_says_what_it_expected(cache: Path, tiny_models: dict[str, Path]) -> None:
    done = edge_sdk("bench", tiny_models["float_classifier"], "--profile", "x86-cpu", "--batch", "1,x", cache=cache)
    assert_one_line_error(done, "--batch", "1,x")


def test_run_when_pipeline_is_valid_writes_results_and_prints_a_summary(
    tmp_path: Path, cache: Path, demo_model: Path, small_video: Path
) -> None:
    # given
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"name: cli\nmodel: {{path: {demo_model}}}\nsources: [{{uri: {small_video}, name: cam}}]\n"
        "postprocess: {type: ssd, labels: [person]}\n"
        "sinks: [{type: jsonl, path: out/results.jsonl}, {type: video, path: out/annotated.mp4}]\n"
    )
    # when
    done = edge_sdk("run", pipeline, "--profile", "x86-cpu", cache=cache)
    # then
    assert done.returncode == 0, done.stderr
    assert "24 frames" in done.stdout and "FPS" in done.stdout and "p99" in done.stdout, done.stdout
    assert str(tmp_path / "out") in done.stdout, "the summary names the output folder"
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 24 and json.loads(lines[0])["source"] == "cam"
    assert (tmp_path / "out" / "annotated.mp4").stat().st_size > 0


def test_doctor_when_run_reports_host_packages_and_usable_profiles(cache: Path) -> None:
    done = edge_sdk("doctor", "--json", cache=cache)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    usable = {p["name"]: p for p in report["profiles"]}
    assert usable["x86-cpu"]["usable"], "the CPU profile must be usable on a machine with onnxruntime"
    assert not usable["jetson-orin-dla"]["usable"]
    assert usable["jetson-orin-dla"]["problem"], "doctor says why a profile is not usable (host first, then providers)"
    assert "CPUExecutionProvider" in report["backends"]["onnxruntime"]
    assert any(p["name"] == "onnxruntime" and p["version"] for p in report["packages"])


@pytest.mark.parametrize(
    ("kind", "path"),
    [("profile", "device_profiles/profile.schema.json"), ("pipeline", "pipelines/pipeline.schema.json")],
)
def test_schema_when_exported_matches_the_checked_in_file(cache: Path, kind: str, path: str) -> None:
    done = edge_sdk("schema", kind, cache=cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO_ROOT / path).read_text(), f"{path} is out of date: run 'make schemas'"
