"""The in-process CLI runner the fleet CLI tests share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from edge_sdk.cli import main as cli_main

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def edge_sdk(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run `edge-sdk ARGS...` in-process through `main`; returns (exit code, stdout, stderr)."""

    def run(*args: object) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            cli_main.main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run
