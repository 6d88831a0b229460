"""A post-processor written by the user: a function named by its import path in the pipeline file."""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.import_path import ImportPath, resolve_callable
from edge_sdk.core.results import Detection, FrameMeta, Result

from .base import Postprocessor, PostprocessSpecBase

PostprocessFunction = Callable[[Mapping[str, np.ndarray], FrameMeta, InputGeometry], object]


class CallableSpec(PostprocessSpecBase):
    type: Literal["callable"] = Field(description="Call a Python function of your own on each frame's outputs.")
    function: ImportPath = Field(
        description="'package.module:function', importable where the pipeline runs; called as "
        "function(outputs, frame, geometry) and returning a Result or a list of Detection.",
    )
    outputs: list[str] = Field(
        default_factory=list, description="Model outputs the function reads; checked against the model at start."
    )

    def build(self) -> CallablePostprocessor:
        return CallablePostprocessor(self)


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
    function: PostprocessFunction = resolve_callable(path, "postprocess.function")
    return function
