"""Staged rollout over a simulated fleet on one Mosquitto: time to reach every device, every outcome accounted for.

Usage: python tools/bench/fleet_rollout.py [--devices 500] [--processes 4] [--first-wave 25] [--rate 6000]
                                           [--scenarios plain,broker-restart] [--fail-every 0] [--agents]

A private Mosquitto (tools/harness/broker.py, plain TCP, persistence on) and --processes worker processes,
each running its share of simulated devices (tools/harness/fleet_sim.py: real MQTT clients with
persistent sessions that speak the fleet protocol: retained presence and reported state, commands
answered by correlation id, inline chunks asked for with need_chunks and assembled). The operator
(`FleetOperator` + `RolloutRunner`, rollout state in SQLite) rolls a signed version 2 with a 3-chunk
inline model out to all of them: a first wave, then --rate devices per minute.

With --agents the workers run real device agents instead (edge_sdk.fleet.device.agent: signature check,
chunk assembly, engine build for x86-cpu, health check on a sample, atomic activation) and the
rollout is version 1 of a tiny classifier; --fail-every N then makes every Nth agent trust another
signing key, so it refuses.

Scenarios: `plain`; `broker-restart`: the broker is stopped and started again (same port,
persistence on) when half of the devices are active. For each it prints the time until every
device had an outcome, the outcome counts, and whether the devices' own retained reported state
agrees (every device on version 2, or on version 1 when it failed and rolled back; none stuck).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.operator.client import FleetOperator
from edge_sdk.fleet.operator.rollout import RolloutRunner
from edge_sdk.fleet.operator.rollout_plan import create_rollout
from edge_sdk.fleet.operator.rollout_store import Outcome, RolloutStore
from edge_sdk.fleet.wire.signing import generate_signing_key, load_private_key
from edge_sdk.mqtt import MqttClient, MqttSettings, ReconnectPolicy
from tools.harness.broker import MosquittoBroker, find_mosquitto
from tools.harness.deployments import make_deployment
from tools.harness.fleet_sim import SimDevice, signed_deployment


def device_settings(port: int, client_id: str) -> MqttSettings:
    return MqttSettings(
        host="127.0.0.1",
        port=port,
        client_id=client_id,
        clean_start=False,  # persistent session: commands sent while the broker restarts are not lost
        session_expiry_s=3600,
        reconnect=ReconnectPolicy(min_delay_s=0.2, max_delay_s=2.0),
        connect_timeout_s=30,
        publish_timeout_s=30,
    )


# ---------------------------------------------------------------- worker process


def worker(port: int, first: int, count: int, fail_every: int, agents_dir: str) -> None:
    """Run `count` devices until stdin closes: simulated ones, or real agents when `agents_dir` is given."""
    devices: list[SimDevice | Agent] = []
    for index in range(first, first + count):
        name = f"sim-{index:04d}"
        failing = bool(fail_every) and index % fail_every == fail_every - 1
        if agents_dir:
            root = Path(agents_dir)
            config = AgentConfig(
                device_id=name,
                broker=device_settings(port, name),
                store_dir=root / name / "store",
                trusted_keys_dir=root / ("stranger-keys" if failing else "keys"),  # a stranger's key: refuses
                profile="x86-cpu",
                engine_cache_dir=root / name / "engines",
            )
            agent = Agent(config)
            agent.start()
            devices.append(agent)
        else:
            behaviour = "health_fail" if failing else "ok"
            devices.append(SimDevice(device_settings(port, name), name, behaviour=behaviour).start())
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    for device in devices:
        device.stop()


# ---------------------------------------------------------------- the bench


@dataclass
class Row:
    scenario: str
    devices: int
    seconds: float
    counts: dict[str, int]
    reported_ok: int
    stuck: int
    restart_at: float | None
    late: int


def run_scenario(args: argparse.Namespace, scenario: str, folder: Path) -> Row:
    broker = MosquittoBroker(folder / "broker", persistence=True, extra_config="max_queued_messages 10000\n")
    broker.start()
    workers: list[subprocess.Popen[str]] = []
    client: MqttClient | None = None
    key = load_private_key(generate_signing_key(folder / "keys").private_key)
    generate_signing_key(folder / "stranger-keys", name="stranger")
    try:
        per = -(-args.devices // args.processes)
        for first in range(0, args.devices, per):
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        str(broker.port),
                        str(first),
                        str(min(per, args.devices - first)),
                        str(args.fail_every),
                        str(folder) if args.agents else "",
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for process in workers:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker process failed to start its devices")
        if args.agents:  # real agents start empty: roll version 1 (the classifier with its health check) out
            release = make_deployment(folder / "release", key, 1, target={"profiles": ["x86-cpu"]})
            envelope, rollback, version = release.signed, None, 1
            artifacts = next(iter(release.files.values())).parent
        else:
            artifacts = folder / "artifacts"
            envelope, version = signed_deployment(key, 2, artifacts), 2
            rollback = signed_deployment(key, 1, folder / "rollback", rollback=True)
        client = MqttClient(device_settings(broker.port, "bench-operator"))
        client.connect()
        operator = FleetOperator(client).start()
        deadline = time.monotonic() + 60
        while sum(1 for r in operator.devices() if r.online) < args.devices and time.monotonic() < deadline:
            time.sleep(0.1)
        store = RolloutStore(folder / "rollouts.db")
        rollout_id = create_rollout(
            operator, store, envelope, first_wave=args.first_wave, rate_per_min=args.rate,
            abort_threshold=1.0, command_timeout_s=60, rollback_manifest=rollback, artifacts_dir=artifacts,
        )  # fmt: skip
        active = 0
        lock = threading.Lock()
        half = threading.Event()

        def count(device: str, outcome: Outcome, reason: str | None) -> None:
            nonlocal active
            if outcome.done:
                with lock:
                    active += 1
                    if active >= args.devices // 2:
                        half.set()

        restarter = None
        restarted: list[float] = []
        started = time.monotonic()
        if scenario == "broker-restart":

            def restart() -> None:
                half.wait()
                restarted.append(time.monotonic() - started)
                broker.restart()

            restarter = threading.Thread(target=restart, daemon=True)
            restarter.start()
        runner = RolloutRunner(
            operator, store, rollout_id, max_parallel=args.parallel, offline_wait_s=60, on_change=count
        )
        record = runner.run()
        seconds = time.monotonic() - started
        if restarter is not None:
            restarter.join(timeout=30)
        # The devices' own word: their retained reported state, once it has settled.
        before = None if args.agents else 1
        expected = {d.device: (version if d.outcome is Outcome.ACTIVE else before) for d in record.devices}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            agree = sum(1 for name, v in expected.items() if operator.device(name).active_version == v)
            if agree == len(expected):
                break
            time.sleep(0.2)
        agree = sum(1 for name, v in expected.items() if operator.device(name).active_version == v)
        stuck = sum(1 for d in record.devices if not d.outcome.done)
        store.close()
        late = sum(1 for d in record.devices if d.reason == "reported active")
        restart_at = restarted[0] if restarted else None
        return Row(scenario, len(record.devices), seconds, record.counts(), agree, stuck, restart_at, late)
    finally:
        if client is not None:
            client.disconnect()
        for process in workers:
            if process.stdin is not None:
                process.stdin.close()
        for process in workers:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        broker.stop()


def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # reconnect warnings during the broker restart are expected
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        port, first, count, fail_every = (int(v) for v in sys.argv[2:6])
        worker(port, first, count, fail_every, sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=500)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--first-wave", type=int, default=25)
    parser.add_argument("--rate", type=float, default=6000.0, help="devices per minute after the first wave")
    parser.add_argument("--parallel", type=int, default=64, help="deploys in flight at once")
    parser.add_argument("--fail-every", type=int, default=0, help="every Nth device fails its health check")
    parser.add_argument("--scenarios", default="plain,broker-restart")
    parser.add_argument(
        "--agents",
        action="store_true",
        help="real device agents (edge_sdk.fleet.device.agent: signature check, engine build, health check) instead of "
        "simulated devices; --fail-every then makes every Nth agent trust another key (it refuses)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if find_mosquitto() is None:
        sys.exit("needs the mosquitto binary (apt-get install mosquitto)")
    rows = []
    for scenario in args.scenarios.split(","):
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
            rows.append(run_scenario(args, scenario, Path(tmp)))
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
        return
    kind = "real agents (3 inline artifacts: model + health check data)" if args.agents else "simulated devices"
    print(
        f"{args.devices} {kind} in {args.processes} processes, first wave {args.first_wave}, "
        f"then {args.rate:g}/min, {args.parallel} deploys in flight\n"
    )
    print(
        "| scenario | devices | time to all outcomes (s) | devices/s | outcomes | resolved from reported state "
        "| devices' reported version agrees | stuck |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        outcomes = ", ".join(f"{n} {k}" for k, n in row.counts.items() if n)
        scenario = row.scenario + (f" (broker down at {row.restart_at:.1f} s)" if row.restart_at is not None else "")
        print(
            f"| {scenario} | {row.devices} | {row.seconds:.1f} | {row.devices / row.seconds:.0f} | {outcomes} "
            f"| {row.late} | {row.reported_ok}/{row.devices} | {row.stuck} |"
        )


if __name__ == "__main__":
    main()
