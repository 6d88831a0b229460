"""Pipeline files: loading, path resolution, and errors that name the file, the line and the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.sinks.jsonl import JsonlSinkSpec
from edge_sdk.sinks.stdout import StdoutSinkSpec
from edge_sdk.sinks.video import VideoSinkSpec
from edge_sdk.sources.frame_limit import FrameLimit
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.video_file import VideoFileSource

# Line numbers matter: tests below point at them.
VALID = """\
name: front-door
model:
  path: models/detector.onnx
sources:
  - uri: clips/door.mp4
    max_frames: 10
postprocess:
  type: ssd
  labels: [person]
sinks:
  - type: stdout
  - type: jsonl
    path: out/results.jsonl
  - type: video
    path: /var/tmp/annotated.mp4
"""


def write_pipeline(folder: Path, text: str, name: str = "pipeline.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = write_pipeline(tmp_path / "jobs", text)
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    return path, str(caught.value)


def test_load_pipeline_when_file_is_valid_resolves_paths_against_the_yaml_folder(tmp_path: Path) -> None:
    # given a pipeline file in a sub-folder with relative model, source and sink paths
    folder = tmp_path / "jobs"
    path = write_pipeline(folder, VALID)

    # when
    config = load_pipeline(path)

    # then
    assert config.name == "front-door", "the name is read as written"
    assert config.model.path == folder / "models" / "detector.onnx", "the model path starts from the YAML's folder"
    assert config.base_dir == folder, "base_dir is the folder of the pipeline file"
    stdout, jsonl, video = config.sinks
    assert isinstance(stdout, StdoutSinkSpec), "sinks keep their order and type"
    assert isinstance(jsonl, JsonlSinkSpec) and jsonl.path == folder / "out" / "results.jsonl", (
        "a relative sink path starts from the YAML's folder"
    )
    assert isinstance(video, VideoSinkSpec) and video.path == Path("/var/tmp/annotated.mp4"), (
        "an absolute sink path is kept as written"
    )
    assert config.sources[0].max_frames == 10, "source options are read"
    limited = create_source(config.sources[0], config.base_dir)
    assert isinstance(limited, FrameLimit) and limited.limit == 10, "max_frames wraps the source in a limit"
    source = limited.inner
    assert isinstance(source, VideoFileSource) and source.path == folder / "clips" / "door.mp4", (
        "a relative source path starts from the YAML's folder"
    )


def test_load_pipeline_when_given_a_relative_path_still_resolves_against_the_yaml_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the working directory is the parent of the pipeline's folder
    write_pipeline(tmp_path / "jobs", VALID)
    monkeypatch.chdir(tmp_path)

    # when
    config = load_pipeline(Path("jobs/pipeline.yaml"))

    # then
    assert config.model.path == tmp_path / "jobs" / "models" / "detector.onnx", (
        "paths become absolute, so the run does not depend on the working directory"
    )


def test_load_pipeline_when_paths_start_with_tilde_expands_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    text = VALID.replace("path: models/detector.onnx", "path: ~/models/detector.onnx").replace(
        "path: out/results.jsonl", "path: ~/out/results.jsonl"
    )
    path = write_pipeline(tmp_path / "jobs", text)

    # when
    config = load_pipeline(path)

    # then
    assert config.model.path == home / "models" / "detector.onnx", "~ in the model path means the home folder"
    assert config.sinks[1].path == home / "out" / "results.jsonl", "~ in a sink path means the home folder"  # type: ignore[union-attr]


def test_load_pipeline_when_a_top_level_key_is_unknown_names_file_line_and_key(tmp_path: Path) -> None:
    # given
    text = VALID + "colour: red\n"

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:16:"), "the error points at the file and the line of the unknown key"
    assert "'colour'" in message and "unknown key" in message, "the error names the key and says it is unknown"


def test_load_pipeline_when_a_key_inside_the_second_sink_is_unknown_names_its_path(tmp_path: Path) -> None:
    # given
    text = VALID.replace("    path: out/results.jsonl\n", "    path: out/results.jsonl\n    flush: true\n")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:14:"), "the error points at the line of the unknown key"
    assert "'sinks.1.flush'" in message and "unknown key" in message, "the key is named with its list index"


def test_load_pipeline_when_a_value_has_the_wrong_type_names_key_and_value(tmp_path: Path) -> None:
    # given
    text = VALID.replace("max_frames: 10", 'max_frames: "ten"')

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:6:"), "the error points at the line of the bad value"
    assert "'sources.0.max_frames'" in message, "the error names the key"
    assert "integer" in message and "'ten'" in message, "the error says what was expected and what came"


def test_load_pipeline_when_a_required_key_is_missing_names_it(tmp_path: Path) -> None:
    # given
    text = VALID.replace("postprocess:\n  type: ssd\n  labels: [person]\n", "")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert re.match(rf"{re.escape(str(path))}:\d+:", message), "the error names the file and a line"
    assert "'postprocess'" in message and "missing" in message, "the error names the missing key"


def test_load_pipeline_when_a_sink_type_is_unknown_lists_the_known_types(tmp_path: Path) -> None:
    # given
    text = VALID.replace("type: stdout", "type: kafka")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:11:"), "the error points at the line of the bad type"
    assert "'sinks.0.type'" in message and "'kafka'" in message, "the error names the key and the value"
    for known in ("jsonl", "stdout", "video"):
        assert known in message, f"the error lists the known sink type '{known}'"


def test_load_pipeline_when_the_postprocess_type_is_unknown_lists_the_known_types(tmp_path: Path) -> None:
    # given
    text = VALID.replace("type: ssd", "type: detr")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:8:"), "the error points at the line of the bad type"
    assert "'postprocess.type'" in message and "'detr'" in message, "the error names the key and the value"
    for known in ("ssd", "classification"):
        assert known in message, f"the error lists the known post-processor '{known}'"


def test_load_pipeline_when_yaml_is_malformed_points_at_the_broken_line(tmp_path: Path) -> None:
    # given an unclosed flow sequence on line 9
    text = VALID.replace("labels: [person]", "labels: [person")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:9:"), "the error points at where the unclosed '[' starts"
    assert "malformed YAML" in message, "the error says the YAML itself is broken"


def test_load_pipeline_when_sources_is_empty_says_one_is_needed(tmp_path: Path) -> None:
    # given
    text = VALID.replace("sources:\n  - uri: clips/door.mp4\n    max_frames: 10\n", "sources: []\n")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:4:"), "the error points at the sources key"
    assert "'sources'" in message and "at least 1" in message, "the error says a pipeline needs a source"


def test_load_pipeline_when_file_does_not_exist_raises_config_error_naming_it(tmp_path: Path) -> None:
    # given
    missing = tmp_path / "nope.yaml"

    # when
    with pytest.raises(ConfigError) as caught:
        load_pipeline(missing)

    # then
    assert str(missing) in str(caught.value) and "not found" in str(caught.value), "the error names the missing file"


def test_load_pipeline_when_file_is_empty_says_a_mapping_is_expected(tmp_path: Path) -> None:
    # given / when
    path, message = load_error(tmp_path, "# nothing here yet\n")

    # then
    assert str(path) in message and "mapping" in message, "an empty file is reported, not a stack trace"


def test_load_pipeline_when_uint8_input_gets_a_mean_says_it_needs_float32(tmp_path: Path) -> None:
    # given a uint8 model input (the default) with a normalisation that only float inputs can take
    text = VALID.replace("sources:\n", "preprocess:\n  mean: [0.5, 0.5, 0.5]\nsources:\n")

    # when
    path, message = load_error(tmp_path, text)

    # then
    assert message.startswith(f"{path}:5:"), "the error points at the mean line"
    assert "'preprocess.mean'" in message and "float32" in message, "the error says mean needs dtype float32"


def test_load_pipeline_when_an_mqtt_sink_names_certificate_files_resolves_them_against_the_yaml_folder(
    tmp_path: Path,
) -> None:
    # given relative certificate and password paths in the broker block
    text = VALID.replace(
        "  - type: stdout\n",
        "  - type: mqtt\n"
        "    broker: {host: broker.local, username: cam, password_file: secrets/pw,\n"
        "             tls: {ca_file: certs/ca.pem, cert_file: certs/c.pem, key_file: certs/c.key}}\n",
    )
    path = write_pipeline(tmp_path / "jobs", text)
    # when
    broker = load_pipeline(path).sinks[0].broker  # type: ignore[union-attr]
    # then
    jobs = tmp_path / "jobs"
    assert broker.password_file == jobs / "secrets" / "pw", "secret files are found next to the pipeline file"
    assert (broker.tls.ca_file, broker.tls.cert_file, broker.tls.key_file) == (
        jobs / "certs" / "ca.pem",
        jobs / "certs" / "c.pem",
        jobs / "certs" / "c.key",
    ), "certificates are found next to the pipeline file"


def test_load_pipeline_when_ssd_decode_is_sdk_points_the_decoder_at_the_pipelines_model(tmp_path: Path) -> None:
    # given the SDK decode asked for, without saying which model holds the anchors
    folder = tmp_path / "jobs"
    path = write_pipeline(folder, VALID.replace("  labels: [person]\n", "  labels: [person]\n  decode: sdk\n"))

    # when
    config = load_pipeline(path)

    # then
    assert config.postprocess.type == "ssd" and config.postprocess.decode == "sdk"
    assert config.postprocess.decode_model == folder / "models" / "detector.onnx", (
        "the decoder reads the anchors and NMS settings from the model the pipeline runs, rebased like it"
    )
    assert load_pipeline(write_pipeline(folder, VALID, "graph.yaml")).postprocess.decode_model is None, (
        "decode: graph needs no model"
    )
