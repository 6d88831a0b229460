"""User post-processors named by import path (functions in tests/postprocess/custom_functions.py)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.postprocess import PostprocessSpec, build_postprocessor
from edge_sdk.postprocess.custom import CallablePostprocessor, CallableSpec

from . import custom_functions

FRAME = FrameMeta(source="cam", index=5, timestamp=1.5, width=640, height=480)
HELPERS = "tests.postprocess.custom_functions"


def callable_post(function: str, **spec: object) -> CallablePostprocessor:
    return CallablePostprocessor(CallableSpec(type="callable", function=function, **spec))


def test_callable_postprocessor_when_the_function_returns_a_result_passes_it_through() -> None:
    # given
    post = callable_post(f"{HELPERS}:brightest_quadrant")

    # when
    result = post({"quadrants": np.array([0.1, 0.7, 0.2, 0.0])}, FRAME, InputGeometry.identity(640, 480))

    # then
    assert result.frame == FRAME, "the function's Result is returned as it is"
    assert [(c.class_id, c.label) for c in result.classifications] == [(1, "quadrant1")], (
        "the function saw the outputs it was given"
    )


def test_callable_postprocessor_when_the_function_returns_detections_wraps_them_in_a_result() -> None:
    # given a letterboxed frame (scale 0.5, 40 rows of padding) and a function that maps its box back
    post = callable_post(f"{HELPERS}:box_from_output")
    geometry = InputGeometry(320, 320, 0.5, 0.5, 0, 40)

    # when
    result = post({"box": np.array([10.0, 50.0, 110.0, 90.0, 0.8])}, FRAME, geometry)

    # then
    assert result == Result(frame=FRAME, detections=(Detection(20.0, 20.0, 220.0, 100.0, 0.8, 0, "thing"),)), (
        "a list of Detection becomes this frame's Result, and the function received the frame's geometry"
    )


def test_callable_postprocessor_when_the_attribute_is_dotted_resolves_it() -> None:
    # given / when
    result = callable_post(f"{HELPERS}:Decoders.nothing")({}, FRAME, InputGeometry.identity(640, 480))

    # then
    assert result == Result(frame=FRAME), "an attribute path like Class.method is followed; [] is an empty result"


def test_callable_postprocessor_when_the_function_returns_something_else_raises_naming_it() -> None:
    # given
    post = callable_post(f"{HELPERS}:count_of_outputs")

    # when
    with pytest.raises(ConfigError) as caught:
        post({"a": np.zeros(1)}, FRAME, InputGeometry.identity(640, 480))

    # then
    message = str(caught.value)
    assert f"'{HELPERS}:count_of_outputs'" in message, "the error names the function"
    assert "expected a Result or a list of Detection, got int (1)" in message, "the error says what came back"


def test_callable_postprocessor_when_the_list_holds_something_else_raises_naming_it() -> None:
    # given
    post = callable_post(f"{HELPERS}:dict_detections")

    # when
    with pytest.raises(ConfigError) as caught:
        post({}, FRAME, InputGeometry.identity(640, 480))

    # then
    assert "got a list holding dict" in str(caught.value), "the error names the type inside the list"


def test_callable_postprocessor_when_the_module_is_missing_raises_config_error_at_construction() -> None:
    # given / when
    with pytest.raises(ConfigError) as caught:
        callable_post("my_company.no_such_module:decode")

    # then
    assert "no module named 'my_company.no_such_module'" in str(caught.value), "the error names the missing module"


def test_callable_postprocessor_when_the_attribute_is_missing_raises_config_error_at_construction() -> None:
    # given / when
    with pytest.raises(ConfigError) as caught:
        callable_post(f"{HELPERS}:decode_everything")

    # then
    assert f"module '{HELPERS}' has no 'decode_everything'" in str(caught.value), "the error names the attribute"


def test_callable_postprocessor_when_the_attribute_is_not_callable_raises_config_error() -> None:
    # given / when
    with pytest.raises(ConfigError) as caught:
        callable_post(f"{HELPERS}:NOT_A_FUNCTION")

    # then
    assert "expected a callable, got int (42)" in str(caught.value), "the error says what the attribute is"


def test_callable_postprocessor_when_built_resolves_the_function_once() -> None:
    # given / when
    post = callable_post(f"{HELPERS}:brightest_quadrant")

    # then
    assert post.function is custom_functions.brightest_quadrant, "the function is imported when the pipeline starts"


def test_callable_spec_when_the_path_has_no_colon_is_rejected() -> None:
    # given / when
    with pytest.raises(ValidationError) as caught:
        CallableSpec(type="callable", function="tests.postprocess.custom_functions.brightest_quadrant")

    # then
    assert "expected 'package.module:function'" in str(caught.value), "the error shows the form a path takes"


def test_callable_check_outputs_when_a_declared_output_is_missing_raises_model_error() -> None:
    # given
    post = build_postprocessor(
        TypeAdapter(PostprocessSpec).validate_python(
            {"type": "callable", "function": f"{HELPERS}:brightest_quadrant", "outputs": ["quadrants"]}
        )
    )

    # when
    with pytest.raises(ModelError) as caught:
        post.check_outputs([TensorMeta("logits", np.dtype(np.float32), ("N", 4))])

    # then
    assert isinstance(post, CallablePostprocessor), "type: callable builds the callable post-processor"
    assert "quadrants" in str(caught.value), "the error names the output the function declared"


def test_callable_postprocessor_when_the_module_fails_to_import_says_why() -> None:
    # given a module that exists but imports a package that does not
    path = "tests.postprocess.broken_functions:decode"

    # when
    with pytest.raises(ConfigError) as caught:
        callable_post(path)

    # then
    message = str(caught.value)
    assert "importing 'tests.postprocess.broken_functions' failed" in message, "the user's module is found"
    assert "edge_sdk_test_missing_dependency" in message, "the error names what that module could not import"
