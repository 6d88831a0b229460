"""The preview in a real browser: a multi-process pipeline with the demo detector serves its preview,
and Debian's chromium (headless, driven by Playwright) loads the page, sees frames arrive and change
and the stats move. The screenshot is left in build/test-artifacts/preview.png."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_sdk.core.results import Result
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.frame_ring import segments_of
from edge_sdk.pipeline.metrics import RunSummary
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sinks.preview import PreviewSinkSpec, preview_url, wait_for_preview
from tests.support.browser import ARTIFACTS, chromium_browser
from tests.support.waits import wait_until

from ..conftest import ASTRONAUT

pytestmark = pytest.mark.slow  # a multi-process pipeline and a browser


FRAME_SIGNATURE = """() => {
  const img = document.getElementById("frame");
  if (!img.complete || !img.naturalWidth) return null;
  const canvas = document.createElement("canvas");
  canvas.width = img.naturalWidth;
  canvas.height = img.naturalHeight;
  const context = canvas.getContext("2d");
  context.drawImage(img, 0, 0);
  const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
  let hash = 0;
  for (let i = 0; i < pixels.length; i += 61) hash = (hash * 31 + pixels[i]) >>> 0;
  return [canvas.width, canvas.height, hash];
}"""


CRASH_DIR_ENV = "EDGE_SDK_TEST_PREVIEW_CRASH_DIR"


def crash_when_asked(result: Result, image: np.ndarray) -> None:
    """A callable sink that kills the output stage once, when the test leaves a `crash` file."""
    folder = Path(os.environ[CRASH_DIR_ENV])
    if (folder / "crash").exists() and not (folder / "crashed").exists():
        (folder / "crashed").write_text("crashed")
        os._exit(17)


@dataclass
class Watched:
    url: str
    events: list[StatusEvent]


@contextmanager
def running_pipeline(
    folder: Path, demo_model: Path, profile: DeviceProfile, cache: EngineCache, extra_sinks: str = ""
) -> Iterator[Watched]:
    """The demo detector on an endless 15 FPS camera stand-in, multi-process, with a preview on the
    port `port: 0` picked; stopped (and checked to end cleanly) when the block ends."""
    uri = f"synthetic://?image={ASTRONAUT}&frames=90&size=640x480&fps=15&realtime=true"
    path = folder / "watch.yaml"
    path.write_text(
        f"name: watch\nmodel: {{path: {demo_model}}}\n"
        "preprocess: {resize: [300, 300], color: rgb, layout: nhwc, dtype: uint8}\n"
        f"sources:\n  - {{uri: '{uri}', name: astronaut, loop: true}}\n"
        "postprocess: {type: ssd, score_threshold: 0.5, labels: [person]}\n"
        "sinks:\n  - {type: preview, port: 0, max_fps: 15}\n  - {type: jsonl, path: out/results.jsonl}\n"
        f"{extra_sinks}"
    )
    config = load_pipeline(path)
    spec = config.sinks[0]
    assert isinstance(spec, PreviewSinkSpec) and config.runtime.mode == "processes"
    watched = Watched(preview_url(spec), [])
    stop = threading.Event()
    summaries: list[RunSummary] = []
    runner = threading.Thread(
        target=lambda: summaries.append(
            run_pipeline(config, profile, cache, stop=stop, on_status=watched.events.append)
        )
    )
    runner.start()
    try:
        assert wait_for_preview(watched.url, timeout_s=120), f"the preview at {watched.url} answers"
        yield watched
    finally:
        stop.set()
        runner.join(timeout=60)
    assert not runner.is_alive() and summaries, "the pipeline stops once asked"
    assert summaries[0].frames > 0 and not summaries[0].sink_failures, summaries[0]
    wait_until(lambda: segments_of(os.getpid()) == [], timeout=10, what="the rings' shared memory to go")


@contextmanager
def chromium_page(executable: str, url: str) -> Iterator[Any]:
    with chromium_browser(executable) as browser:
        page = browser.new_page(viewport={"width": 900, "height": 640})
        page.goto(url)
        yield page


def wait_for_a_new_frame(page: Any, timeout_ms: int = 30_000) -> list[int]:
    """Wait until the <img> shows other pixels than now and the frame count has moved (a restarted
    output stage counts from 0 again); the new signature."""
    now = page.evaluate(FRAME_SIGNATURE)
    frames = int(page.inner_text("#frames"))
    page.wait_for_function(
        f"(({FRAME_SIGNATURE})() || [])[2] !== {now[2] if now else -1} "
        f"&& Number(document.getElementById('frames').textContent) !== {frames}",
        timeout=timeout_ms,
    )
    signature: list[int] = page.evaluate(FRAME_SIGNATURE)
    return signature


def test_preview_in_headless_chromium_shows_live_changing_frames_and_moving_stats(
    tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache, chromium: str
) -> None:
    # given the detector on a live camera stand-in, with a preview; when chromium opens the page
    with (
        running_pipeline(tmp_path, demo_model, cpu_profile, engine_cache) as watched,
        chromium_page(chromium, watched.url) as page,
    ):
        # then the page loads, and its <img> shows frames of the camera's size
        assert page.title() == "edge-sdk preview"
        page.wait_for_function("document.getElementById('frame').naturalWidth === 640", timeout=30_000)
        first = page.evaluate(FRAME_SIGNATURE)
        # ... that change, with the stats moving along
        later = wait_for_a_new_frame(page)
        assert first[:2] == later[:2] == [640, 480]
        page.wait_for_function("document.getElementById('fps').textContent !== '-'", timeout=10_000)
        # the FPS shown is the rate the frame count grows at (at most the camera's 15: this box may
        # run the detector slower)
        counted_at, counted = time.monotonic(), int(page.inner_text("#frames"))
        page.wait_for_timeout(3000)
        rate = (int(page.inner_text("#frames")) - counted) / (time.monotonic() - counted_at)
        fps = float(page.inner_text("#fps"))
        assert 0 < fps <= 18 and rate / 2 < fps < rate * 2, f"the page shows {fps} FPS, frames came at {rate:.1f}"
        assert float(page.inner_text("#latency")) > 0
        assert page.inner_text("#source") == "astronaut"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "preview.png"))
    assert (ARTIFACTS / "preview.png").stat().st_size > 10_000


def test_preview_in_headless_chromium_comes_back_by_itself_after_the_output_stage_restarts(
    tmp_path: Path,
    demo_model: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    chromium: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a page watching a pipeline whose output stage will crash once, when asked
    monkeypatch.setenv(CRASH_DIR_ENV, str(tmp_path))
    crash_sink = f"  - {{type: callable, function: '{__name__}:crash_when_asked'}}\n"
    with (
        running_pipeline(tmp_path, demo_model, cpu_profile, engine_cache, crash_sink) as watched,
        chromium_page(chromium, watched.url) as page,
    ):
        page.wait_for_function("document.getElementById('frame').naturalWidth === 640", timeout=30_000)
        wait_for_a_new_frame(page)

        # when the output stage dies and the watchdog starts another
        (tmp_path / "crash").write_text("now")
        wait_until(
            lambda: any(e.kind == StatusKind.STAGE_RESTARTED for e in watched.events),
            timeout=60,
            what="the output stage's restart",
        )

        # then the same page, untouched, shows new frames from the new output process
        wait_for_a_new_frame(page, timeout_ms=60_000)
        assert (tmp_path / "crashed").exists()
