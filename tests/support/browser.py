"""Debian's chromium, headless, driven by Playwright's Python API (no browser download): the browser
tests' `chromium` fixture and `chromium_browser`. Screenshots go to build/test-artifacts/."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"


@pytest.fixture(scope="module")
def chromium() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("Debian's chromium is not installed: make system-deps (apt-get install chromium)")
    return CHROMIUM


@contextmanager
def chromium_browser(executable: str) -> Iterator[Any]:
    """A headless chromium (Playwright's Browser), closed afterwards."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is in the test extra")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield browser
        finally:
            browser.close()
