"""`edge-sdk fleet dashboard` over HTTP as a browser (or an attacker's page) talks to it: the login token,
sessions, CSRF and Origin checks, read-only mode, what reaches a page, the telemetry it refuses, the
--select filter, and a broker that goes away."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_sdk.fleet.wire.telemetry import stats_message
from edge_sdk.mqtt.topics import DeviceTopics
from tests.support.waits import poll_until, wait_until
from tools.harness.broker import FleetBroker
from tools.harness.dashboard import DashboardProcess
from tools.harness.fleet_sim import SimDevice

from .conftest import CAMERAS, EVIL

pytestmark = pytest.mark.broker


def device_ids(client: object) -> list[str]:
    return sorted(view["id"] for view in client.get("/api/devices").json()["devices"])  # type: ignore[attr-defined]


def status(client: object) -> dict[str, object]:
    return client.get("/api/devices").json()["status"]  # type: ignore[attr-defined,no-any-return]


def test_without_the_token_nothing_is_shown_and_a_wrong_token_opens_no_session(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice]
) -> None:
    dashboard = start_dashboard()
    anonymous = dashboard.client()
    assert anonymous.get("/").status_code == 303 and anonymous.get("/").headers["location"] == "/login"
    for path in ("/api/devices", "/api/device/cam-1", "/api/rollouts", "/api/events", "/api/preview/cam-1/a/b"):
        assert anonymous.get(path).status_code == 401, path
    wrong = anonymous.post("/login", data={"token": "not-the-token-at-all"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert anonymous.get("/api/devices").status_code == 401

    # The login link printed at start (token in the query) opens a session cookie scripts cannot read
    login = anonymous.get(f"/login?token={dashboard.token}")
    cookie = login.headers["set-cookie"].lower()
    assert login.status_code == 303 and "httponly" in cookie and "samesite=strict" in cookie
    wait_until(lambda: device_ids(anonymous) == sorted([*CAMERAS, EVIL]), 20, "every device listed")


def test_an_action_needs_the_session_csrf_token_and_the_dashboards_own_origin(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice]
) -> None:
    dashboard = start_dashboard()
    client = dashboard.login()
    csrf = dashboard.csrf(client)
    ping = {"action": "ping", "device": "cam-1"}

    # A cross-site form post carries the cookie but cannot know the CSRF token
    forged = client.post("/api/action", data={"action": "ping", "device": "cam-1"})
    assert forged.status_code == 403 and "CSRF" in forged.json()["error"]
    assert client.post("/api/action", json=ping, headers={"x-csrf-token": "guessed"}).status_code == 403
    cross_site = client.post("/api/action", json=ping, headers={"x-csrf-token": csrf, "origin": "http://evil.example"})
    assert cross_site.status_code == 403 and "cross-site" in cross_site.json()["error"]
    assert dashboard.client().post("/api/action", json=ping, headers={"x-csrf-token": csrf}).status_code == 401
    assert devices["cam-1"].commands["ping"] == 0, "no refused request reached the device"

    # The page's own request goes through to the device and back
    answer = client.post("/api/action", json=ping, headers={"x-csrf-token": csrf, "origin": dashboard.url})
    assert answer.status_code == 200, answer.text
    assert answer.json()["response"]["ok"] is True and answer.json()["response"]["result"]["pong"] is True
    assert devices["cam-1"].commands["ping"] == 1

    # Bad requests get one clear line each
    unknown = dashboard.action(client, {"action": "format-disk", "device": "cam-1"})
    assert unknown.status_code == 400 and "unknown action 'format-disk'" in unknown.json()["error"]
    traversal = dashboard.action(client, {"action": "deploy", "manifest": "../../operator.yaml"})
    assert traversal.status_code == 400 and "not a signed manifest" in traversal.json()["error"]


def test_read_only_mode_shows_the_fleet_and_refuses_every_action(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice]
) -> None:
    dashboard = start_dashboard("--read-only")
    client = dashboard.login()
    wait_until(lambda: "cam-1" in device_ids(client), 20, "cam-1 listed")
    refused = dashboard.action(client, {"action": "ping", "device": "cam-1"})
    assert refused.status_code == 403 and "read-only" in refused.json()["error"]
    assert devices["cam-1"].commands["ping"] == 0
    assert status(client)["read_only"] is True


def test_no_secret_reaches_a_page_and_every_response_restricts_scripts(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], fleet: FleetBroker
) -> None:
    dashboard = start_dashboard()
    client = dashboard.login()
    wait_until(lambda: len(device_ids(client)) == 4, 20, "every device listed")
    operator_tls = fleet.settings("operator").tls
    assert operator_tls is not None and operator_tls.key_file is not None
    secrets = [dashboard.token, operator_tls.key_file.read_text().splitlines()[1], str(operator_tls.key_file)]
    for path in ("/", "/rollouts", "/device/cam-1", "/api/devices", "/api/device/cam-1", "/api/rollouts", "/login"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert not [secret for secret in secrets if secret in response.text], path
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        assert response.headers["x-content-type-options"] == "nosniff"


def test_malformed_and_flooding_telemetry_is_dropped_counted_and_never_stops_the_dashboard(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice]
) -> None:
    dashboard = start_dashboard()
    client = dashboard.login()
    wait_until(lambda: len(device_ids(client)) == 4, 20, "every device listed")
    cam1, cam2 = devices["cam-1"].client, devices["cam-2"].client
    assert cam1 is not None and cam2 is not None
    topics = DeviceTopics("cam-1")

    # Malformed: not JSON, a field of the wrong type, another device's name, a preview that is no JPEG
    for topic, payload in [
        (topics.telemetry("stats", "demo"), b"{not json"),
        (topics.telemetry("stats", "demo"), b'{"device":"cam-1","pipeline":"demo","at":1,"fps":"fast","frames":1,"dropped":0}'),
        (topics.telemetry("stats", "demo"), stats_message("cam-2", "demo", 1.0, 5.0, 1.0, 2.0, 10, 0)),
        (topics.telemetry("preview", "demo", "door"), b"<html>not an image</html>"),
    ]:  # fmt: skip
        cam1.publish(topic, payload, qos=1)
    wait_until(lambda: status(client)["malformed"] == 4, 20, "4 malformed messages counted")
    cam1.publish(topics.telemetry("stats", "demo"), stats_message("cam-1", "demo", 1.0, 12.5, 3.0, 9.0, 100, 2), qos=1)
    wait_until(
        lambda: (
            client.get("/api/device/cam-1").json()["pipelines"][:1]
            == [
                {
                    "name": "demo",
                    "running": False,
                    "fps": 12.5,
                    "p50": 3.0,
                    "p99": 9.0,
                    "frames": 100,
                    "dropped": 2,
                    "at": 1.0,
                }
            ]
        ),
        20,
        "a good stats message shown after the bad ones",
    )

    # A flood from cam-2 (600 messages at once) is cut by its own budget, and cam-2's last word still shows
    flood = DeviceTopics("cam-2").telemetry("stats", "demo")
    for index in range(600):
        cam2.publish(flood, stats_message("cam-2", "demo", 2.0, float(index), 1.0, 2.0, index, 0), qos=0, wait=False)
    cam2.publish(flood, stats_message("cam-2", "demo", 3.0, 7.0, 1.0, 2.0, 999, 0), qos=1)
    wait_until(lambda: status(client)["rate_limited"] > 0, 20, "the flood rate-limited")
    view = client.get("/api/device/cam-2").json()
    assert view["rate_limited"] > 0 and client.get("/api/device/cam-1").json()["rate_limited"] == 0
    assert client.get("/api/devices").status_code == 200


def test_the_filter_takes_fleet_deploy_selectors_and_explains_a_bad_one(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice]
) -> None:
    dashboard = start_dashboard()
    client = dashboard.login()
    wait_until(lambda: len(device_ids(client)) == 4, 20, "every device listed")
    lyon = client.get("/api/devices", params={"select": "label.site=lyon"}).json()["devices"]
    assert sorted(view["id"] for view in lyon) == ["cam-1", "cam-2"]
    picked = client.get("/api/devices", params={"select": "device=cam-3,evil-1 label.site=paris"}).json()["devices"]
    assert [view["id"] for view in picked] == ["cam-3"]
    bad = client.get("/api/devices", params={"select": "colour=red"})
    assert (
        bad.status_code == 400
        and bad.json()["error"] == "filter: expected device=, profile= or label.NAME=, got 'colour'"
    )


def test_a_broker_that_goes_away_shows_as_disconnected_and_the_dashboard_reconnects(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice], fleet: FleetBroker
) -> None:
    dashboard = start_dashboard()
    client = dashboard.login()
    wait_until(lambda: len(device_ids(client)) == 4, 20, "every device listed")
    fleet.broker.stop()
    wait_until(lambda: status(client)["connected"] is False, 20, "the broker shown as disconnected")
    assert client.get("/api/device/cam-1").json()["id"] == "cam-1", "what it knew is still served"
    fleet.broker.start()
    wait_until(lambda: status(client)["connected"] is True, 60, "the dashboard reconnected")
    answers: list[str] = []

    def ping_answered() -> bool:
        answer = dashboard.action(client, {"action": "ping", "device": "cam-2"})
        answers.append(answer.text)
        return answer.status_code == 200

    assert poll_until(ping_answered, 60, interval=1.0), answers[-3:]


def test_the_events_stream_sends_every_device_first_then_only_changes(
    start_dashboard: Callable[..., DashboardProcess], devices: dict[str, SimDevice]
) -> None:
    dashboard = start_dashboard()
    client = dashboard.login()
    wait_until(lambda: len(device_ids(client)) == 4, 20, "every device listed")
    batches: list[dict[str, object]] = []
    with client.stream("GET", "/api/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        event = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: ") and event == "devices":
                batches.append(json.loads(line[len("data: ") :]))
                if len(batches) == 1:
                    devices["cam-2"].stop()  # one change: cam-2 goes offline
                else:
                    break
    first, second = batches
    assert first["full"] is True and len(first["devices"]) == 4  # type: ignore[arg-type]
    assert second["full"] is False
    assert [(view["id"], view["online"]) for view in second["devices"]] == [("cam-2", False)]  # type: ignore[attr-defined,index]


def test_sigterm_stops_the_dashboard_cleanly(broker_yaml: Path, tmp_path: Path, devices: dict[str, SimDevice]) -> None:
    with DashboardProcess(broker_yaml, tmp_path / "dashboard") as dashboard:
        client = dashboard.login()
        wait_until(lambda: len(device_ids(client)) == 4, 20, "every device listed")
    assert dashboard.exit_code == 0, "".join(dashboard.output)
