"""A dashboard as an operator runs it (`edge-sdk fleet dashboard` in a subprocess), on the shipped fleet
broker (TLS client certificates, ACL), with simulated devices that speak the fleet protocol; one of them
reports HTML and script in every field it controls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.fleet.wire.signing import generate_signing_key, load_private_key
from edge_sdk.mqtt import ReconnectPolicy
from tools.harness.broker import BrokerFactory, FleetBroker, start_fleet_broker
from tools.harness.dashboard import DashboardProcess, write_broker_yaml
from tools.harness.fleet_sim import SimDevice, signed_deployment

CAMERAS = ["cam-1", "cam-2", "cam-3"]
EVIL = "evil-1"
SCRIPT = "<script>window.__xss = 1</script>"
IMG = '<img src="x" onerror="window.__xss = 2">'
QUICK_RECONNECT = ReconnectPolicy(min_delay_s=0.2, max_delay_s=2.0)
"""Back within seconds of a broker restart, whatever the back-off reached while it was down."""


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=[*CAMERAS, EVIL], operators=["operator"])


@pytest.fixture
def broker_yaml(fleet: FleetBroker, tmp_path: Path) -> Path:
    return write_broker_yaml(fleet.settings("operator", reconnect=QUICK_RECONNECT), tmp_path / "operator.yaml")


@pytest.fixture
def devices(fleet: FleetBroker) -> Iterator[dict[str, SimDevice]]:
    """cam-1..3 at site lyon (cam-3 at paris), version 1; evil-1 with markup in its profile and labels."""
    started = {
        name: SimDevice(
            fleet.settings(name, reconnect=QUICK_RECONNECT),
            name,
            labels={"site": "paris" if name == "cam-3" else "lyon"},
        ).start()
        for name in CAMERAS
    }
    started[EVIL] = SimDevice(fleet.settings(EVIL), EVIL, profile=SCRIPT, labels={"note": IMG}).start()
    yield started
    for device in started.values():
        device.stop()


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    """A folder with v2.signed (its inline artifact beside it), signed by a key the simulated devices accept."""
    key = load_private_key(generate_signing_key(tmp_path / "keys").private_key)
    folder = tmp_path / "manifests"
    (folder / "v2.signed").parent.mkdir(parents=True, exist_ok=True)
    (folder / "v2.signed").write_bytes(signed_deployment(key, 2, folder))
    return folder


@pytest.fixture
def start_dashboard(broker_yaml: Path, tmp_path: Path) -> Iterator[Callable[..., DashboardProcess]]:
    running: list[DashboardProcess] = []

    def start(*extra: str, **options: Any) -> DashboardProcess:
        dashboard = DashboardProcess(broker_yaml, tmp_path / f"dashboard-{len(running)}", *extra, **options)
        running.append(dashboard.__enter__())
        return dashboard

    yield start
    for dashboard in running:
        dashboard.__exit__()
        assert dashboard.exit_code == 0, "".join(dashboard.output)
