"""A source's options from the two places a pipeline file may give them, the URI query
(`synthetic://?frames=50`) and the `options:` mapping, validated against its scheme's model.

Every problem is a pydantic error located at what holds it: `uri` for the query, `options.KEY` for
the mapping. Raised from SourceSpec's validator, the YAML loader turns that into the file and line.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from .options import SourceOptions
from .schemes import KNOWN_SCHEMES, SCHEMES_BY_NAME
from .uri import SourceUri, UnparsableUri, split_source_uri

_USERINFO = re.compile(r"//[^/?#]*@")
UNKNOWN_OPTION = "unknown_source_option"
"""The error type of an option the scheme does not have (not pydantic's extra_forbidden, which the YAML
loader words as a bare 'unknown key': this one lists the options there are)."""


def validated_options(uri: str, given: Any) -> SourceOptions | None:
    """The options of `uri`'s scheme: those in its query and those `given` (a mapping, an options
    model or None) together, defaults for the rest; None for a scheme that takes none.

    ValidationError for an unknown scheme, an unknown or malformed option, or an option in both places.
    """
    try:
        parts = split_source_uri(uri)
    except UnparsableUri as error:
        shown = _USERINFO.sub("//***@", uri)  # no urlsplit to redact with: it is what failed
        raise _invalid([_problem("uri_parsing", f"cannot parse the URI ({error.reason})", ("uri",), shown)]) from None
    scheme = SCHEMES_BY_NAME.get(parts.scheme)
    if scheme is None:
        message = f"unknown source scheme (known: {KNOWN_SCHEMES})"
        raise _invalid([_problem("source_scheme", message, ("uri",), f"{parts.scheme}://")])
    model = scheme.options
    if model is None:
        if given is not None:
            raise _invalid([_problem("source_options", f"{parts.scheme}:// takes no options", ("options",), given)])
        return None
    in_query, problems = _from_query(model, parts, keep_others=scheme.device_query)
    in_mapping, mapping_problems = _from_mapping(model, given, parts.scheme)
    problems += mapping_problems
    for key in sorted(in_query.keys() & in_mapping.keys()):
        message = f"also given in the URI query ({key}={in_query[key]}): give each option in one place"
        problems.append(_problem("source_option_twice", message, ("options", key), in_mapping[key]))
    if problems:
        raise _invalid(problems)
    return model.model_validate({**in_query, **in_mapping})


def _from_query(
    model: type[SourceOptions], parts: SourceUri, keep_others: bool
) -> tuple[dict[str, Any], list[InitErrorDetails]]:
    """The options set in the query, typed; a key that is not an option is the device's when `keep_others`."""
    items = [(key, value) for key, value in parts.query_items() if not keep_others or key in model.model_fields]
    written: dict[str, str] = {}
    problems: list[InitErrorDetails] = []
    for key, value in items:
        if key in written:
            message = f"query option '{key}' is given twice"
            problems.append(_problem("source_option_twice", message, ("uri",), f"{key}={written[key]}&{key}={value}"))
        written[key] = value
    try:
        options = model.model_validate_strings(written)
    except ValidationError as error:
        for detail in error.errors():
            key = str(detail["loc"][0]) if detail["loc"] else ""
            shown = f"{key}={written[key]}" if key in written else parts.query
            if detail["type"] == "extra_forbidden":
                kind, message = (
                    UNKNOWN_OPTION,
                    f"unknown query option '{key}' {_known_options(model, key, parts.scheme)}",
                )
            else:
                kind, message = detail["type"], f"query option '{key}': {detail['msg']}"
            problems.append(_problem(kind, message, ("uri",), shown))
        return {}, problems
    return _set_fields(options), problems


def _from_mapping(model: type[SourceOptions], given: Any, scheme: str) -> tuple[dict[str, Any], list[InitErrorDetails]]:
    """The options set under `options:`, typed; as strict as the rest of the file."""
    if given is None:
        return {}, []
    if isinstance(given, model):
        return _set_fields(given), []
    if isinstance(given, SourceOptions):
        message = f"expected {model.__name__} for {scheme}://, got {type(given).__name__}"
        return {}, [_problem("source_options", message, ("options",), given.model_dump())]
    try:
        return _set_fields(model.model_validate(given)), []
    except ValidationError as error:
        return {}, [_mapping_problem(detail, model, scheme) for detail in error.errors()]


def _mapping_problem(detail: ErrorDetails, model: type[SourceOptions], scheme: str) -> InitErrorDetails:
    loc = ("options", *detail["loc"])
    if detail["type"] == "extra_forbidden":
        message = f"unknown option {_known_options(model, str(detail['loc'][-1]), scheme)}"
        return _problem(UNKNOWN_OPTION, message, loc, detail["input"])
    return _problem(detail["type"], detail["msg"], loc, detail["input"])


def _known_options(model: type[SourceOptions], key: str, scheme: str) -> str:
    known = list(model.model_fields)
    close = difflib.get_close_matches(key, known, n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    return f"of {scheme}:// ({guess}known: {', '.join(known)})"


def _set_fields(options: SourceOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in options.model_fields_set}


def _problem(kind: str, message: str, loc: tuple[str | int, ...], given: Any) -> InitErrorDetails:
    # The message is final text: without a context, PydanticCustomError leaves its braces alone.
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=given)


def _invalid(problems: list[InitErrorDetails]) -> ValidationError:
    return ValidationError.from_exception_data("SourceSpec", problems)
