"""A source's options: in the URI query or under `options:`, checked when the pipeline file loads, with
the file and the line of what is wrong (the `uri:` line for the query, the option's own line for the
mapping), and described in the JSON Schema. Pipelines are real files loaded by `load_pipeline`, as the
CLI loads them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from edge_sdk.core.errors import ConfigError, PermanentSourceError
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline, source_display_name
from edge_sdk.sources.options import RtspOptions, SyntheticOptions
from edge_sdk.sources.reconnecting import ReconnectingSource
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.rtsp import RtspSource
from edge_sdk.sources.schemes import OPTIONS_MODELS, SCHEMES_BY_NAME
from edge_sdk.sources.spec import SourceSpec
from edge_sdk.sources.synthetic import PanZoomSource

from ..conftest import ASTRONAUT, REPO_ROOT

HEAD = [
    "name: options",  # 1
    "model: {path: models/detector.onnx}",  # 2
    "postprocess: {type: ssd, labels: [person]}",  # 3
    "sources:",  # 4
]
FIRST_SOURCE_LINE = len(HEAD) + 1


def write_pipeline(tmp_path: Path, *source_lines: str) -> Path:
    """A pipeline whose `sources:` are `source_lines`; the first of them is line 5."""
    path = tmp_path / "jobs" / "pipeline.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*HEAD, *source_lines]) + "\n", encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    message = str(caught.value)
    assert "\n" not in message, f"one line: {message!r}"
    return message


def flow(options: dict[str, Any]) -> str:
    """`options` as a YAML flow mapping, e.g. {frames: 7, realtime: true}."""
    return "{" + ", ".join(f"{key}: {json.dumps(value)}" for key, value in options.items()) + "}"


# --- one contract for every declared scheme ---------------------------------------------------------------

EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "file": ("clips/door.mp4", {}),
    "images": ("images://frames/lobby", {}),
    "gst": ("gst://videotestsrc ! videoconvert ! appsink", {}),
    "synthetic": (
        "synthetic://",
        {"image": "still.png", "frames": 7, "size": "32x24", "fps": 12.5, "realtime": True},
    ),
    "rtsp": ("rtsp://cam.local/live", {"transport": "udp", "open_timeout_ms": 2000, "read_timeout_ms": 900}),
    "rtsps": ("rtsps://cam.local/live", {"transport": "udp", "open_timeout_ms": 2000, "read_timeout_ms": 900}),
    "v4l2": ("v4l2:///dev/video0", {"width": 640, "height": 480, "fps": 15.0}),
    "csi": ("csi://1", {"width": 1280, "height": 720, "fps": 60.0, "flip": 2}),
}
"""Per scheme: a URI without a query, and a value for every option it has (none at its default)."""


def in_query(uri: str, options: dict[str, Any]) -> str:
    text = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in options.items()}
    return uri + "?" + "&".join(f"{key}={value}" for key, value in text.items())


@pytest.mark.parametrize("name", sorted(SCHEMES_BY_NAME))
def test_declared_scheme_when_loaded_takes_its_options_in_either_form_or_none(tmp_path: Path, name: str) -> None:
    # given the scheme's example (every declared scheme needs one)
    assert name in EXAMPLES, f"scheme '{name}' is declared but has no example in EXAMPLES: add one"
    uri, options = EXAMPLES[name]
    model = SCHEMES_BY_NAME[name].options

    if model is None:
        # then a scheme without options loads bare and refuses an options mapping at that line
        assert load_pipeline(write_pipeline(tmp_path, f"  - uri: {uri}")).sources[0].options is None
        path = write_pipeline(tmp_path, f"  - uri: {uri}", "    options: {}")
        message = load_error(path)
        assert message.startswith(f"{path}:{FIRST_SOURCE_LINE + 1}: key 'sources.0.options': "), message
        assert f"{name}:// takes no options" in message, message
        return

    # when the same options are written in the query of one source and as a mapping in another
    assert set(options) == set(model.model_fields), f"the example of {name} sets every option of {model.__name__}"
    path = write_pipeline(
        tmp_path,
        f"  - uri: {in_query(uri, options)}",
        "    name: query",
        f"  - uri: {uri}",
        "    name: mapping",
        f"    options: {flow(options)}",
    )
    query_form, mapping_form = load_pipeline(path).sources

    # then both are the scheme's model holding those values, none left at its default
    assert isinstance(query_form.options, model) and isinstance(mapping_form.options, model)
    assert query_form.options == mapping_form.options, "the query and the mapping mean the same"
    assert query_form.options.model_dump() == options, "every value written is the value held"
    assert query_form.options != model(), "the example moves every option off its default"

    # and an option the scheme does not have is refused in the mapping, naming the ones it has
    path = write_pipeline(tmp_path, f"  - uri: {uri}", "    options:", "      zoom: 2")
    message = load_error(path)
    assert message.startswith(f"{path}:{FIRST_SOURCE_LINE + 2}: key 'sources.0.options.zoom': "), message
    assert f"unknown option of {name}://" in message and ", ".join(model.model_fields) in message, message


@pytest.mark.parametrize("name", sorted(SCHEMES_BY_NAME))
def test_declared_scheme_when_made_from_a_loaded_file_has_the_name_the_config_derives(
    tmp_path: Path, name: str
) -> None:
    # given the example with its options in the query
    uri, options = EXAMPLES[name]
    source_uri = in_query(uri, options) if options else uri
    spec = load_pipeline(write_pipeline(tmp_path, f"  - uri: {source_uri}")).sources[0]

    # when its factory makes it (GStreamer schemes need an OpenCV built with it)
    try:
        source = create_source(spec, tmp_path)
    except PermanentSourceError as error:
        assert "GStreamer" in str(error), f"only a missing GStreamer may stop {name}: {error}"
        return

    # then its name is the one the duplicate-name check used when the file loaded
    assert source.name == source_display_name(spec), f"{name}: the source and the config agree on the name"


def test_options_schema_when_generated_lists_every_options_model() -> None:
    # when
    schema = PipelineConfig.model_json_schema()

    # then the options field offers each declared model, described, and the checked-in file says the same
    options = schema["$defs"]["SourceSpec"]["properties"]["options"]
    offered = {entry["$ref"].rsplit("/", 1)[-1] for entry in options["anyOf"] if "$ref" in entry}
    assert offered == {model.__name__ for model in OPTIONS_MODELS}, "every options model, and only those"
    for model in OPTIONS_MODELS:
        definition = schema["$defs"][model.__name__]
        assert definition["additionalProperties"] is False, f"{model.__name__} refuses unknown keys"
        assert all(field.get("description") for field in definition["properties"].values()), model.__name__
    assert schema["$defs"]["SyntheticOptions"]["properties"]["frames"]["maximum"] == 10**12, "bounds are in it"
    checked_in = json.loads((REPO_ROOT / "pipelines" / "pipeline.schema.json").read_text(encoding="utf-8"))
    assert checked_in["$defs"]["SourceSpec"]["properties"]["options"] == options, "regenerate the schema file"


# --- the two forms ------------------------------------------------------------------------------------------


def test_load_pipeline_when_synthetic_options_are_in_the_query_or_the_mapping_gives_the_same_frames(
    tmp_path: Path,
) -> None:
    # given a still next to the pipeline file, named relative to it, in both forms (the mapping in block style)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(ASTRONAUT, jobs / "still.jpg")
    path = write_pipeline(
        tmp_path,
        "  - uri: synthetic://?image=still.jpg&frames=5&size=64x48",
        "    name: query",
        "  - uri: synthetic://",
        "    name: mapping",
        "    options:",
        "      image: still.jpg",
        "      frames: 5",
        "      size: 64x48",
    )
    config = load_pipeline(path)

    # when both are made and read to the end
    frames = {}
    for spec in config.sources:
        source = create_source(spec, config.base_dir)
        assert isinstance(source, PanZoomSource) and source.image_path == jobs / "still.jpg", spec.name
        with source:
            frames[spec.name] = [frame.image for frame in source]

    # then they give the same five 64x48 pictures of the still
    assert [image.shape for image in frames["mapping"]] == [(48, 64, 3)] * 5, "frames: 5 and size: 64x48"
    assert all(np.array_equal(a, b) for a, b in zip(frames["query"], frames["mapping"], strict=True))


def test_load_pipeline_when_rtsp_query_has_camera_parameters_keeps_them_and_takes_the_sdks(tmp_path: Path) -> None:
    # given the SDK's read timeout in the query between the camera's own parameters, and UDP in the mapping
    uri = "rtsp://cam.local/cam/realmonitor?channel=1&read_timeout_ms=900&subtype=0"
    path = write_pipeline(tmp_path, f"  - uri: {uri}", "    options: {transport: udp}")

    # when
    spec = load_pipeline(path).sources[0]
    source = create_source(spec, tmp_path)

    # then
    assert spec.options == RtspOptions(transport="udp", read_timeout_ms=900), "both places are read"
    assert isinstance(source, ReconnectingSource) and isinstance(source.inner, RtspSource)
    assert source.inner.url == "rtsp://cam.local/cam/realmonitor?channel=1&subtype=0", "the camera gets its own"
    assert (source.inner.transport, source.inner.read_timeout_ms) == ("udp", 900)


def test_load_pipeline_when_rtsp_mapping_has_a_camera_parameter_refuses_it(tmp_path: Path) -> None:
    # given: the mapping holds the SDK's options only; the camera's belong in its URL
    path = write_pipeline(tmp_path, "  - uri: rtsp://cam.local/live", "    options: {channel: 1}")
    # when
    message = load_error(path)
    # then
    assert message.startswith(f"{path}:{FIRST_SOURCE_LINE + 1}: key 'sources.0.options.channel': "), message
    assert "transport, open_timeout_ms, read_timeout_ms" in message, message


def test_load_pipeline_when_an_option_is_in_both_places_points_at_the_mapping_and_names_the_query(
    tmp_path: Path,
) -> None:
    # given
    path = write_pipeline(
        tmp_path, "  - uri: synthetic://?frames=50&size=320x240", "    options:", "      fps: 10", "      frames: 60"
    )
    # when
    message = load_error(path)
    # then
    assert message.startswith(f"{path}:{FIRST_SOURCE_LINE + 3}: key 'sources.0.options.frames': "), message
    assert "also given in the URI query (frames=50)" in message and "one place" in message, message


def test_load_pipeline_when_a_query_option_repeats_refuses_it(tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, "  - uri: synthetic://?frames=5&size=8x8&frames=6")
    message = load_error(path)
    assert message.startswith(f"{path}:{FIRST_SOURCE_LINE}: key 'sources.0.uri': "), message
    assert "'frames' is given twice" in message and "frames=5&frames=6" in message, message


# --- bad values: one line with the file, the line and the key ----------------------------------------------


@pytest.mark.parametrize(
    ("source_lines", "line", "key", "fragments"),
    [
        pytest.param(
            ["  - uri: synthetic://?frames=ten"], 0, "uri", ["query option 'frames'", "'frames=ten'"], id="query"
        ),
        pytest.param(
            ["  - uri: synthetic://", "    options:", "      size: 320x240", "      frames: ten"],
            3,
            "options.frames",
            ["valid integer", "'ten'"],
            id="mapping",
        ),
        pytest.param(
            ["  - uri: synthetic://", '    options: {frames: "50"}'],
            1,
            "options.frames",
            ["valid integer", "'50'"],
            id="mapping-is-strict-about-quoted-numbers",
        ),
        pytest.param(
            ["  - uri: synthetic://", "    options: {size: 60000x60000}"],
            1,
            "options.size",
            ["at most 16384"],
            id="mapping-size-too-large",
        ),
        pytest.param(
            ["  - uri: csi://0", "    options:", "      flip: 9"],
            2,
            "options.flip",
            ["less than or equal to 7"],
            id="csi",
        ),
        pytest.param(
            ["  - uri: rtsp://cam.local/live", "    options: {transport: quic}"],
            1,
            "options.transport",
            ["'tcp' or 'udp'"],
            id="rtsp",
        ),
        pytest.param(
            ["  - uri: '0'", "    options: {fps: 0}"], 1, "options.fps", ["greater than 0"], id="camera-index"
        ),
        pytest.param(
            ["  - uri: synthetic://?colour=red"],
            0,
            "uri",
            ["unknown query option 'colour' of synthetic://", "known: image, frames, size, fps, realtime"],
            id="query-unknown",
        ),
        pytest.param(
            ["  - uri: synthetic://", "    options: {frams: 5}"],
            1,
            "options.frams",
            ["did you mean 'frames'?"],
            id="mapping-misspelt",
        ),
        pytest.param(
            ["  - uri: synthetic://", "    options: [frames, 5]"],
            1,
            "options",
            ["valid dictionary"],
            id="not-a-mapping",
        ),
        pytest.param(
            ["  - uri: ftp://cam.local/clip.mp4"],
            0,
            "uri",
            ["unknown source scheme", "'ftp://'", "csi, file, gst, images, rtsp, rtsps, synthetic, v4l2"],
            id="unknown-scheme",
        ),
        pytest.param(
            ["  - uri: 'rtsp://admin:s3cret@[::1/live'"],
            0,
            "uri",
            ["cannot parse the URI", "'rtsp://***@[::1/live'"],
            id="not-a-uri-password-hidden",
        ),
    ],
)
def test_load_pipeline_when_a_source_option_is_wrong_names_file_line_and_key(
    tmp_path: Path, source_lines: list[str], line: int, key: str, fragments: list[str]
) -> None:
    # given
    path = write_pipeline(tmp_path, *source_lines)
    # when
    message = load_error(path)
    # then
    assert message.startswith(f"{path}:{FIRST_SOURCE_LINE + line}: key 'sources.0.{key}': "), message
    for fragment in fragments:
        assert fragment in message, f"the error says {fragment!r}: {message}"


@pytest.mark.parametrize(
    "uri",
    [
        "synthetic://?size=64",
        "synthetic://?size=axb",
        "synthetic://?size=0x48",
        "synthetic://?size=-5x48",
        "synthetic://?frames=2.5",
        "synthetic://?frames=0",
        "synthetic://?frames=",
        "synthetic://?fps=fast",
        "synthetic://?fps=0",
        "synthetic://?fps=nan",
        "synthetic://?realtime=maybe",
        "rtsp://cam.local/live?transport=quic",
        "rtsp://cam.local/live?read_timeout_ms=0",
        "rtsp://cam.local/live?open_timeout_ms=soon",
        "v4l2:///dev/video0?width=wide",
        "v4l2:///dev/video0?height=0",
        "csi://0?width=wide",
        "csi://0?fps=0",
        "csi://0?flip=9",
        "csi://0?zoom=2",
    ],
)
def test_load_pipeline_when_a_query_option_is_wrong_points_at_the_uri_and_names_the_option(
    tmp_path: Path, uri: str
) -> None:
    # given
    path = write_pipeline(tmp_path, f"  - uri: {uri}")
    # when
    message = load_error(path)
    # then
    option = uri.rsplit("?", 1)[1]
    assert message.startswith(f"{path}:{FIRST_SOURCE_LINE}: key 'sources.0.uri': "), message
    assert f"'{option.split('=')[0]}'" in message and f"'{option}'" in message, f"names {option}: {message}"


# --- in code --------------------------------------------------------------------------------------------------


def test_source_spec_when_given_an_options_model_in_code_checks_it_against_the_scheme() -> None:
    # given the same options as a model, a mapping and a query
    from_model = SourceSpec(uri="synthetic://", options=SyntheticOptions(frames=5, size="64x48"))
    from_mapping = SourceSpec(uri="synthetic://", options={"frames": 5, "size": "64x48"})
    from_query = SourceSpec(uri="synthetic://?frames=5&size=64x48")

    # then they are one source, and another scheme's model is refused at options
    assert from_model.options == from_mapping.options == from_query.options, "three ways to write the same"
    with pytest.raises(ValidationError) as caught:
        SourceSpec(uri="v4l2:///dev/video0", options=SyntheticOptions(frames=5))
    [error] = caught.value.errors()
    assert error["loc"] == ("options",) and "expected V4L2Options for v4l2://" in error["msg"], error
