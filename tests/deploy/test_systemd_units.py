"""deploy/systemd/: the units pass `systemd-analyze verify` (Debian's systemd), a broken key fails it, and they
hold what issue 17 asks of them (notify with a watchdog, restarts, the service user, the sandbox, a stop
timeout above the runtime's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edge_sdk.fleet.device import agent as agent_module
from edge_sdk.fleet.device import pipelines as device_pipelines
from edge_sdk.pipeline.config import RuntimeSpec
from edge_sdk.pipeline.runtime import KILL_SECONDS

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
AGENT = UNITS / "edge-sdk-agent.service"
PIPELINE = UNITS / "edge-sdk-pipeline@.service"
ENROLL = UNITS / "edge-sdk-enroll.service"
BINARY = "/usr/local/bin/edge-sdk"
EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")

needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed (Debian's systemd package; make system-deps)"
)


def settings(unit: Path) -> dict[str, list[str]]:
    """Every `Key=value` of the unit by key (a key may repeat, e.g. Environment=), comments left out."""
    found: dict[str, list[str]] = {}
    for line in unit.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def one(unit: Path, key: str) -> str:
    values = settings(unit)[key]
    assert len(values) == 1, f"{unit.name}: {key}= once, got {values}"
    return values[0]


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "min": 60, "h": 3600}
    for suffix, factor in sorted(units.items(), key=lambda item: -len(item[0])):
        if value.endswith(suffix):
            return float(value.removesuffix(suffix)) * factor
    return float(value)


def verify(folder: Path, unit: Path, *, instance: str | None = None, edit: tuple[str, str] | None = None) -> str:
    """`systemd-analyze verify` on a copy of `unit` in `folder` whose ExecStart runs this venv's edge-sdk
    (the unit's /usr/local/bin/edge-sdk is not installed here); returns what it printed. `edit` replaces
    one line of the copy."""
    text = unit.read_text(encoding="utf-8")
    assert f"ExecStart={BINARY} " in text
    text = text.replace(f"ExecStart={BINARY} ", f"ExecStart={EDGE_SDK} ")
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / unit.name).write_text(text, encoding="utf-8")
    name = unit.name.replace("@.", f"@{instance}.") if instance else unit.name
    assert SYSTEMD_ANALYZE is not None
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", str(folder / name)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}".strip()


@needs_systemd_analyze
@pytest.mark.parametrize(
    ("unit", "instance"), [(AGENT, None), (PIPELINE, None), (PIPELINE, "front-door"), (ENROLL, None)]
)
def test_unit_passes_systemd_analyze_verify(tmp_path: Path, unit: Path, instance: str | None) -> None:
    said = verify(tmp_path, unit, instance=instance)
    assert said == "exit 0", f"systemd-analyze verify {unit.name} (instance {instance}) is not clean:\n{said}"


@needs_systemd_analyze
@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (("WatchdogSec=30s", "WatchdogSex=30s"), "Unknown key 'WatchdogSex'"),  # systemd ignores it, with a warning
        (("Type=notify", "Type=notifyy"), "notifyy"),
        (("RestartSec=", "RestartSec=soon\n#"), "soon"),
        (("NoNewPrivileges=yes", "NoNewPrivileges=maybe"), "maybe"),
    ],
    ids=["unknown-key", "bad-type", "bad-timespan", "bad-boolean"],
)
@pytest.mark.parametrize("unit", [AGENT, PIPELINE], ids=["agent", "pipeline"])
def test_unit_with_a_broken_setting_fails_the_check(
    tmp_path: Path, unit: Path, edit: tuple[str, str], complaint: str
) -> None:
    said = verify(tmp_path, unit, instance="cam" if "@" in unit.name else None, edit=edit)
    assert said != "exit 0" and complaint in said, f"the check must catch {edit[1]!r}:\n{said}"


@needs_systemd_analyze
def test_unit_whose_binary_is_missing_fails_the_check(tmp_path: Path) -> None:
    said = verify(tmp_path, AGENT, edit=(f"ExecStart={EDGE_SDK} ", "ExecStart=/nonexistent/edge-sdk "))
    assert said.startswith("exit 1") and "/nonexistent/edge-sdk" in said, said


def test_units_run_the_contract_commands() -> None:
    assert one(AGENT, "ExecStart") == f"{BINARY} agent --config /etc/edge-sdk/agent.yaml"
    assert one(PIPELINE, "ExecStart") == f"{BINARY} run /etc/edge-sdk/pipelines/%i.yaml"
    assert one(ENROLL, "ExecStart") == f"{BINARY} device enroll --config /etc/edge-sdk/agent.yaml"


def test_a_box_with_a_claim_enrolls_before_the_agent_starts_and_only_once() -> None:
    enroll = settings(ENROLL)
    assert "edge-sdk-agent.service" in one(ENROLL, "Before")
    assert "edge-sdk-enroll.service" in one(AGENT, "Wants") and "edge-sdk-enroll.service" in one(AGENT, "After")
    assert sorted(enroll["ConditionPathExists"]) == ["!/etc/edge-sdk/tls/device.pem", "/etc/edge-sdk/tls/claim.pem"]
    assert one(ENROLL, "Type") == "oneshot" and one(ENROLL, "TimeoutStartSec") == "infinity"
    assert one(ENROLL, "ReadWritePaths") == "/etc/edge-sdk/tls /var/lib/edge-sdk"
    assert one(ENROLL, "WantedBy") == "multi-user.target"


@pytest.mark.parametrize("unit", [AGENT, PIPELINE], ids=["agent", "pipeline"])
def test_units_notify_with_a_watchdog_restart_and_run_sandboxed_as_the_service_user(unit: Path) -> None:
    found = settings(unit)
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",  # `edge-sdk` is the main process and the one that notifies
        "User": "edge-sdk",
        "Group": "edge-sdk",
        "SupplementaryGroups": "video render",
        "ProtectSystem": "strict",
        "ReadWritePaths": "/var/lib/edge-sdk",
        "NoNewPrivileges": "yes",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "no",  # cameras, GPUs, NPUs and /dev/shm
        "KillSignal": "SIGTERM",
        "KillMode": "mixed",
    }
    assert {key: one(unit, key) for key in expected} == expected
    assert 10 <= seconds(one(unit, "WatchdogSec")) <= 120
    assert one(unit, "Restart") in ("always", "on-failure")
    assert seconds(one(unit, "RestartSec")) >= 1
    assert "StartLimitIntervalSec" in found
    assert "PYTHONUNBUFFERED=1" in found["Environment"]
    assert "EDGE_SDK_CACHE_DIR=/var/lib/edge-sdk/engines" in found["Environment"]


def test_pipeline_unit_stop_timeout_is_above_the_runtime_stop_timeout() -> None:
    default = RuntimeSpec.model_fields["stop_timeout_s"].default
    assert seconds(one(PIPELINE, "TimeoutStopSec")) >= 2 * (default + KILL_SECONDS)
    assert set(one(PIPELINE, "SuccessExitStatus").split()) == {"130", "143"}, "edge-sdk run exits 128 + signal"
    assert one(PIPELINE, "Restart") == "on-failure", "a pipeline whose sources end cleanly is not restarted"


def test_agent_unit_stop_timeout_covers_the_agent_stop() -> None:
    # inbox worker + one pipeline's drain (the agent waits up to pipelines.STOP_TIMEOUT_S) + disconnect
    needed = agent_module.STOP_TIMEOUT_S + device_pipelines.STOP_TIMEOUT_S + agent_module.STOP_TIMEOUT_S
    assert seconds(one(AGENT, "TimeoutStopSec")) > needed
    assert one(AGENT, "Restart") == "always", "the agent is the box's only remote control"
