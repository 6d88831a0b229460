"""What the main commands print when something is wrong, in-process: sentences, not Python reprs."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from edge_sdk.fleet.operator.rollout_store import RolloutSpec, RolloutStore, TargetDevice
from edge_sdk.fleet.wire.manifest import TargetSelector

from .conftest import Run

PYTHON_LOOKS = ("{'", "['", "None", "Traceback")


def assert_reads_as_words(text: str) -> None:
    for look in PYTHON_LOOKS:
        assert look not in text, f"{look!r} is Python's, not a sentence: {text}"


def unsorted_model(path: Path) -> Path:
    """A model the ONNX checker refuses with a message over three lines: the node is on the second."""
    node = helper.make_node("Add", ["x", "later"], ["y"], name="add_scores")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.fixture
def files(tmp_path: Path, tiny_models: dict[str, Path]) -> dict[str, Path]:
    """Inputs for the error paths: a model, a rollout state file with one rollout, a file that is not a manifest."""
    state = tmp_path / "rollouts.db"
    spec = RolloutSpec(
        manifest=b"{}",
        deployment_id="demo",
        version=7,
        selector=TargetSelector(),
        first_wave=1,
        rate_per_min=10,
        abort_threshold=0.2,
    )
    with RolloutStore(state) as store:
        store.create(spec, [TargetDevice("cam-1")], rollout_id="demo-v7-v7-c3c0de")
    not_a_manifest = tmp_path / "v7.yaml"
    not_a_manifest.write_text("deployment_id: demo\nversion: seven\n")
    return {
        "model": tiny_models["float_classifier"],
        "state": state,
        "yaml": not_a_manifest,
        "cache": tmp_path / "engines",
    }


ERROR_PATHS = {
    "profile-unknown": ["profiles", "show", "jetson-nano-classic"],
    "build-missing-model": ["build", "missing.onnx", "--profile", "x86-cpu"],
    "build-calib-without-int8": ["build", "{model}", "--profile", "x86-cpu", "--calib", "calib/"],
    "build-int8-without-calib": ["build", "{model}", "--profile", "x86-cpu", "--precision", "int8"],
    "bench-bad-batch": ["bench", "{model}", "--batch", "1,two"],
    "inspect-nothing": ["inspect"],
    "cache-rm-nothing": ["cache", "rm"],
    "compare-not-onnx": ["compare", "{model}", "model.tflite", "--data", "{yaml}"],
    "fleet-status-no-state": ["fleet", "status", "--state", "{cache}/none.db"],
    "fleet-status-unknown-rollout": ["fleet", "status", "demo-v8", "--state", "{state}"],
    "fleet-deploy-bad-rate": ["fleet", "deploy", "{yaml}", "--broker", "{yaml}", "--rate", "fast"],
    "fleet-deploy-bad-select": ["fleet", "deploy", "{yaml}", "--broker", "{yaml}", "--select", "color=red"],
    "fleet-sign-bad-manifest": ["fleet", "sign", "{yaml}", "--key", "{yaml}", "--out", "{cache}/v7.signed"],
    "run-missing-pipeline": ["run", "missing.yaml"],
}


@pytest.mark.parametrize("args", list(ERROR_PATHS.values()), ids=list(ERROR_PATHS))
def test_a_command_when_its_input_is_wrong_says_so_in_one_line_of_words(
    edge_sdk: Run, files: dict[str, Path], args: list[str]
) -> None:
    # When the command is given something wrong
    code, out, err = edge_sdk("--cache-dir", files["cache"], *(_fill(arg, files) for arg in args))

    # Then it fails with one error line that reads as words
    assert code != 0, f"a wrong input must fail: {out}{err}"
    errors = [line for line in err.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, f"exactly one error line, got stderr: {err}"
    assert_reads_as_words(out + err)


def test_fleet_status_when_the_rollout_is_unknown_names_the_known_ones_as_words(
    edge_sdk: Run, files: dict[str, Path]
) -> None:
    code, _, err = edge_sdk("fleet", "status", "demo-v8", "--state", files["state"])

    assert code == 2
    assert "no rollout 'demo-v8'" in err and "recent ones: demo-v7-v7-c3c0de" in err, err


def test_build_when_it_succeeds_lists_the_providers_used_as_words(edge_sdk: Run, files: dict[str, Path]) -> None:
    code, out, err = edge_sdk("--cache-dir", files["cache"], "build", files["model"], "--profile", "x86-cpu")

    assert code == 0, err
    assert "providers_used: CPUExecutionProvider" in out, out
    assert_reads_as_words(out)


def test_build_when_the_onnx_checker_refuses_the_model_keeps_the_lines_that_name_the_node(
    edge_sdk: Run, files: dict[str, Path], tmp_path: Path
) -> None:
    # Given a model whose node reads a tensor no earlier node makes
    model = unsorted_model(tmp_path / "unsorted.onnx")

    # When it is built
    code, _, err = edge_sdk("--cache-dir", files["cache"], "build", model, "--profile", "x86-cpu")

    # Then the one error line holds the checker's whole message: the node and what is wrong with it
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert "is not a valid ONNX model" in errors[0]
    assert "add_scores" in errors[0] and "is not output of any previous nodes" in errors[0], errors[0]


def test_help_when_shown_names_the_environment_variables_of_the_cache_and_profile_folders(edge_sdk: Run) -> None:
    code, out, _ = edge_sdk("--help")

    assert code == 0
    assert "EDGE_SDK_CACHE_DIR" in out and "EDGE_SDK_PROFILE_DIR" in out, out


def _fill(arg: str, files: dict[str, Path]) -> str:
    for name, path in files.items():
        arg = arg.replace("{" + name + "}", str(path))
    return arg
