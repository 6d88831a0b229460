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


PREVIEW_IMAGE = """() => {
  const img = document.querySelector('#previews img');
  if (!img || !img.complete || !img.naturalWidth) return null;
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const context = canvas.getContext('2d');
  context.drawImage(img, 0, 0);
  const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
  let hash = 0, sum = 0;
  for (let i = 0; i < data.length; i += 4) { sum += data[i]; if (i % 244 === 0) hash = (hash * 31 + data[i]) >>> 0; }
  return {width: canvas.width, hash: hash, mean: sum / (data.length / 4)};
}"""
"""The dashboard device page's first preview thumbnail as shown: its width, a hash of its pixels and their
mean red level (null until it has loaded). Used as `page.evaluate(PREVIEW_IMAGE)` or inside
`wait_for_function("() => (PREVIEW_IMAGE)() ...")`: the dashboard's CSP allows functions, not eval."""
