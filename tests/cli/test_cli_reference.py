"""docs/cli.md is the commands' own --help: it is regenerated here and must match (`make docs`)."""

from __future__ import annotations

from tests.conftest import REPO_ROOT
from tools.cli_reference import render


def test_the_cli_reference_is_what_the_commands_say() -> None:
    written = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == render(), "docs/cli.md is out of date with the commands: run `make docs`"


def test_the_cli_reference_covers_every_command() -> None:
    reference = render()
    for command in ("run", "detect", "build", "fleet deploy", "fleet init", "agent"):
        assert f"## `edge-sdk {command}`" in reference
