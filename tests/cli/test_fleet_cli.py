"""`edge-sdk fleet ls | exec | deploy | resume | status | rollback` as a user runs them, against simulated devices
on the shipped fleet broker (TLS client certificates, ACL)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.cli.fleet_options import parse_rate, parse_selector
from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.wire.signing import generate_signing_key, load_private_key
from tests.cli.conftest import Run
from tools.harness.broker import BrokerFactory, FleetBroker, start_fleet_broker
from tools.harness.fleet_sim import SimDevice, signed_deployment

NAMES = ["cam-1", "cam-2", "cam-3"]


@pytest.fixture
def fleet_broker(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=NAMES, operators=["operator"])


@pytest.fixture
def broker_yaml(fleet_broker: FleetBroker, tmp_path: Path) -> Path:
    settings = fleet_broker.settings("operator")
    assert settings.tls is not None
    path = tmp_path / "broker.yaml"
    path.write_text(
        f"""\
host: {settings.host}
port: {settings.port}
connect_timeout_s: 5
tls:
  ca_file: {settings.tls.ca_file}
  cert_file: {settings.tls.cert_file}
  key_file: {settings.tls.key_file}
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def devices(fleet_broker: FleetBroker) -> Iterator[Callable[..., SimDevice]]:
    started: list[SimDevice] = []

    def start(name: str, **options: Any) -> SimDevice:
        device = SimDevice(fleet_broker.settings(name), name, **options)
        started.append(device.start())
        return device

    yield start
    for device in started:
        device.stop()


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    """A signed version 2 (with its artifact beside it) and a signed rollback to version 1."""
    key = load_private_key(generate_signing_key(tmp_path / "keys").private_key)
    release = tmp_path / "release"
    manifest = release / "v2.signed"
    rollback = tmp_path / "rollback" / "v1-rollback.signed"
    envelope = signed_deployment(key, 2, release)
    manifest.write_bytes(envelope)
    rollback_envelope = signed_deployment(key, 1, rollback.parent, rollback=True)
    rollback.write_bytes(rollback_envelope)
    return manifest, rollback


pytestmark = pytest.mark.broker


def test_fleet_ls_when_devices_are_up_then_lists_them_with_profile_version_and_health(
    edge_sdk: Run, broker_yaml: Path, devices: Callable[..., SimDevice]
) -> None:
    devices("cam-1", labels={"site": "lyon"}, active_version=4)
    devices("cam-2", profile="arm-cpu")
    code, out, err = edge_sdk("fleet", "ls", "--broker", broker_yaml)
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("cam-1"))
    assert line.split()[:5] == ["cam-1", "yes", "x86-cpu", "4", "ok"]
    assert "site=lyon" in line
    assert "2 device(s), 2 online" in out
    code, out, _ = edge_sdk("fleet", "ls", "--broker", broker_yaml, "--json")
    listed = {d["device"]: d for d in json.loads(out)}
    assert listed["cam-2"]["profile"] == "arm-cpu" and listed["cam-2"]["online"] is True


def test_fleet_exec_when_device_answers_then_prints_the_response(
    edge_sdk: Run, broker_yaml: Path, devices: Callable[..., SimDevice]
) -> None:
    devices("cam-1")
    code, out, err = edge_sdk("fleet", "exec", "cam-1", "ping", "--broker", broker_yaml, "--args", "{}")
    assert code == 0, err
    response = json.loads(out)
    assert response["ok"] is True and response["result"] == {"pong": True} and response["device"] == "cam-1"


