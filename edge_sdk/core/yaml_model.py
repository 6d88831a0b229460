"""Load a YAML file into a pydantic model, with errors that name the file, the line and the key.

Every YAML file the SDK reads goes through `read_yaml_text` and `parse_yaml`, which bound what a
hand-written or hostile file can cost: its size, its nesting, what its aliases expand to and the
length of its numbers.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from edge_sdk.core.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)
KeyPath = tuple[str | int, ...]

# Pipelines, profiles and agent configs are a few KiB; 1 MiB leaves room for long device lists.
MAX_YAML_BYTES = 1024 * 1024
# Values in a document as its aliases expand them (what pydantic and the error lookup walk): ample
# for any config, and far below what a billion-laughs file asks for.
MAX_YAML_NODES = 100_000
# Collections inside collections, aliases expanded; keeps every walk of the tree far from Python's
# recursion limit.
MAX_YAML_DEPTH = 64
# Characters in one int or float scalar (a 64-bit integer has 20 digits).
MAX_NUMBER_CHARS = 100

_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def load_yaml_model(path: Path, model: type[ModelT], context: dict[str, Any] | None = None) -> ModelT:
    """Parse `path` and validate it as `model`; any problem becomes one `ConfigError` line."""
    return parse_yaml_model(read_yaml_text(path), model, source=str(path), context=context)


def read_yaml_text(path: Path) -> str:
    """The text of `path`: at most `MAX_YAML_BYTES` of UTF-8, else one `ConfigError` line."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if len(raw) > MAX_YAML_BYTES:
        size = path.stat().st_size if path.is_file() else 0
        got = f"{size} bytes" if size > MAX_YAML_BYTES else f"more than {MAX_YAML_BYTES} bytes"
        raise ConfigError(f"{path}: file too large: expected at most {MAX_YAML_BYTES} bytes (1 MiB), got {got}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}:{line}: expected UTF-8 text, got byte 0x{raw[exc.start]:02x} at offset {exc.start} "
            "(a binary file?)"
        ) from None


