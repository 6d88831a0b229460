"""`edge-sdk compare` and `edge-sdk sensitivity`, run as a user runs them: a real process, output, exit code."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tests.backends.int8_models import labelled_samples, outlier_cnn, save_npz
from tests.cli.test_cli import assert_one_line_error, edge_sdk
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

DIGITS_MODEL = REPO_ROOT / "models" / "digits_cnn.onnx"
DIGITS_CALIBRATION = REPO_ROOT / "models" / "digits_calibration.npz"
DIGITS_HOLDOUT = REPO_ROOT / "models" / "digits_holdout.npz"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "engines"


@pytest.fixture(scope="module")
def outlier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A model with one layer INT8 breaks (see tests/engines/int8_models.py) and labelled samples for it."""
    folder = tmp_path_factory.mktemp("quantization-cli")
    model = outlier_cnn(folder / "outlier_cnn.onnx")
    samples, labels = labelled_samples(model)
    return model, save_npz(folder / "samples.npz", samples, labels)


def test_sensitivity_when_run_prints_the_ranking_and_range_check_and_writes_a_png(
    outlier: tuple[Path, Path], cache: Path, tmp_path: Path
) -> None:
    model, data = outlier
    plot = tmp_path / "out" / "sensitivity.png"
    # when
    done = edge_sdk("sensitivity", model, "--data", data, "--profile", "x86-cpu", "--plot", plot, cache=cache)
    # then
    assert done.returncode == 0, done.stderr
    layers = [line.split("│")[2].strip() for line in done.stdout.splitlines() if line.startswith("│ ")][:3]
    assert layers[0] == "conv_a", f"the broken layer should come first:\n{done.stdout}"
    assert sorted(layers) == ["conv_a", "conv_b", "fc"], f"the table should list every layer:\n{done.stdout}"
    assert "accuracy drop (points)" in done.stdout
    assert "images" in done.stdout and "precision" in done.stdout, "the range check should flag the input range"
    data_bytes = plot.read_bytes()
    assert data_bytes[:8] == b"\x89PNG\r\n\x1a\n", "--plot writes a PNG"
    assert len(data_bytes) > 5_000, f"a labelled bar chart is not a few bytes, got {len(data_bytes)}"
    assert f"plot: {plot}" in done.stdout


def test_sensitivity_when_json_and_top_lists_that_many_layers_most_sensitive_first(
    outlier: tuple[Path, Path], cache: Path
) -> None:
    model, data = outlier
    done = edge_sdk("sensitivity", model, "--data", data, "--profile", "x86-cpu", "--top", "2", "--json", cache=cache)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["layers"][0]["node"] == "conv_a" and len(payload["layers"]) == 2
    assert payload["full_int8"]["metric_drop"] >= 50.0
    assert payload["range_warnings"][0]["tensor"] == "images"
    assert payload["held_out_samples"] == 16 and payload["plot"] is None


def test_compare_when_fp32_engine_meets_the_threshold_exits_0(outlier: tuple[Path, Path], cache: Path) -> None:
    model, data = outlier
    done = edge_sdk("compare", model, f"{model}@x86-cpu:fp32", "--data", data, "--min-cosine", "0.999", cache=cache)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "logits" in done.stdout and "1.000000" in done.stdout, done.stdout
    assert "PASS" in done.stdout and "top-1 agreement: 100.00%" in done.stdout


def test_compare_when_int8_drifts_past_the_threshold_exits_1_then_the_cached_digest_passes_a_looser_one(
    cache: Path,
) -> None:
    # given the shipped digits classifier built in int8 for x86-cpu
    int8 = f"{DIGITS_MODEL}@x86-cpu:int8"
    args = ["--data", DIGITS_HOLDOUT, "--limit", "60"]
    # when: a threshold int8 cannot meet
    strict = edge_sdk(
        "compare", DIGITS_MODEL, int8, "--calib", DIGITS_CALIBRATION, *args, "--min-cosine", "0.999999", cache=cache
    )
    # then
    assert strict.returncode == 1, f"a failed check exits 1: {strict.stdout} {strict.stderr}"
    assert "FAIL output 'logits' cosine similarity" in strict.stdout
    # when: the cached int8 engine by digest, with --json and a threshold it meets
    [digest] = [p.name for p in cache.iterdir() if not p.name.startswith(".")]
    loose = edge_sdk("compare", DIGITS_MODEL, digest[:8], *args, "--min-cosine", "0.99", "--json", cache=cache)
    # then
    assert loose.returncode == 0, loose.stdout + loose.stderr
    payload = json.loads(loose.stdout)
    assert payload["failures"] == [] and payload["samples"] == 60
    assert payload["report"]["task"] == "classification" and payload["report"]["top1_agreement"] >= 0.95
    assert digest[:12] in payload["b"]


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ("{model}@x86-cpu:int4", ["expected a precision in fp32, fp16, int8", "'int4'"]),
        ("{model}@x86-cpu:int8", ["int8 needs calibration data", "--calib"]),
        ("{model}@nope", ["unknown profile 'nope'"]),
        ("beef0000", ["no cache entry starts with 'beef0000'"]),
        ("model.tflite", ["expected MODEL.onnx"]),
    ],
    ids=["bad-precision", "int8-without-calib", "unknown-profile", "unknown-digest", "not-onnx"],
)
def test_compare_when_engine_spec_is_bad_prints_one_line(
    outlier: tuple[Path, Path], cache: Path, spec: str, fragments: list[str]
) -> None:
    model, data = outlier
    done = edge_sdk("compare", model, spec.replace("{model}", str(model)), "--data", data, cache=cache)
    assert_one_line_error(done, *fragments)


LONG_PREFIX = "FeatureExtractor/MobilenetV2/expanded_conv_12/depthwise/BatchNorm/FusedBatchNormV3/"


def test_sensitivity_when_piped_prints_long_layer_names_whole_and_tsv_gives_one_row_per_layer(
    outlier: tuple[Path, Path], cache: Path, tmp_path: Path
) -> None:
    # Given the model with its layers named as a TensorFlow export names them (long paths)
    model, data = outlier
    proto = onnx.load(str(model))
    for node in proto.graph.node:
        node.name = LONG_PREFIX + node.name
    long_named = tmp_path / "long_names.onnx"
    onnx.save(proto, str(long_named))

    # When sensitivity writes its table into a pipe, and as TSV
    table = edge_sdk("sensitivity", long_named, "--data", data, "--profile", "x86-cpu", cache=cache)
    tsv = edge_sdk("sensitivity", long_named, "--data", data, "--profile", "x86-cpu", "--format", "tsv", cache=cache)

    # Then every layer name is whole, on its own row
    assert table.returncode == 0 and tsv.returncode == 0, table.stderr + tsv.stderr
    for layer in ("conv_a", "conv_b", "fc"):
        rows = [line for line in table.stdout.splitlines() if f"{LONG_PREFIX}{layer} " in line]
        assert len(rows) == 1, f"{layer} is one row with its whole name:\n{table.stdout}"
    assert "…" not in table.stdout
    header, *rows = tsv.stdout.split("\n\n")[0].splitlines()
    assert header.split("\t")[:3] == ["rank", "layer", "op"]
    assert rows[0].split("\t")[:3] == ["1", f"{LONG_PREFIX}conv_a", "Conv"], tsv.stdout
    assert "each layer quantised alone" in tsv.stderr, "the lines around the table go to stderr in tsv"
