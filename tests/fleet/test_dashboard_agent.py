"""The dashboard in a real browser watching a real agent run a real pipeline on the shipped fleet broker: its
pipeline's frame rate shows, its preview thumbnail changes as the camera moves, and the page's Stop button
stops the pipeline on the device. The screenshot is left in build/test-artifacts/dashboard-agent.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.fleet.device.agent import Agent
from tests.fleet.conftest import Keys
from tests.fleet.test_agent_telemetry import run_people
from tests.support.browser import ARTIFACTS, PREVIEW_IMAGE, chromium_browser
from tools.harness.broker import FleetBroker
from tools.harness.dashboard import DashboardProcess, write_broker_yaml
from tools.harness.deployments import DEVICE_ID

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_running_agent_shows_its_rate_and_a_changing_preview_and_stops_from_the_page(
    agent: Agent, fleet: FleetBroker, tmp_path: Path, operator_keys: Keys, chromium: str
) -> None:
    broker_yaml = write_broker_yaml(fleet.settings("operator"), tmp_path / "operator.yaml")
    with DashboardProcess(broker_yaml, tmp_path / "dashboard") as dashboard, chromium_browser(chromium) as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{dashboard.url}/login?token={dashboard.token}")
        page.goto(f"{dashboard.url}/device/{DEVICE_ID}")
        page.wait_for_function("() => document.getElementById('device-facts').textContent.startsWith('online')")
        run_people(agent, tmp_path, operator_keys, preview="{every_s: 0.5, width: 200}")

        # The pipeline's row shows it running at a measured rate
        page.wait_for_function(
            "() => [...document.querySelectorAll('#pipelines tbody tr')].some(r => r.cells[0].textContent === 'people'"
            " && r.cells[1].textContent === 'yes' && Number(r.cells[2].textContent) > 0)",
            timeout=90_000,
        )
        # and its thumbnail, 200 px wide, changes as the camera pans
        page.wait_for_function(f"() => (({PREVIEW_IMAGE})() || {{}}).width === 200", timeout=60_000)
        first = page.evaluate(PREVIEW_IMAGE)["hash"]
        page.wait_for_function(f"() => (({PREVIEW_IMAGE})() || {{hash: {first}}}).hash !== {first}", timeout=30_000)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-agent.png"), full_page=True)

        # Stop, confirmed, reaches the agent
        page.click("#pipelines tbody tr button")
        page.wait_for_function(
            "() => document.getElementById('action-result').textContent.startsWith('stop: ok')", timeout=30_000
        )
        page.wait_for_function(
            "() => [...document.querySelectorAll('#pipelines tbody tr')].some(r => r.cells[0].textContent === 'people'"
            " && r.cells[1].textContent === 'no')",
            timeout=60_000,
        )
    assert agent.pipelines.running() == []
    assert dashboard.exit_code == 0, "".join(dashboard.output)