def test_fleet_exec_when_the_broker_file_has_relative_certificate_paths_then_they_start_from_its_folder(
    edge_sdk: Run,
    fleet_broker: FleetBroker,
    devices: Callable[..., SimDevice],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given an operator.yaml in a sub-folder whose certificate paths are relative to that folder
    settings = fleet_broker.settings("operator")
    assert settings.tls is not None and settings.tls.cert_file and settings.tls.key_file and settings.tls.ca_file
    conf = tmp_path / "ops" / "conf"
    (conf / "pki").mkdir(parents=True)
    tls = settings.tls
    for source, name in ((tls.ca_file, "ca.pem"), (tls.cert_file, "operator.pem"), (tls.key_file, "operator.key")):
        shutil.copyfile(source, conf / "pki" / name)
    (conf / "operator.yaml").write_text(
        f"""\
host: {settings.host}
port: {settings.port}
connect_timeout_s: 5
tls: {{ca_file: pki/ca.pem, cert_file: pki/operator.pem, key_file: pki/operator.key}}
""",
        encoding="utf-8",
    )
    devices("cam-1")

    # when the operator runs a command from another working directory
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, out, err = edge_sdk("fleet", "exec", "cam-1", "ping", "--broker", "../ops/conf/operator.yaml")

    # then the certificates were found beside the file and the device answered
    assert code == 0, err
    assert json.loads(out)["ok"] is True


def test_fleet_exec_when_device_is_silent_then_one_line_error_and_exit_2(
    edge_sdk: Run, broker_yaml: Path, devices: Callable[..., SimDevice]
) -> None:
    devices("cam-1", behaviour="silent")
    code, _, err = edge_sdk("fleet", "exec", "cam-1", "ping", "--broker", broker_yaml, "--timeout", "0.5")
    assert code == 2
    assert err.startswith("error: device 'cam-1' did not answer 'ping'") and "Traceback" not in err


def test_fleet_exec_when_args_are_not_a_json_object_then_refused(edge_sdk: Run, broker_yaml: Path) -> None:
    code, _, err = edge_sdk("fleet", "exec", "cam-1", "ping", "--broker", broker_yaml, "--args", "[1]")
    assert code == 2 and "expected a JSON object" in err


def test_fleet_deploy_status_rollback_when_all_succeed_then_every_device_is_accounted_for(
    edge_sdk: Run,
    broker_yaml: Path,
    devices: Callable[..., SimDevice],
    signed: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    # given three devices on version 1
    sims = [devices(name) for name in NAMES]
    manifest, rollback = signed
    state = tmp_path / "rollouts.db"
    # when version 2 is rolled out
    code, out, err = edge_sdk(
        "fleet", "deploy", manifest, "--broker", broker_yaml, "--state", state, "--select", "profile=x86-cpu",
        "--first-wave", "1", "--rate", "10/s", "--abort-threshold", "0.2", "--rollback-manifest", rollback,
        "--id", "lobby-v2",
    )  # fmt: skip
    # then it completes with every device active
    assert code == 0, err
    assert "rollout lobby-v2: version 2 to 3 device(s)" in out
    assert "rollout lobby-v2: completed" in out and "3 active" in out
    assert all(sim.active_version == 2 for sim in sims)
    # and status shows it (latest rollout when no id is given)
    code, out, err = edge_sdk("fleet", "status", "--state", state)
    assert code == 0, err
    assert "lobby-v2" in out and "completed" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("cam-")]
    assert [(r[0], r[2], r[3]) for r in rows] == [(n, "active", "command") for n in NAMES]
    code, out, _ = edge_sdk("fleet", "status", "lobby-v2", "--state", state, "--json")
    assert json.loads(out)["counts"]["active"] == 3
    # and resuming a finished rollout, as the README writes it (no --broker: deploy's is kept), sends nothing again
    deploys = [sim.commands["deploy"] for sim in sims]
    code, out, err = edge_sdk("fleet", "resume", "lobby-v2", "--state", state)
    assert code == 0, err
    assert "rollout lobby-v2: completed" in out and [sim.commands["deploy"] for sim in sims] == deploys
    # when it is rolled back (--broker still overrides the kept file)
    code, out, err = edge_sdk("fleet", "rollback", "lobby-v2", "--broker", broker_yaml, "--state", state)
    assert code == 0, err
    assert "rolled_back" in out and "3 rolled_back" in out
    assert all(sim.active_version == 1 for sim in sims)


def test_fleet_deploy_when_the_first_wave_fails_then_aborted_and_exit_1(
    edge_sdk: Run,
    broker_yaml: Path,
    devices: Callable[..., SimDevice],
    signed: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    devices("cam-1", behaviour="health_fail")
    devices("cam-2")
    manifest, rollback = signed
    code, out, _ = edge_sdk(
        "fleet", "deploy", manifest, "--broker", broker_yaml, "--state", tmp_path / "r.db",
        "--first-wave", "1", "--rollback-manifest", rollback,
    )  # fmt: skip
    assert code == 1
    assert "aborted" in out and "1 pending" in out and "1 failed" in out


def test_fleet_status_when_there_is_no_state_file_then_one_line_error(edge_sdk: Run, tmp_path: Path) -> None:
    code, _, err = edge_sdk("fleet", "status", "--state", tmp_path / "none.db")
    assert code == 2 and "no rollout state file" in err


def test_parse_rate_when_units_differ_then_devices_per_minute() -> None:
    assert parse_rate("60/min") == 60 and parse_rate("2/s") == 120 and parse_rate("600/h") == 10
    assert parse_rate("15") == 15
    with pytest.raises(ConfigError, match="expected a positive rate"):
        parse_rate("fast")


def test_parse_selector_when_keys_repeat_then_they_combine() -> None:
    selector = parse_selector(("device=cam-1,cam-2", "profile=x86-cpu", "label.site=lyon"))
    assert selector is not None
    assert selector.device_ids == ["cam-1", "cam-2"] and selector.profiles == ["x86-cpu"]
    assert selector.labels == {"site": "lyon"}
    assert parse_selector(()) is None
    with pytest.raises(ConfigError, match=r"expected device=, profile= or label\.NAME="):
        parse_selector(("color=red",))


def test_fleet_deploy_when_given_the_key_and_the_first_wave_fails_then_each_device_is_signed_its_own_rollback(
    edge_sdk: Run,
    broker_yaml: Path,
    devices: Callable[..., SimDevice],
    signed: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    # given cam-1 on version 1 and cam-2 that fails its health check, and no pre-made rollback manifest
    healthy = devices("cam-1")
    devices("cam-2", behaviour="health_fail")
    manifest, _ = signed
    state = tmp_path / "r.db"
    code, out, _ = edge_sdk(
        "fleet", "deploy", manifest, "--broker", broker_yaml, "--state", state, "--first-wave", "2",
        "--key", tmp_path / "keys" / "fleet-signing.key", "--id", "keyed",
    )  # fmt: skip
    # then the rollout aborts and cam-1 went back to version 1 with a rollback signed for it
    assert code == 1
    assert "aborted" in out and "1 rolled_back" in out and "1 failed" in out and "note:" not in out
    assert healthy.active_version == 1 and healthy.commands["rollback"] == 1
    code, out, _ = edge_sdk("fleet", "status", "keyed", "--state", state, "--json")
    rows = {d["device"]: d for d in json.loads(out)["devices"]}
    assert rows["cam-1"]["outcome"] == "rolled_back" and rows["cam-1"]["rollback_signed"]
    assert "signed for this device" in rows["cam-1"]["reason"]


def test_fleet_deploy_when_the_key_file_is_missing_then_one_line_error(
    edge_sdk: Run, broker_yaml: Path, signed: tuple[Path, Path], tmp_path: Path
) -> None:
    manifest, _ = signed
    code, _, err = edge_sdk(
        "fleet", "deploy", manifest, "--broker", broker_yaml, "--state", tmp_path / "r.db",
        "--key", tmp_path / "nope.key",
    )  # fmt: skip
    assert code == 2 and "nope.key" in err and "not found" in err


def test_fleet_resume_when_the_broker_file_deploy_used_is_gone_then_asks_for_broker_and_takes_it(
    edge_sdk: Run,
    broker_yaml: Path,
    devices: Callable[..., SimDevice],
    signed: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    # given a rollout deployed with a broker file that was then moved away
    devices("cam-1")
    manifest, rollback = signed
    state = tmp_path / "rollouts.db"
    moved = tmp_path / "moved.yaml"
    code, _, err = edge_sdk(
        "fleet", "deploy", manifest, "--broker", broker_yaml, "--state", state, "--select", "device=cam-1",
        "--rollback-manifest", rollback, "--id", "moved-v2",
    )  # fmt: skip
    assert code == 0, err
    broker_yaml.rename(moved)

    # when it is resumed without --broker, it says which file it looked for and what to do
    code, _, err = edge_sdk("fleet", "resume", "moved-v2", "--state", state)
    assert code == 2
    assert f"deployed with the broker file {broker_yaml}, which is gone: give --broker" in err, err

    # and with --broker it goes on
    code, out, err = edge_sdk("fleet", "resume", "moved-v2", "--state", state, "--broker", moved)
    assert code == 0, err
    assert "rollout moved-v2: completed" in out