def parse_yaml(text: str, source: str = "<string>") -> tuple[Any, yaml.Node | None]:
    """The data of a one-document YAML text and its node tree (for key lines), within the limits above."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{source}: too large: expected at most {MAX_YAML_BYTES} characters, got {len(text)}")
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # checks the characters first
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _LimitError as exc:
        raise ConfigError(f"{source}:{exc.line}: {exc.message}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(
            f"{source}:{line}: expected YAML text, got the control character #x{exc.character:04x} (a binary file?)"
        ) from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_describe_yaml_error(exc, source)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: malformed YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, node


def parse_yaml_model(
    text: str, model: type[ModelT], source: str = "<string>", context: dict[str, Any] | None = None
) -> ModelT:
    """Parse `text` (named `source` in errors) and validate it as `model`."""
    data, node = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(_describe_first_error(exc, source, key_lines(node))) from None


class _LimitError(Exception):
    """A document past one of the limits, at `mark` (a PyYAML mark, pure or libyaml)."""

    def __init__(self, message: str, mark: Any):
        super().__init__(message)
        self.message = message
        self.line: int | str = mark.line + 1 if mark is not None else "?"


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts the nodes and depth that aliases expand to, before any data is built.

    Aliases share nodes, so composing stays small; the size and height of every finished node are
    kept, an alias adds those of its anchor, and the document is refused as soon as it would
    expand past a limit.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self._shape: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes expanded, height)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            shape = self._shape.get(id(node))
            if shape is None:
                raise _LimitError(f"alias '*{event.anchor}' refers to a node that contains it", event.start_mark)
            self._count(shape[0], self._depth + shape[1], event.start_mark, f"alias '*{event.anchor}'")
            return node
        self._depth += 1
        self._count(1, self._depth, event.start_mark, "")
        node = super().compose_node(parent, index)
        self._depth -= 1
        if node is None:
            return None
        if isinstance(node, yaml.ScalarNode):
            if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
                raise _LimitError(
                    f"expected a number of at most {MAX_NUMBER_CHARS} characters, got {len(node.value)}",
                    node.start_mark,
                )
            children: list[yaml.Node] = []
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = node.value
        shapes = [self._shape[id(child)] for child in children]
        self._shape[id(node)] = (1 + sum(s[0] for s in shapes), 1 + max((s[1] for s in shapes), default=0))
        return node

    def _count(self, nodes: int, depth: int, mark: Any, alias: str) -> None:
        """Add `nodes` values reaching `depth` (from `alias`, if one); refuse the document past a limit."""
        self._nodes += nodes
        by_alias = f" ({alias} expands to {nodes})" if alias else ""
        if self._nodes > MAX_YAML_NODES:
            raise _LimitError(f"expected at most {MAX_YAML_NODES} values, aliases expanded, got more{by_alias}", mark)
        if depth > MAX_YAML_DEPTH:
            raise _LimitError(f"expected collections nested at most {MAX_YAML_DEPTH} deep, got {depth}{by_alias}", mark)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A key written twice is refused: YAML's 'last one wins' silently drops what a hand-edited
        file meant (`ring_slots: 8` ... `ring_slots: 16`). Keys a merge (`<<: *base`) brings in may
        still be overridden."""
        first: dict[str, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in first:
                    raise _LimitError(
                        f"key '{key_node.value[:40]}' appears twice (first on line {first[key_node.value]})",
                        key_node.start_mark,
                    )
                first[key_node.value] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # e.g. a date like 2024-13-45
            value = f" {node.value[:40]!r}" if isinstance(node, yaml.ScalarNode) else ""
            raise _LimitError(f"cannot read value{value}: {exc}", node.start_mark) from None


def _describe_yaml_error(exc: yaml.MarkedYAMLError, source: str) -> str:
    """Point at where the broken construct starts (an unclosed '[' or quote), not where parsing gave up."""
    problem_line = exc.problem_mark.line + 1 if exc.problem_mark else None
    # For flow collections and quoted scalars the context mark is where the construct opened; for
    # block errors it is the enclosing mapping, which is less precise than the problem mark.
    if exc.context_mark is not None and exc.context and ("flow" in exc.context or "quoted" in exc.context):
        context_line = exc.context_mark.line + 1
        return f"{source}:{context_line}: malformed YAML: {exc.problem} ({exc.context} from line {context_line})"
    if exc.problem == "second occurrence" and exc.context and exc.context_mark is not None:  # a duplicate anchor
        first = exc.context.split(";")[0]
        return f"{source}:{problem_line}: malformed YAML: {first} (first on line {exc.context_mark.line + 1})"
    return f"{source}:{problem_line or '?'}: malformed YAML: {exc.problem}"


def _describe_first_error(exc: ValidationError, source: str, lines: dict[KeyPath, int]) -> str:
    errors = exc.errors()
    # An unknown key is usually a misspelt one, which also shows up as a missing key: report the
    # unknown key first, with the missing one as a suggestion.
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    more = len(errors) - 1
    suffix = f" (+{more} more problem{'s' if more > 1 else ''})" if more else ""
    return describe_error(error, source, lines, errors) + suffix


def describe_error(error: Any, source: str, lines: dict[KeyPath, int], siblings: Sequence[Any] = ()) -> str:
    """One pydantic error of a YAML document as `FILE:LINE: key 'a.b': message, got VALUE`; `siblings`
    (the other errors) let an unknown key suggest the missing one it is probably a misspelling of."""
    raw_loc = tuple(error["loc"])
    if error["type"] == "union_tag_invalid":  # name the tag key (e.g. 'backend'), not just the union
        raw_loc += (str(error.get("ctx", {}).get("discriminator", "")).strip("'"),)
    loc = _document_path(raw_loc, lines)
    line = next((lines[loc[:depth]] for depth in range(len(loc), -1, -1) if loc[:depth] in lines), None)
    key = ".".join(str(part) for part in loc) or "(top level)"
    where = f"{source}:{line}" if line else source
    if error["type"] == "extra_forbidden":
        missing = [str(e["loc"][-1]) for e in siblings if e["type"] == "missing" and e["loc"][:-1] == error["loc"][:-1]]
        close = difflib.get_close_matches(str(error["loc"][-1]), missing, n=1)
        message = f"unknown key (did you mean '{close[0]}'?)" if close else "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif isinstance(error.get("input"), dict | list):
        message = error["msg"]
    else:
        message = f"{error['msg']}, got {_scalar(error.get('input'))}"
    return f"{where}: key '{key}': {message}"


def _scalar(value: object) -> str:
    """A YAML value as the document would write it (null, true, 'text'), cut at 80 characters."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    if isinstance(value, str):
        return f"'{value[:77]}...'" if len(value) > 80 else f"'{value}'"
    return str(value)[:80]


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


def key_lines(node: yaml.Node | None) -> dict[KeyPath, int]:
    """Map each key path in the document to its 1-based line number."""
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _add_key_lines(node, (), lines)
    return lines


def _add_key_lines(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = path + (str(key_node.value),)
            _add_key_lines(value_node, key_path, lines)
            lines[key_path] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _add_key_lines(item, path + (index,), lines)
