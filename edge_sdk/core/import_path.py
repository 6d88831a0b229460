"""User code named by 'package.module:attribute' in a pipeline file: checked, imported, resolved."""

from __future__ import annotations

import importlib
import reprlib
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator

from edge_sdk.core.errors import ConfigError


def _check_import_path(value: str) -> str:
    module, colon, attribute = value.partition(":")
    if not (colon and _dotted_name(module) and _dotted_name(attribute)):
        raise ValueError(f"expected 'package.module:function', got '{value}'")
    return value


ImportPath = Annotated[str, AfterValidator(_check_import_path)]
"""A pydantic field type for 'package.module:attribute' (the attribute may be dotted)."""


def resolve_callable(path: str, what: str) -> Callable[..., Any]:
    """Import `path` and check it is callable; every failure is a ConfigError starting with `what`."""
    module_name, colon, attribute = path.partition(":")
    if not (colon and _dotted_name(module_name) and _dotted_name(attribute)):
        raise ConfigError(f"{what}: expected 'package.module:function', got '{path}'")
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"{what} '{path}': no module named '{module_name}' (is it installed, or on PYTHONPATH?)"
            ) from None
        raise ConfigError(f"{what} '{path}': importing '{module_name}' failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(f"{what} '{path}': importing '{module_name}' raised {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"{what} '{path}': module '{module_name}' has no '{attribute}'") from None
    if not callable(target):
        raise ConfigError(f"{what} '{path}': expected a callable, got {type(target).__name__} ({reprlib.repr(target)})")
    return target


def _dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))
