"""The user's own sink: a function named by 'package.module:function', called with (result, image)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.results import FrameMeta, Result
from edge_sdk.sinks import SinkFanout, create_sink
from edge_sdk.sinks.callable import CallableSink, CallableSinkSpec

RECEIVED: list[tuple[Result, np.ndarray]] = []
NOT_A_FUNCTION = 42


def record(result: Result, image: np.ndarray) -> None:
    """The user function the tests point the sink at."""
    RECEIVED.append((result, image))


class Recorder:
    @staticmethod
    def record(result: Result, image: np.ndarray) -> None:
        RECEIVED.append((result, image))


@pytest.fixture(autouse=True)
def _empty_record() -> None:
    RECEIVED.clear()


def make_result(index: int) -> Result:
    return Result(frame=FrameMeta(source="cam", index=index, timestamp=0.0, width=8, height=6))


def test_callable_sink_when_written_calls_the_function_with_result_and_image() -> None:
    # given
    sink = create_sink(CallableSinkSpec(type="callable", function=f"{__name__}:record"))
    image = np.zeros((6, 8, 3), dtype=np.uint8)

    # when
    fanout = SinkFanout([sink])
    fanout.open()
    for index in range(2):
        fanout.write(make_result(index), image)
    fanout.close()

    # then
    assert [result.frame.index for result, _ in RECEIVED] == [0, 1], "the function gets every result, in order"
    assert all(received is image for _, received in RECEIVED), "the function gets the frame's pixels"
    assert not fanout.failures, "a working function is not reported"


def test_callable_sink_when_the_attribute_is_dotted_resolves_it() -> None:
    # given / when
    sink = CallableSink(f"{__name__}:Recorder.record")
    sink.write(make_result(5), np.zeros((6, 8, 3), dtype=np.uint8))

    # then
    assert [result.frame.index for result, _ in RECEIVED] == [5], "'module:Class.method' paths work"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("no_such_package.sinks:record", "no module named 'no_such_package.sinks'"),
        (f"{__name__}:missing", "has no 'missing'"),
        (f"{__name__}:NOT_A_FUNCTION", "expected a callable, got int"),
    ],
)
def test_callable_sink_when_the_path_does_not_lead_to_a_callable_raises_config_error(path: str, expected: str) -> None:
    # given / when
    with pytest.raises(ConfigError) as caught:
        create_sink(CallableSinkSpec(type="callable", function=path))

    # then
    assert path in str(caught.value), "the error names the configured path"
    assert expected in str(caught.value), "the error says what is wrong with it"


def test_callable_sink_spec_when_the_path_has_no_colon_is_rejected() -> None:
    # given / when
    with pytest.raises(ValidationError) as caught:
        CallableSinkSpec(type="callable", function="package.module.function")

    # then
    assert "expected 'package.module:function'" in str(caught.value), "the error shows the expected form"
