"""A sink written by the user: a function named by its import path, called as function(result, image)."""

from __future__ import annotations

import importlib
import reprlib
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from edge_sdk.errors import ConfigError
from edge_sdk.results import Result

from .base import Sink

SinkFunction = Callable[[Result, np.ndarray], object]


class CallableSinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["callable"] = Field(description="Call a Python function of your own with each result.")
    function: str = Field(
        description="'package.module:function' (the attribute may be dotted), importable where the pipeline runs; "
        "called as function(result, image) with the Result and the frame's BGR pixels (do not keep or modify them).",
    )

    @field_validator("function")
    @classmethod
    def _import_path(cls, value: str) -> str:
        module, colon, attribute = value.partition(":")
        if not (colon and _dotted_name(module) and _dotted_name(attribute)):
            raise ValueError(f"expected 'package.module:function', got '{value}'")
        return value


class CallableSink(Sink):
    """Resolves the function once, when built, so a wrong path fails before the first frame."""

    def __init__(self, function: str):
        self.function_path = function
        self.name = f"callable:{function}"
        self.function = resolve_sink_function(function)

    def write(self, result: Result, image: np.ndarray) -> None:
        self.function(result, image)


def resolve_sink_function(path: str) -> SinkFunction:
    """Import 'package.module:attribute' and check it is callable; every failure is a ConfigError naming the path."""
    module_name, colon, attribute = path.partition(":")
    if not (colon and _dotted_name(module_name) and _dotted_name(attribute)):
        raise ConfigError(f"sink function: expected 'package.module:function', got '{path}'")
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"sink function '{path}': no module named '{module_name}' (is it installed, or on PYTHONPATH?)"
            ) from None
        raise ConfigError(f"sink function '{path}': importing '{module_name}' failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(
            f"sink function '{path}': importing '{module_name}' raised {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"sink function '{path}': module '{module_name}' has no '{attribute}'") from None
    if not callable(target):
        raise ConfigError(
            f"sink function '{path}': expected a callable, got {type(target).__name__} ({reprlib.repr(target)})"
        )
    function: SinkFunction = target
    return function


def _dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))
