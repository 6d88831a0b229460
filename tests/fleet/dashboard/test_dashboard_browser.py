"""The dashboard in a real browser (Debian's chromium, headless, through Playwright) against a real broker
and devices that speak the fleet protocol: the device list appears, a device going offline turns grey
within 2 s, reported markup stays text, a ping round-trips, a rollout's outcomes update live, a preview
thumbnail changes. Screenshots are left in build/test-artifacts/dashboard-*.png."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_sdk.core.opencv import import_cv2
from edge_sdk.fleet.wire.protocol import Presence, encode_message
from edge_sdk.fleet.wire.telemetry import stats_message
from edge_sdk.mqtt.topics import DeviceTopics
from tests.support.browser import ARTIFACTS, PREVIEW_IMAGE, chromium_browser
from tools.harness.broker import FleetBroker
from tools.harness.dashboard import DashboardProcess
from tools.harness.fleet_sim import SimDevice

from .conftest import CAMERAS, EVIL, IMG, SCRIPT

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def open_page(chromium: str) -> Iterator[Callable[[DashboardProcess, str], Any]]:
    """open_page(dashboard, path) -> a logged-in page at `path`; confirmation dialogs are accepted."""
    with chromium_browser(chromium) as browser:

        def open_at(dashboard: DashboardProcess, path: str) -> Any:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.on("dialog", lambda dialog: dialog.accept())
            page.goto(f"{dashboard.url}/login?token={dashboard.token}")
            page.goto(f"{dashboard.url}{path}")
            return page

        yield open_at


def row(page: Any, device: str) -> Any:
    return page.locator(f'#devices tr[data-device="{device}"]')


def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def jpeg(shade: int, text: str) -> bytes:
    cv2 = import_cv2()
    image = np.full((120, 160, 3), shade, np.uint8)
    cv2.putText(image, text, (10, 70), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (255, 255, 255), 2)
    ok, encoded = cv2.imencode(".jpg", image)
    assert ok
    return bytes(encoded)


def test_the_device_list_appears_and_a_device_going_offline_turns_grey_within_2_s(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], open_page: Any
) -> None:
    dashboard = start_dashboard()
    page = open_page(dashboard, "/")
    for name in [*CAMERAS, EVIL]:
        row(page, name).wait_for(timeout=20_000)
    assert row(page, "cam-1").get_attribute("class") == "online"
    assert "site=lyon" in row(page, "cam-1").inner_text()
    cam1 = devices["cam-1"].client
    assert cam1 is not None
    cam1.publish(
        DeviceTopics("cam-1").telemetry("stats", "demo"),
        stats_message("cam-1", "demo", time.time(), 14.8, 41.0, 95.0, 1200, 3),
    )
    page.wait_for_function(
        "() => document.querySelector('#devices tr[data-device=\"cam-1\"]').innerText.includes('14.8 fps')",
        timeout=10_000,
    )
    screenshot(page, "devices")

    # cam-2's agent stops: its offline presence reaches the broker, and the row greys
    went = time.monotonic()
    devices["cam-2"].stop()
    page.wait_for_function(
        "() => document.querySelector('#devices tr[data-device=\"cam-2\"]').className === 'offline'", timeout=2_000
    )
    grey_after = time.monotonic() - went
    color = page.evaluate("getComputedStyle(document.querySelector('#devices tr[data-device=\"cam-2\"] td')).color")
    assert color == "rgb(154, 161, 173)", color  # the offline grey of dashboard.css
    assert grey_after < 2.0
    assert row(page, "cam-1").get_attribute("class") == "online"


def test_what_a_device_reports_is_shown_as_text_and_never_runs(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], open_page: Any
) -> None:
    dashboard = start_dashboard()
    evil = devices[EVIL].client
    assert evil is not None
    event = (
        '{"device":"evil-1","pipeline":"demo","kind":"source_lost","subject":"<b>door</b>",'
        f'"message":"{IMG.replace(chr(34), chr(39))}","timestamp":{time.time()}}}'
    )
    presence = Presence(
        device=EVIL, online=True, profile=SCRIPT, labels={"note": IMG, IMG: "key"}, sdk_version=SCRIPT[:64],
        active_version=1, pipelines=[IMG], health="ok",
    )  # fmt: skip
    evil.publish(DeviceTopics(EVIL).state, encode_message(presence), qos=1, retain=True)
    page = open_page(dashboard, "/")
    page.wait_for_function("() => document.body.innerText.includes('stopped')", timeout=20_000)
    evil.publish(DeviceTopics(EVIL).telemetry("pipelines", "demo"), event.encode(), qos=1)  # once subscribed
    evil.publish(DeviceTopics(EVIL).telemetry("preview", "<b>x", IMG.replace("/", "_")), jpeg(90, "x"), qos=1)
    text = row(page, EVIL).inner_text()
    assert SCRIPT in text and IMG in text, text
    detail = open_page(dashboard, f"/device/{EVIL}")
    detail.wait_for_function("() => document.getElementById('events').children.length > 0", timeout=20_000)
    detail.wait_for_function("() => document.querySelectorAll('#previews figure').length > 0", timeout=20_000)
    assert "<b>door</b>" in detail.inner_text("#events")
    assert SCRIPT in detail.inner_text("#device-facts") and f"{IMG}=key" in detail.inner_text("#device-facts")
    assert IMG in detail.inner_text("#pipelines") and "<b>x/" in detail.inner_text("#previews")
    for shown in (page, detail):
        assert shown.evaluate("() => window.__xss") is None, "a device's markup ran as script"
        markup = "#devices img, #devices b, #events img, #events b, #pipelines img, #device-facts script, figcaption b"
        assert shown.locator(markup).count() == 0


def test_a_broker_that_goes_away_shows_a_banner_until_the_dashboard_is_back(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], open_page: Any, fleet: FleetBroker
) -> None:
    dashboard = start_dashboard()
    page = open_page(dashboard, "/")
    row(page, "cam-1").wait_for(timeout=20_000)
    assert page.locator("#banner").is_hidden()
    fleet.broker.stop()
    page.wait_for_function(
        "() => document.getElementById('banner').textContent.includes('unreachable')", timeout=20_000
    )
    assert row(page, "cam-1").is_visible(), "what the dashboard knew stays on the page"
    screenshot(page, "broker-down")
    fleet.broker.start()
    page.wait_for_function("() => document.getElementById('banner').hidden", timeout=60_000)


def test_a_ping_from_the_device_page_round_trips(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], open_page: Any
) -> None:
    dashboard = start_dashboard()
    page = open_page(dashboard, "/device/cam-1")
    page.wait_for_function(
        "() => document.getElementById('device-facts').textContent.startsWith('online')", timeout=20_000
    )
    page.click("#ping")
    page.wait_for_function(
        "() => document.getElementById('action-result').textContent.startsWith('ping: ok in')", timeout=20_000
    )
    assert devices["cam-1"].commands["ping"] == 1
    screenshot(page, "device")


def test_a_rollout_started_from_the_page_shows_its_outcomes_as_they_come(
    start_dashboard: Callable[..., DashboardProcess],
    devices: dict[str, SimDevice],
    open_page: Any,
    manifests: Path,
) -> None:
    devices["cam-2"].behaviour = "health_fail"
    dashboard = start_dashboard("--manifests", str(manifests))
    page = open_page(dashboard, "/rollouts")
    page.wait_for_function("() => document.getElementById('manifest').options.length === 1", timeout=20_000)
    page.fill("#select", "label.site=lyon")
    page.fill("#rate", "600")
    page.fill("#threshold", "1")
    page.click("#deploy-form button[type=submit]")
    page.wait_for_function(
        "() => document.getElementById('action-result').textContent.startsWith('deploy: sim-2-v2')", timeout=20_000
    )

    def outcome(device: str) -> str:
        return str(page.locator(f'.rollout tr[data-device="{device}"] .outcome').inner_text())

    page.wait_for_function(
        "() => ['cam-1', 'cam-2'].every(d => { const c = document.querySelector(`.rollout tr[data-device='${d}'] .outcome`);"
        " return c && !['pending', 'sent'].includes(c.textContent); })",
        timeout=30_000,
    )
    assert outcome("cam-1") == "active" and outcome("cam-2") in ("failed", "rolled_back")
    assert page.locator('.rollout tr[data-device="cam-3"]').count() == 0, "cam-3 is at paris, not selected"
    page.wait_for_function(
        "() => document.querySelector('.rollout .state').textContent.startsWith('completed')", timeout=30_000
    )
    assert "abort threshold 100%" in page.inner_text(".rollout .state")
    screenshot(page, "rollouts")
    assert devices["cam-1"].active_version == 2


def test_a_preview_thumbnail_changes_on_the_device_page(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], open_page: Any
) -> None:
    dashboard = start_dashboard()
    cam1 = devices["cam-1"].client
    assert cam1 is not None
    topic = DeviceTopics("cam-1").telemetry("preview", "demo", "door")
    page = open_page(dashboard, "/device/cam-1")
    page.wait_for_function(
        "() => document.getElementById('device-facts').textContent.startsWith('online')", timeout=20_000
    )
    cam1.publish(topic, jpeg(40, "one"), qos=1)
    image = page.locator('#previews figure[data-key="demo/door"] img')
    image.wait_for(timeout=20_000)
    page.wait_for_function("() => document.querySelector('#previews img').naturalWidth === 160", timeout=20_000)
    first = image.get_attribute("src")
    first_pixels = page.evaluate(PREVIEW_IMAGE)["mean"]
    cam1.publish(topic, jpeg(200, "two"), qos=1)
    page.wait_for_function(
        f"() => document.querySelector('#previews img').getAttribute('src') !== {first!r}", timeout=20_000
    )
    page.wait_for_function(f"() => (({PREVIEW_IMAGE})() || {{mean: 0}}).mean > {first_pixels + 80}", timeout=20_000)
