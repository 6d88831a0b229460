"""A post-processor written by the user: a function named by its import path in the pipeline file."""

from __future__ import annotations

import importlib
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from edge_sdk.errors import ConfigError
from edge_sdk.pipeline.geometry import InputGeometry
from edge_sdk.results import Detection, FrameMeta, Result

from .base import Postprocessor

PostprocessFunction = Callable[[Mapping[str, np.ndarray], FrameMeta, InputGeometry], object]


class CallableSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["callable"] = Field(description="Call a Python function of your own on each frame's outputs.")
    function: str = Field(
        description="'package.module:function', importable where the pipeline runs; called as "
        "function(outputs, frame, geometry) and returning a Result or a list of Detection.",
    )
    outputs: list[str] = Field(
        default_factory=list, description="Model outputs the function reads; checked against the model at start."
    )

    @field_validator("function")
    @classmethod
    def _import_path(cls, value: str) -> str:
        module, colon, attribute = value.partition(":")
        if not (colon and _dotted_name(module) and _dotted_name(attribute)):
            raise ValueError(f"expected 'package.module:function', got '{value}'")
        return value


class CallablePostprocessor(Postprocessor):
    """Resolves the function once, when built; checks what it returns on every frame."""

    def __init__(self, spec: CallableSpec):
        self.spec = spec
        self.function = resolve_function(spec.function)

    def required_outputs(self) -> Sequence[str]:
        return list(self.spec.outputs)

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
        returned = self.function(outputs, frame, geometry)
        if isinstance(returned, Result):
            return returned
        if isinstance(returned, list | tuple):
            strays = [item for item in returned if not isinstance(item, Detection)]
            if not strays:
                return Result(frame=frame, detections=tuple(returned))
            raise ConfigError(
                f"postprocess function '{self.spec.function}': expected a Result or a list of Detection, "
                f"got a {type(returned).__name__} holding {type(strays[0]).__name__} ({reprlib.repr(strays[0])})"
            )
        raise ConfigError(
            f"postprocess function '{self.spec.function}': expected a Result or a list of Detection, "
            f"got {type(returned).__name__} ({reprlib.repr(returned)})"
        )


def resolve_function(path: str) -> PostprocessFunction:
    """Import 'package.module:attribute' (the attribute may be dotted) and check it is callable."""
    module_name, _, attribute = path.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"postprocess.function '{path}': no module named '{module_name}' (is it installed, or on PYTHONPATH?)"
            ) from None
        raise ConfigError(f"postprocess.function '{path}': importing '{module_name}' failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(
            f"postprocess.function '{path}': importing '{module_name}' raised {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"postprocess.function '{path}': module '{module_name}' has no '{attribute}'") from None
    if not callable(target):
        raise ConfigError(
            f"postprocess.function '{path}': expected a callable, got {type(target).__name__} ({reprlib.repr(target)})"
        )
    function: PostprocessFunction = target
    return function


def _dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))
