"""Validation problems and values as words, for the fleet's wire messages (manifests, protocol documents).

A device answers a refused document with one line: every problem's key path and what was wrong,
names joined with commas, JSON's null/true/false, long values shortened.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError


def describe_validation_error(exc: ValidationError, document: Any = None, limit: int = 10) -> str:
    """One line naming every problem (up to `limit`): the key path, what was wrong, what came (shortened)."""
    errors = exc.errors()
    problems = []
    for error in errors[:limit]:
        key = ".".join(str(part) for part in _document_path(tuple(error["loc"]), document))
        message = error["msg"]
        if error["type"] == "missing":
            message = "required key is missing"
        elif error["type"] == "extra_forbidden":
            message = "unknown key"
        elif not isinstance(error.get("input"), dict | list):
            message = f"{message}, got {_json_scalar(error.get('input'))}"
        problems.append(f"key '{key}': {message}" if key else message)
    if len(errors) > limit:
        problems.append(f"and {len(errors) - limit} more problems")
    return "; ".join(problems)


def _document_path(loc: tuple[Any, ...], document: Any) -> tuple[Any, ...]:
    """pydantic's error location without the parts that are not keys of the document (union tags)."""
    if document is None:
        return loc
    path: tuple[Any, ...] = ()
    node = document
    for index, part in enumerate(loc):
        if isinstance(node, dict) and part == node.get("type") and index != len(loc) - 1:
            continue  # the tag of a union keyed on `type:`
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        ):
            node = node[part]
        elif index != len(loc) - 1:
            continue
        path += (part,)
    return path


def names_text(names: list[str], limit: int = 5) -> str:
    """Names as words: 'a, b, c', the first `limit` and a count past them."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def short_text(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_scalar(value: object) -> str:
    """A scalar of a JSON document as JSON writes it (null, true, false), else as `short_text` does."""
    return json.dumps(value) if value is None or isinstance(value, bool) else short_text(value)
