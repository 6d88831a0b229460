"""`--format table|tsv|json`: how every command that lists rows prints them, in one place.

`table` (the default) is rich's table for people; `tsv` is a header line of field names, then one
line per row, cells separated by tabs; `json` is one document on stdout (an array of objects keyed
by the same field names, or the command's own document where it has one). In tsv and json, stdout
holds only the data: a command's other lines (notes, totals) go to stderr. Off a terminal the
console neither wraps nor cuts (context.py), so a piped table is whole too.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

OutputFormat = Literal["table", "tsv", "json"]
FORMATS: tuple[OutputFormat, ...] = ("table", "tsv", "json")

_Command = TypeVar("_Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class Styled:
    """A cell shown in `style` in the table format; tsv and json get its plain text."""

    text: str
    style: str


Cell = str | int | float | bool | None | Styled | Sequence[str]
"""A table cell: None prints empty (null in json), a bool as yes/no, a list of strings joined with ', '
(a list in json)."""


@dataclass(frozen=True)
class Column:
    """A column: its header in the table format and its field name in tsv and json."""

    header: str
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", re.sub(r"[^0-9a-z]+", "_", self.header.lower()).strip("_"))
        if not self.key:
            raise ValueError(f"column '{self.header}' needs a field name (key=...)")


def format_option(*, json_alias: bool = False) -> Callable[[_Command], _Command]:
    """Add `--format table|tsv|json` to a command, which then receives `output_format`.

    `json_alias` keeps a command's older `--json` flag as another way to say `--format json`.
    """

    def decorate(command: _Command) -> _Command:
        @functools.wraps(command)
        def with_format(*args: Any, output_format: OutputFormat, as_json: bool = False, **kwargs: Any) -> Any:
            if as_json and output_format not in ("table", "json"):
                raise click.UsageError(f"--json is --format json; it cannot go with --format {output_format}")
            return command(*args, output_format="json" if as_json else output_format, **kwargs)

        decorated: Callable[..., Any] = with_format
        if json_alias:
            decorated = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(decorated)
        decorated = click.option(
            "--format",
            "output_format",
            type=click.Choice(FORMATS),
            default="table",
            show_default=True,
            help="table for people; tsv (a header of field names, tab-separated rows) or json for scripts.",
        )(decorated)
        return cast(_Command, decorated)

    return decorate


@dataclass
class Listing:
    """Prints a command's tables (and its other lines) in the chosen format."""

    output_format: OutputFormat
    console: Console
    err_console: Console
    _tables: int = field(default=0, init=False)

    def table(
        self,
        columns: Sequence[str | Column],
        rows: Iterable[Sequence[Cell]],
        *,
        title: str | None = None,
        plain: bool = False,
    ) -> None:
        """One table. `plain` draws it without borders (columns lined up by spaces) in the table format."""
        cols = [c if isinstance(c, Column) else Column(c) for c in columns]
        data = [list(row) for row in rows]
        for row in data:
            if len(row) != len(cols):
                raise ValueError(f"expected {len(cols)} cells a row ({', '.join(c.key for c in cols)}), got {len(row)}")
        if self.output_format == "json":
            if self._tables:
                raise RuntimeError("--format json prints one document: a command with several tables builds its own")
            objects = [{c.key: _json_value(cell) for c, cell in zip(cols, row, strict=True)} for row in data]
            click.echo(json.dumps(objects, indent=2))
        elif self.output_format == "tsv":
            if self._tables:
                click.echo("")
            click.echo("\t".join(c.key for c in cols))
            for row in data:
                click.echo("\t".join(_tsv_value(cell) for cell in row))
        else:
            self.console.print(_rich_table(cols, data, title, plain))
        self._tables += 1

    def line(self, text: str | Text) -> None:
        """A line that is not a table row (rich markup allowed): stdout in the table format, stderr otherwise."""
        (self.console if self.output_format == "table" else self.err_console).print(text)


def in_words(value: object) -> str:
    """A value as a person reads it, not as Python writes it: a list as 'a, b', a mapping as
    'a: 1, b: 2', None as 'not set'."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ", ".join(f"{key}: {in_words(item)}" for key, item in value.items()) or "none"
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return ", ".join(in_words(item) for item in items) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _rich_table(columns: list[Column], rows: list[list[Cell]], title: str | None, plain: bool) -> Table:
    table = Table(title=title, box=None, pad_edge=False, show_edge=False) if plain else Table(title=title)
    for column in columns:
        table.add_column(column.header)
    for row in rows:
        table.add_row(*(_rich_cell(cell) for cell in row))
    return table


def _rich_cell(cell: Cell) -> Text:
    if isinstance(cell, Styled):
        return Text(cell.text, style=cell.style)
    return Text(_text(cell))


def _text(cell: Cell) -> str:
    if isinstance(cell, Styled):
        return cell.text
    if cell is None:
        return ""
    if isinstance(cell, bool):
        return "yes" if cell else "no"
    if isinstance(cell, str | int | float):
        return str(cell)
    return ", ".join(cell)


def _tsv_value(cell: Cell) -> str:
    return re.sub(r"[\t\r\n]+", " ", _text(cell))


def _json_value(cell: Cell) -> Any:
    if isinstance(cell, Styled):
        return cell.text
    if cell is None or isinstance(cell, str | int | float | bool):
        return cell
    return list(cell)
