"""The contract every registered kind of a seam keeps (sinks, post-processors): one example of each kind
here, and each builds what the runtime needs from its spec alone. A kind added to a union without an
example fails the first test, so none goes untested."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import BaseModel, Field, TypeAdapter

from edge_sdk.core.errors import SinkError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.kinds import kinds_of
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.postprocess import POSTPROCESSORS, Postprocessor, PostprocessSpec
from edge_sdk.sinks import SINKS, Sink, SinkSpec
from edge_sdk.sinks.agent import OUTBOX_ENV, ResultsOutbox

from .conftest import DEMO_MODEL

SINK_EXAMPLES: dict[str, dict[str, Any]] = {
    "jsonl": {"type": "jsonl", "path": "results.jsonl"},
    "stdout": {"type": "stdout"},
    "video": {"type": "video", "path": "annotated.mp4"},
    "mqtt": {"type": "mqtt", "broker": {"host": "127.0.0.1", "port": 1}},
    "callable": {"type": "callable", "function": "tests.pipeline.crashing_sinks:sleep_30ms"},
    "agent": {"type": "agent"},
    "preview": {"type": "preview", "port": 0},
}
"""A spec of every sink kind; paths are made absolute in a temporary folder."""

POSTPROCESS_EXAMPLES: dict[str, dict[str, Any]] = {
    "ssd": {"type": "ssd"},
    "classification": {"type": "classification", "output": "logits"},
    "yolo": {"type": "yolo"},
    "callable": {"type": "callable", "function": "tests.postprocess.custom_functions:brightest_quadrant"},
}


def test_every_registered_kind_has_an_example_here() -> None:
    assert set(SINKS) == set(SINK_EXAMPLES), "add an example of each new sink kind to SINK_EXAMPLES"
    assert set(POSTPROCESSORS) == set(POSTPROCESS_EXAMPLES), "add an example of each new post-processor kind"


def sink_spec(kind: str, folder: Path) -> Any:
    data = dict(SINK_EXAMPLES[kind])
    if "path" in data:
        data["path"] = str(folder / data["path"])
    return TypeAdapter(SinkSpec).validate_python(data)


@pytest.mark.parametrize("kind", sorted(SINK_EXAMPLES))
def test_sink_kind_is_chosen_by_its_type_and_builds_a_sink(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an agent sink is built inside a pipeline the device agent started, which hands it the outbox
    outbox = tmp_path / "outbox.sqlite"
    ResultsOutbox(outbox, create=True).close()
    monkeypatch.setenv(OUTBOX_ENV, str(outbox))
    spec = sink_spec(kind, tmp_path)
    assert type(spec) is SINKS[kind]
    assert isinstance(spec.build("contract"), Sink)
    # a restarted output stage gets settings of the same kind
    assert type(spec.after_restart(1)) is SINKS[kind]


@pytest.mark.parametrize("kind", ["jsonl", "stdout", "video", "callable", "preview"])
def test_sink_kinds_that_need_nothing_outside_take_a_result(kind: str, tmp_path: Path) -> None:
    sink = sink_spec(kind, tmp_path).build("contract")
    result = Result(FrameMeta("cam", 0, 0.0, 64, 48), (Detection(1, 2, 30, 40, 0.9, 0, "person"),))
    sink.open()
    try:
        sink.write(result, np.zeros((48, 64, 3), np.uint8))
    finally:
        sink.close()


def test_sink_checks_say_before_a_start_when_a_kind_cannot_work_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OUTBOX_ENV, raising=False)
    for kind in SINK_EXAMPLES:
        spec = sink_spec(kind, tmp_path)
        if kind == "agent":
            with pytest.raises(SinkError, match="agent"):
                spec.check()
        else:
            spec.check()


def test_file_sinks_continue_after_a_restart_without_overwriting(tmp_path: Path) -> None:
    jsonl, video = sink_spec("jsonl", tmp_path), sink_spec("video", tmp_path)
    assert jsonl.after_restart(2).append is True
    assert video.after_restart(2).path == tmp_path / "annotated.part2.mp4"


@pytest.mark.parametrize("kind", sorted(POSTPROCESS_EXAMPLES))
def test_postprocessor_kind_is_chosen_by_its_type_and_builds_a_postprocessor(kind: str) -> None:
    data = dict(POSTPROCESS_EXAMPLES[kind])
    if kind == "ssd":
        data["decode_model"] = str(DEMO_MODEL)
    spec = TypeAdapter(PostprocessSpec).validate_python(data)
    assert type(spec) is POSTPROCESSORS[kind]
    processor = spec.build()
    assert isinstance(processor, Postprocessor)
    assert all(isinstance(name, str) for name in processor.required_outputs())


def test_a_postprocessor_built_from_its_spec_reads_outputs() -> None:
    spec = TypeAdapter(PostprocessSpec).validate_python(POSTPROCESS_EXAMPLES["classification"])
    result = spec.build()(
        {"logits": np.array([0.1, 0.7, 0.2], np.float32)}, FrameMeta("cam", 3, 0.0, 64, 48), InputGeometry(8, 8, 1, 1)
    )
    assert [c.class_id for c in result.classifications] == [1]


class Untyped(BaseModel):
    type: str = Field("untyped")


class SecondJsonl(BaseModel):
    type: Literal["jsonl"]


def test_kinds_of_refuses_a_member_without_a_type_literal_and_a_name_declared_twice() -> None:
    from edge_sdk.sinks.jsonl import JsonlSinkSpec

    with pytest.raises(TypeError, match="Untyped has no `type: Literal"):
        kinds_of(JsonlSinkSpec | Untyped)
    with pytest.raises(TypeError, match="kind 'jsonl' is declared twice"):
        kinds_of(JsonlSinkSpec | SecondJsonl)


def test_every_fleet_command_the_protocol_names_has_a_handler_on_the_device_and_no_other() -> None:
    from edge_sdk.fleet.device.commands import COMMANDS
    from edge_sdk.fleet.wire.protocol import COMMAND_NAMES

    assert sorted(COMMANDS) == sorted(COMMAND_NAMES), (
        "a command is declared in wire/protocol.py and handled in device/commands.py"
    )
