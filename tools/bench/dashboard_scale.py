"""The fleet dashboard with 1,000 devices reporting at 1 Hz: time from a device's stats message to its row on
screen, the dashboard process's CPU, and how responsive the page stays.

Usage: python tools/bench/dashboard_scale.py [--devices 1000] [--processes 4] [--seconds 30] [--rate 1.0]

A private Mosquitto (plain TCP), --processes worker processes each running its share of simulated devices
(tools/harness/fleet_sim.py: real MQTT clients with retained presence and reported state), and each device
publishing a `PipelineStats` message (fleet/wire/telemetry.py) --rate times a second, spread evenly, stamped
with the time it was published. `edge-sdk fleet dashboard` runs as an operator would run it; Debian's
chromium (headless, Playwright) opens the devices page. The page records, for every stats message it
shows, the seconds since the device stamped it (window.__domLatency): broker, dashboard, event stream and
DOM together (one machine, one clock). CPU is the dashboard process's user+system time over the window
(/proc), as a share of one core; page responsiveness is how late a 50 ms timer fires in the page (p50,
p99, max), and how long sorting the 1,000 rows by a click takes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edge_sdk.fleet.wire.telemetry import stats_message
from edge_sdk.mqtt import MqttSettings
from edge_sdk.mqtt.topics import DeviceTopics
from tools.harness.broker import MosquittoBroker
from tools.harness.dashboard import DashboardProcess, write_broker_yaml
from tools.harness.fleet_sim import SimDevice

CHROMIUM = "/usr/bin/chromium"
TIMER_LAG = """() => new Promise(resolve => {
  const lags = [];
  const tick = () => {
    const wanted = performance.now() + 50;
    setTimeout(() => {
      lags.push(performance.now() - wanted);
      if (lags.length < 60) tick(); else resolve(lags);
    }, 50);
  };
  tick();
})"""


def worker(port: int, first: int, count: int, rate: float) -> None:
    """Run `count` devices publishing stats `rate` times a second until stdin closes."""
    import select

    devices = [
        SimDevice(MqttSettings(host="127.0.0.1", port=port), f"sim-{i:04d}").start()
        for i in range(first, first + count)
    ]
    print("ready", flush=True)
    period = 1.0 / rate
    frames = 0
    started = time.monotonic()
    while not select.select([sys.stdin], [], [], 0)[0]:
        for index, device in enumerate(devices):
            at = started + frames * period + index * period / len(devices)
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            payload = stats_message(device.device, "demo", time.time(), 15.0, 40.0, 90.0, frames, 0)
            if device.client is not None:
                device.client.publish(
                    DeviceTopics(device.device).telemetry("stats", "demo"), payload, qos=0, wait=False
                )
        frames += 1
    for device in devices:
        device.stop()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=1.0, help="stats messages per device per second")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        port, first, count, rate = args.worker
        worker(int(port), int(first), int(count), float(rate))
        return

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        broker = MosquittoBroker(folder / "broker", extra_config="max_queued_messages 100000\n")
        broker.start()
        workers: list[subprocess.Popen[str]] = []
        try:
            per = -(-args.devices // args.processes)
            for first in range(0, args.devices, per):
                command = [sys.executable, __file__, "--worker", str(broker.port), str(first),
                           str(min(per, args.devices - first)), str(args.rate)]  # fmt: skip
                workers.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            for process in workers:
                assert process.stdout is not None and process.stdout.readline().strip() == "ready"
            broker_yaml = write_broker_yaml(broker.settings(), folder / "operator.yaml")
            with DashboardProcess(broker_yaml, folder / "dashboard") as dashboard, sync_playwright() as playwright:
                assert dashboard.process is not None
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{dashboard.url}/login?token={dashboard.token}")
                page.wait_for_function(
                    f"() => document.querySelectorAll('#devices tbody tr').length >= {args.devices}", timeout=120_000
                )
                time.sleep(3)  # past the first full batch
                page.evaluate("() => { window.__domLatency = []; }")
                cpu_before, wall_before = cpu_seconds(dashboard.process.pid), time.monotonic()
                lags = page.evaluate(TIMER_LAG)
                time.sleep(max(0.0, args.seconds - (time.monotonic() - wall_before)))
                cpu = (cpu_seconds(dashboard.process.pid) - cpu_before) / (time.monotonic() - wall_before)
                latencies = np.array(page.evaluate("() => window.__domLatency")) * 1000
                sort_ms = page.evaluate(
                    "() => { const t = performance.now(); document.querySelector('th[data-key=last_seen]').click();"
                    " return performance.now() - t; }"
                )
                rows = page.evaluate("() => document.querySelectorAll('#devices tbody tr').length")
                status = page.inner_text("#summary")
                browser.close()
        finally:
            for process in workers:
                if process.stdin:
                    process.stdin.close()
            for process in workers:
                process.wait(timeout=60)
            broker.stop()

    expected = args.devices * args.rate * args.seconds
    print(f"{args.devices} devices x {args.rate:g} stats/s for {args.seconds:g} s: {len(latencies)} updates shown "
          f"of ~{expected:.0f} published, {rows} rows")  # fmt: skip
    print(f"message -> DOM: p50 {np.percentile(latencies, 50):.0f} ms, p99 {np.percentile(latencies, 99):.0f} ms, "
          f"max {latencies.max():.0f} ms")  # fmt: skip
    print(f"dashboard process CPU: {100 * cpu:.0f}% of one core")
    lag = np.array(lags)
    print(f"page timer lag (50 ms timer): p50 {np.percentile(lag, 50):.1f} ms, p99 {np.percentile(lag, 99):.1f} ms, "
          f"max {lag.max():.1f} ms; sorting {rows} rows by a click: {sort_ms:.0f} ms")  # fmt: skip
    print(f"page summary: {status}")


if __name__ == "__main__":
    main()
