"""One declaration per kind: a seam's kinds (sinks, post-processors) are the members of one
discriminated union of pydantic specs, each with a `type: Literal[...]` field; the lookup by name and
the list of names come from that union, never from a second table."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel


def kinds_of(union: Any) -> dict[str, type[BaseModel]]:
    """The members of `union` (a `A | B | ...` of pydantic models, or an `Annotated` one) by the value
    of their `type` literal; TypeError when a member has none or two members share one."""
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    members = typing.get_args(union) or (union,)
    kinds: dict[str, type[BaseModel]] = {}
    for member in members:
        field = member.model_fields.get("type")
        names = typing.get_args(field.annotation) if field is not None else ()
        if typing.get_origin(field.annotation if field is not None else None) is not typing.Literal or not names:
            raise TypeError(f"{member.__name__} has no `type: Literal[...]` field to be chosen by")
        for name in names:
            if name in kinds:
                raise TypeError(f"kind '{name}' is declared twice: {kinds[name].__name__} and {member.__name__}")
            kinds[name] = member
    return kinds
