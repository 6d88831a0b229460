"""Load a YAML file into a pydantic model, with errors that name the file, the line and the key."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from edge_sdk.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)
KeyPath = tuple[str | int, ...]


def load_yaml_model(path: Path, model: type[ModelT], context: dict[str, Any] | None = None) -> ModelT:
    """Parse `path` and validate it as `model`; any problem becomes one `ConfigError` line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_yaml_model(text, model, source=str(path), context=context)


def parse_yaml_model(
    text: str, model: type[ModelT], source: str = "<string>", context: dict[str, Any] | None = None
) -> ModelT:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_describe_yaml_error(exc, source)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: malformed YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(_describe_first_error(exc, source, _key_lines(node))) from None


def _describe_yaml_error(exc: yaml.MarkedYAMLError, source: str) -> str:
    """Point at where the broken construct starts (an unclosed '[' or quote), not where parsing gave up."""
    problem_line = exc.problem_mark.line + 1 if exc.problem_mark else None
    # For flow collections and quoted scalars the context mark is where the construct opened; for
    # block errors it is the enclosing mapping, which is less precise than the problem mark.
    if exc.context_mark is not None and exc.context and ("flow" in exc.context or "quoted" in exc.context):
        context_line = exc.context_mark.line + 1
        return f"{source}:{context_line}: malformed YAML: {exc.problem} ({exc.context} from line {context_line})"
    return f"{source}:{problem_line or '?'}: malformed YAML: {exc.problem}"


def _describe_first_error(exc: ValidationError, source: str, lines: dict[KeyPath, int]) -> str:
    errors = exc.errors()
    # An unknown key is usually a misspelt one, which also shows up as a missing key: report the
    # unknown key first, with the missing one as a suggestion.
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    raw_loc = tuple(error["loc"])
    if error["type"] == "union_tag_invalid":  # name the tag key (e.g. 'backend'), not just the union
        raw_loc += (str(error.get("ctx", {}).get("discriminator", "")).strip("'"),)
    loc = _document_path(raw_loc, lines)
    line = next((lines[loc[:depth]] for depth in range(len(loc), -1, -1) if loc[:depth] in lines), None)
    key = ".".join(str(part) for part in loc) or "(top level)"
    where = f"{source}:{line}" if line else source
    if error["type"] == "extra_forbidden":
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == error["loc"][:-1]]
        close = difflib.get_close_matches(str(error["loc"][-1]), missing, n=1)
        message = f"unknown key (did you mean '{close[0]}'?)" if close else "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif isinstance(error.get("input"), dict | list):
        message = error["msg"]
    else:
        message = f"{error['msg']}, got {error.get('input')!r}"
    more = len(errors) - 1
    suffix = f" (+{more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: key '{key}': {message}{suffix}"


def _document_path(loc: tuple[Any, ...], lines: dict[KeyPath, int]) -> KeyPath:
    """Turn pydantic's error location into a path of YAML keys.

    pydantic puts union tags (e.g. a backend name) and validator names into the location; those
    have no key in the document, so a part that is not in the document is dropped unless it is
    the last one (a missing key is named even though the document lacks it).
    """
    path: KeyPath = ()
    for index, part in enumerate(loc):
        candidate = path + (part,)
        if candidate in lines or index == len(loc) - 1:
            path = candidate
    return path


def _key_lines(node: yaml.Node | None, path: KeyPath = ()) -> dict[KeyPath, int]:
    """Map each key path in the document to its 1-based line number."""
    lines: dict[KeyPath, int] = {}
    if node is None:
        return lines
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = path + (str(key_node.value),)
            lines.update(_key_lines(value_node, key_path))
            lines[key_path] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines.update(_key_lines(item, path + (index,)))
    return lines
