"""A sink written by the user: a function named by its import path, called as function(result, image)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.import_path import ImportPath, resolve_callable
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase

SinkFunction = Callable[[Result, np.ndarray], object]


class CallableSinkSpec(SinkSpecBase):
    type: Literal["callable"] = Field(description="Call a Python function of your own with each result.")
    function: ImportPath = Field(
        description="'package.module:function' (the attribute may be dotted), importable where the pipeline runs; "
        "called as function(result, image) with the Result and the frame's BGR pixels (do not keep or modify them).",
    )

    def build(self, pipeline_name: str) -> CallableSink:
        return CallableSink(self.function)


class CallableSink(Sink):
    """Resolves the function once, when built, so a wrong path fails before the first frame."""

    writes_updates = True

    def __init__(self, function: str):
        self.function_path = function
        self.name = f"callable:{function}"
        self.function = resolve_sink_function(function)

    def write(self, result: Result, image: np.ndarray) -> None:
        self.function(result, image)


def resolve_sink_function(path: str) -> SinkFunction:
    """Import 'package.module:attribute' and check it is callable; every failure is a ConfigError naming the path."""
    function: SinkFunction = resolve_callable(path, "sink function")
    return function
