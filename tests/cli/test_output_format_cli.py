"""Tables for scripts and people, in-process: piped output is whole, and --format table|tsv|json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from edge_sdk.cli.context import make_console
from edge_sdk.cli.output_format import Listing
from edge_sdk.profiles import ProfileCatalog

from .conftest import Run

PROFILE_FIELDS = ["profile", "backend", "providers", "precisions", "description"]


@pytest.fixture(autouse=True)
def _narrow_terminal_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a shell exports for an 80-column terminal: piped output must not be fitted to it."""
    monkeypatch.setenv("COLUMNS", "80")


def test_profiles_list_when_piped_prints_every_name_and_description_whole_on_one_line(
    edge_sdk: Run, catalog: ProfileCatalog
) -> None:
    # When the table goes to a pipe (the test's capture is not a terminal)
    code, out, err = edge_sdk("profiles", "list")

    # Then each profile is one row holding its whole name and description, nothing cut with an ellipsis
    assert code == 0, err
    assert "…" not in out, f"nothing is truncated:\n{out}"
    for profile in catalog.load_all():
        rows = [line for line in out.splitlines() if f"│ {profile.name} " in line]
        assert len(rows) == 1, f"{profile.name} is one row, not wrapped:\n{out}"
        assert profile.description in rows[0], f"the description is whole: {rows[0]}"


def test_profiles_list_when_format_is_tsv_prints_a_header_of_field_names_and_one_row_per_profile(
    edge_sdk: Run, catalog: ProfileCatalog
) -> None:
    code, out, err = edge_sdk("profiles", "list", "--format", "tsv")

    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split("\t") == PROFILE_FIELDS
    by_name = {row.split("\t")[0]: row.split("\t") for row in rows}
    assert sorted(by_name) == sorted(catalog.names()), out
    x86 = by_name["x86-cpu"]
    assert len(x86) == len(PROFILE_FIELDS) and x86[3] == "fp32, int8"
    assert x86[4] == catalog.load("x86-cpu").description


def test_profiles_list_when_format_is_json_prints_one_document_keyed_by_the_same_fields(
    edge_sdk: Run, catalog: ProfileCatalog
) -> None:
    code, out, err = edge_sdk("profiles", "list", "--format", "json")

    assert code == 0, err
    profiles = {p["profile"]: p for p in json.loads(out)}
    assert sorted(profiles) == sorted(catalog.names())
    assert list(profiles["x86-cpu"]) == PROFILE_FIELDS
    assert profiles["x86-cpu"]["precisions"] == ["fp32", "int8"], "a list stays a list in JSON"


def test_doctor_when_format_is_tsv_keeps_stdout_to_the_tables_and_sends_the_other_lines_to_stderr(
    edge_sdk: Run,
) -> None:
    code, out, err = edge_sdk("doctor", "--format", "tsv")

    assert code == 0, err
    tables = out.split("\n\n")
    assert len(tables) == 2, f"packages, then profiles, separated by a blank line:\n{out}"
    assert tables[0].splitlines()[0].split("\t") == ["package", "for", "version", "install"]
    assert tables[1].splitlines()[0].split("\t") == ["profile", "usable", "problem"]
    assert all("\t" in line for line in out.splitlines() if line), "every stdout line is a TSV row"
    assert "python " in err and "detected profile" in err, "the host lines go to stderr"
    rows = {line.split("\t")[0]: line.split("\t") for line in tables[1].splitlines()[1:]}
    assert rows["x86-cpu"][1] in ("yes", "no")


def test_doctor_when_json_flag_and_format_json_then_the_same_document(edge_sdk: Run) -> None:
    _, by_flag, _ = edge_sdk("doctor", "--json")
    _, by_format, _ = edge_sdk("doctor", "--format", "json")

    assert json.loads(by_flag).keys() == json.loads(by_format).keys() >= {"profiles", "packages"}


def test_a_command_when_json_and_another_format_are_both_given_then_refused_in_one_line(edge_sdk: Run) -> None:
    code, out, err = edge_sdk("doctor", "--json", "--format", "tsv")

    assert code == 2 and out == ""
    assert "--json is --format json" in err and "Traceback" not in err


def test_cache_ls_when_piped_or_tsv_shows_the_whole_digest(
    edge_sdk: Run, tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    # Given a cache with one engine
    cache = tmp_path / "engines"
    code, _, err = edge_sdk("--cache-dir", cache, "build", tiny_models["float_classifier"], "--profile", "x86-cpu")
    assert code == 0, err
    digest = next(d.name for d in cache.iterdir() if re.fullmatch("[0-9a-f]{32}", d.name))

    # When it is listed into a pipe, and as TSV
    _, table, _ = edge_sdk("--cache-dir", cache, "cache", "ls")
    _, tsv, _ = edge_sdk("--cache-dir", cache, "cache", "ls", "--format", "tsv")

    # Then the digest is whole in both (a terminal's table shows its first 12 characters)
    assert digest in table, table
    header, row = tsv.splitlines()
    assert header.split("\t")[0] == "digest" and row.split("\t")[0] == digest
    assert row.split("\t")[-1] == "ok"


def test_console_when_not_a_terminal_prints_a_long_line_and_a_wide_table_without_wrapping(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the console the CLI makes, off a terminal
    console = make_console()
    assert not console.is_terminal
    long_words = " ".join(f"word{i}" for i in range(60))  # ~400 characters of short words

    # When a long line and a table with a long cell are printed
    Listing("table", console, make_console(stderr=True)).line(long_words)
    Listing("table", console, Console(stderr=True)).table(("layer", "op"), [("FeatureExtractor/" + "x" * 200, "Conv")])

    # Then neither wraps nor cuts
    out = capsys.readouterr().out
    assert long_words in out.splitlines(), "the line is one line"
    assert any("FeatureExtractor/" + "x" * 200 in line and "Conv" in line for line in out.splitlines())
