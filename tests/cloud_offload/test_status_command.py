"""`edge-sdk offload status` against a real Mosquitto with a worker's report and a device's counters."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from cloud_offload import protocol
from edge_sdk.cli.main import cli
from edge_sdk.mqtt import MqttClient
from edge_sdk.serving.model_cache import CacheStats
from tools.harness.broker import BrokerFactory


def test_status_lists_the_workers_and_the_devices_offloading(start_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = start_broker()
    broker_file = tmp_path / "broker.yaml"
    broker_file.write_text(yaml.safe_dump({"host": broker.host, "port": broker.port}))
    times = protocol.ModelTimes(whole_ms=12.5, tails_ms={"tail-abc": 3.0})
    load = protocol.WorkerLoad(
        worker="gpu-1", profile="x86-nvidia", queue=2, served=40, models={"k1": times}, at=time.time()
    )
    client = MqttClient(broker.settings(client_id="reporter"))
    client.connect()
    try:
        client.publish(protocol.load_topic("gpu-1"), load.model_dump_json(), qos=1, retain=True)
        counters = {"mode": "cloud", "computed": {"cloud": 30, "edge": 2}, "bandwidth_mbps": 18.2, "padding": "..."}

        def device_reports() -> None:
            for _ in range(6):
                client.publish("edge/cam1/telemetry/offload", json.dumps(counters), qos=1)
                time.sleep(0.25)

        reporting = threading.Thread(target=device_reports)
        reporting.start()
        result = CliRunner().invoke(cli, ["offload", "status", "--broker", str(broker_file), "--wait", "1", "--json"])
        reporting.join()
    finally:
        client.disconnect()
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [w["worker"] for w in document["workers"]] == ["gpu-1"]
    assert document["workers"][0]["models"]["k1"]["tails_ms"] == {"tail-abc": 3.0}
    assert document["devices"]["cam1"]["computed"] == {"cloud": 30, "edge": 2}
    assert "padding" not in document["devices"]["cam1"]


def test_status_shows_a_workers_model_cache(start_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = start_broker()
    broker_file = tmp_path / "broker.yaml"
    broker_file.write_text(yaml.safe_dump({"host": broker.host, "port": broker.port}))
    cache = CacheStats(
        budget_mb=8, used_mb=6.25, resident=["k1", "k2"], hits=30, misses=10, loads=5, evictions=3, hit_rate=0.75
    )
    models = {key: protocol.ModelTimes(whole_ms=5.0) for key in ("k1", "k2", "k3")}
    reports = {
        "cached": protocol.WorkerLoad(worker="cached", profile="x86-cpu", models=models, cache=cache, at=time.time()),
        "plain": protocol.WorkerLoad(worker="plain", profile="x86-cpu", models=models, at=time.time()),
    }
    with MqttClient(broker.settings(client_id="reporter")) as client:
        for name, load in reports.items():
            client.publish(protocol.load_topic(name), load.model_dump_json(), qos=1, retain=True, wait=True)
    arguments = ["offload", "status", "--broker", str(broker_file), "--wait", "0.5"]
    table = CliRunner().invoke(cli, arguments)
    assert table.exit_code == 0, table.output
    assert "2/3 loaded, hit 75%, 5 loads, 3 evictions, 6.2/8 MB" in table.output
    assert "all loaded" in table.output
    document = json.loads(CliRunner().invoke(cli, [*arguments, "--json"]).output)
    by_name = {worker["worker"]: worker for worker in document["workers"]}
    assert by_name["cached"]["cache"]["resident"] == ["k1", "k2"] and by_name["plain"]["cache"] is None
