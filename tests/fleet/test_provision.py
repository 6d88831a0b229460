"""`edge-sdk device provision` and `device status` in a throw-away root (tmp_path as --root), never on this
machine: what a fresh run creates, that a second run and --dry-run change nothing, file:line errors for a bad
provision.yaml, and units that systemd accepts and enables as `systemctl enable` would."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edge_sdk.cli.main import main
from edge_sdk.fleet.device.agent_config import load_agent_config
from edge_sdk.fleet.device.provision_steps import Step
from edge_sdk.profiles import ProfileCatalog

from ..conftest import REPO_ROOT

EDGE_SDK = Path(sys.executable).parent / "edge-sdk"
PROVISION = """\
device_id: cam-001
broker: {host: mqtt.example.com, port: 8883}
tls: {ca: ca.pem, cert: cam-001.pem, key: cam-001.key}
labels: {site: lyon}
profile: x86-cpu
pipelines:
  - {name: people, file: people.yaml}
trusted_keys: [signing.pub]
"""
EXPECTED = {
    "etc/edge-sdk/",
    "etc/edge-sdk/agent.yaml",
    "etc/edge-sdk/pipelines/",
    "etc/edge-sdk/pipelines/people.yaml",
    "etc/edge-sdk/tls/",
    "etc/edge-sdk/tls/ca.pem",
    "etc/edge-sdk/tls/device.pem",
    "etc/edge-sdk/tls/device.key",
    "etc/edge-sdk/trusted-keys/",
    "etc/edge-sdk/trusted-keys/signing.pub",
    "etc/systemd/system/",
    "etc/systemd/system/edge-sdk-agent.service",
    "etc/systemd/system/edge-sdk-enroll.service",
    "etc/systemd/system/edge-sdk-pipeline@.service",
    "etc/systemd/system/multi-user.target.wants/",
    "etc/systemd/system/multi-user.target.wants/edge-sdk-agent.service -> /etc/systemd/system/edge-sdk-agent.service",
    "etc/systemd/system/multi-user.target.wants/edge-sdk-enroll.service -> /etc/systemd/system/edge-sdk-enroll.service",
    "etc/systemd/system/multi-user.target.wants/edge-sdk-pipeline@people.service"
    " -> /etc/systemd/system/edge-sdk-pipeline@.service",
    "var/lib/edge-sdk/",
    "var/lib/edge-sdk/engines/",
    "var/lib/edge-sdk/spool/",
    "var/lib/edge-sdk/store/",
}


@pytest.fixture
def provision_file(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    for name, text in {
        "ca.pem": "CA\n",
        "cam-001.pem": "CERT\n",
        "cam-001.key": "KEY\n",
        "signing.pub": "PUB\n",
        "people.yaml": "name: people\n",
    }.items():
        (source / name).write_text(text)
    path = source / "provision.yaml"
    path.write_text(PROVISION + f"executable: {EDGE_SDK}\n")
    return path


def run(*args: str) -> tuple[int, str]:
    """`edge-sdk ARGS` as a user runs it (main: an error is one `error: ...` line and exit 2); stdout and stderr."""
    result = CliRunner().invoke(main_command, list(args))
    return result.exit_code, result.output


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def main_command(args: tuple[str, ...]) -> None:
    main(list(args))


def tree(root: Path) -> set[str]:
    """Every path below `root`: folders end in '/', links show their target."""
    found = set()
    for path in root.rglob("*"):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found.add(f"{name} -> {os.readlink(path)}")
        elif path.is_dir():
            found.add(name + "/")
        else:
            found.add(name)
    parents = {"etc/", "etc/systemd/", "var/", "var/lib/"}
    return found - parents


def snapshot(root: Path) -> dict[str, tuple[int, float, bytes]]:
    return {
        str(path): (path.lstat().st_mode, path.lstat().st_mtime, b"" if path.is_dir() else path.read_bytes())
        for path in root.rglob("*")
        if not path.is_symlink()
    }


def test_a_fresh_provision_creates_exactly_the_layout_and_a_valid_agent_config(
    tmp_path: Path, provision_file: Path
) -> None:
    box = tmp_path / "box"
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box))
    assert code == 0, output
    assert tree(box) == EXPECTED
    assert "provisioned: " in output.splitlines()[-1]
    assert "skipped   create the system user edge-sdk" in output, "under --root no user is made"

    agent = load_agent_config(box / "etc/edge-sdk/agent.yaml")
    assert (agent.device_id, agent.profile, agent.labels) == ("cam-001", "x86-cpu", {"site": "lyon"})
    assert agent.store_dir == Path("/var/lib/edge-sdk/store")
    assert agent.engine_cache_dir == Path("/var/lib/edge-sdk/engines")
    assert agent.broker.tls is not None and agent.broker.tls.key_file == Path("/etc/edge-sdk/tls/device.key")
    assert (box / "etc/edge-sdk/tls/device.key").read_text() == "KEY\n"
    assert stat.S_IMODE((box / "etc/edge-sdk/tls/device.key").stat().st_mode) == 0o640
    assert stat.S_IMODE((box / "var/lib/edge-sdk").stat().st_mode) == 0o750
    unit = (box / "etc/systemd/system/edge-sdk-agent.service").read_text()
    assert f"ExecStart={EDGE_SDK} agent --config /etc/edge-sdk/agent.yaml" in unit, "runs the configured edge-sdk"


def test_a_second_run_changes_nothing_and_says_so(tmp_path: Path, provision_file: Path) -> None:
    box = tmp_path / "box"
    assert run("device", "provision", "--config", str(provision_file), "--root", str(box))[0] == 0
    before = snapshot(box)
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box))
    assert code == 0, output
    assert snapshot(box) == before
    assert not [line for line in output.splitlines() if line.startswith("changed")]
    assert output.splitlines()[-1].startswith("provisioned already: none of ")


def test_a_changed_file_is_put_back_and_only_that_step_changes(tmp_path: Path, provision_file: Path) -> None:
    box = tmp_path / "box"
    run("device", "provision", "--config", str(provision_file), "--root", str(box))
    (box / "etc/edge-sdk/tls/ca.pem").write_text("tampered\n")
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box))
    assert code == 0, output
    assert [line for line in output.splitlines() if line.startswith("changed")] == [
        f"changed   file /etc/edge-sdk/tls/ca.pem (from {provision_file.parent / 'ca.pem'}; 0644 root:root)"
    ]
    assert (box / "etc/edge-sdk/tls/ca.pem").read_text() == "CA\n"


def test_dry_run_prints_every_step_and_changes_nothing(tmp_path: Path, provision_file: Path) -> None:
    box = tmp_path / "box"
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box), "--dry-run")
    assert code == 0, output
    assert not box.exists()
    lines = output.splitlines()
    assert any(line.startswith("todo      folder /var/lib/edge-sdk/store") for line in lines)
    assert any(line.startswith("todo      file /etc/edge-sdk/agent.yaml") for line in lines)
    assert any("enable edge-sdk-pipeline@people.service" in line for line in lines)
    assert lines[-1] == "dry run: 21 of 23 step(s) would change the box; nothing was changed"

    run("device", "provision", "--config", str(provision_file), "--root", str(box))
    before = snapshot(box)
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box), "--dry-run")
    assert snapshot(box) == before
    assert output.splitlines()[-1] == "dry run: 0 of 23 step(s) would change the box; nothing was changed"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("labels:", "label:"), "provision.yaml:4: key 'label': unknown key"),
        (
            ("broker: {host: mqtt.example.com, port: 8883}\n", ""),
            "provision.yaml:1: key 'broker': required key is missing",
        ),
        (("{ca: ca.pem, ", "{"), "provision.yaml:3: key 'tls.ca': required key is missing"),
        (
            ("  - {name: people, file: people.yaml}", "  - {name: people, fil: people.yaml}"),
            "provision.yaml:7: key 'pipelines.0.fil': unknown key",
        ),
        (("port: 8883", "port: 0"), "provision.yaml:2: key 'broker.port': Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_provision_file_gives_its_file_and_line(
    tmp_path: Path, provision_file: Path, edit: tuple[str, str], expected: str
) -> None:
    text = provision_file.read_text()
    assert edit[0] in text
    provision_file.write_text(text.replace(edit[0], edit[1], 1))
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(tmp_path / "box"))
    assert code != 0
    assert expected in output, output
    assert len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "box").exists()


def test_a_missing_source_file_fails_before_anything_changes(tmp_path: Path, provision_file: Path) -> None:
    (provision_file.parent / "cam-001.key").unlink()
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(tmp_path / "box"))
    assert code != 0
    assert "cam-001.key: cannot read" in output
    assert not (tmp_path / "box").exists()


def test_claim_mode_copies_the_claim_identity_for_enrollment(tmp_path: Path, provision_file: Path) -> None:
    source = provision_file.parent
    (source / "claim.pem").write_text("CLAIM\n")
    (source / "claim.key").write_text("CLAIMKEY\n")
    text = PROVISION.replace("{ca: ca.pem, cert: cam-001.pem, key: cam-001.key}", "{ca: ca.pem}")
    provision_file.write_text(text + "claim: {cert: claim.pem, key: claim.key}\n")
    box = tmp_path / "box"
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box))
    assert code == 0, output
    assert (box / "etc/edge-sdk/tls/claim.key").read_text() == "CLAIMKEY\n"
    assert not (box / "etc/edge-sdk/tls/device.key").exists(), "the box makes its own key when it enrolls"
    assert load_agent_config(box / "etc/edge-sdk/agent.yaml").device_id == "cam-001"


def test_auto_detects_this_hosts_profile(tmp_path: Path, provision_file: Path) -> None:
    provision_file.write_text(provision_file.read_text().replace("profile: x86-cpu", "profile: auto"))
    box = tmp_path / "box"
    assert run("device", "provision", "--config", str(provision_file), "--root", str(box))[0] == 0
    detected = ProfileCatalog().detect(announce=False).name
    assert load_agent_config(box / "etc/edge-sdk/agent.yaml").profile == detected


def test_status_reports_what_is_installed_and_enabled(tmp_path: Path, provision_file: Path) -> None:
    box = tmp_path / "box"
    code, output = run("device", "status", "--root", str(box))
    assert code == 0
    assert "agent config: /etc/edge-sdk/agent.yaml missing" in output

    run("device", "provision", "--config", str(provision_file), "--root", str(box))
    state = box / "var/lib/edge-sdk/enrollment.json"
    state.write_text(json.dumps({"state": "retrying", "attempts": 3, "last_error": "broker unreachable"}))
    code, output = run("device", "status", "--root", str(box))
    assert code == 0, output
    assert "folders: all present" in output
    assert "agent config: /etc/edge-sdk/agent.yaml valid (device cam-001, profile x86-cpu" in output
    assert "unit edge-sdk-agent.service: installed, enabled" in output
    assert "unit edge-sdk-pipeline@people.service: installed, enabled" in output
    assert "cannot tell what runs: a folder given with --root" in output
    assert "enrollment: retrying (attempts 3); last error: broker unreachable" in output

    found = json.loads(run("device", "status", "--root", str(box), "--json")[1])
    assert found["units"]["edge-sdk-agent.service"] == {"installed": True, "enabled": True, "active": None}
    assert found["agent_config"]["valid"] is True
    assert found["enrollment"]["state"] == "retrying"


@pytest.mark.skipif(shutil.which("systemctl") is None, reason="systemctl not installed (Debian's systemd package)")
def test_links_are_those_systemctl_enable_makes(tmp_path: Path, provision_file: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    run("device", "provision", "--config", str(provision_file), "--root", str(ours))
    units = theirs / "etc/systemd/system"
    units.mkdir(parents=True)
    for name in ("edge-sdk-agent.service", "edge-sdk-enroll.service", "edge-sdk-pipeline@.service"):
        shutil.copy(ours / "etc/systemd/system" / name, units / name)
    enabled = ["edge-sdk-agent.service", "edge-sdk-enroll.service", "edge-sdk-pipeline@people.service"]
    subprocess.run(
        ["systemctl", f"--root={theirs}", "enable", *enabled],
        check=True,
        capture_output=True,
    )
    links = {line for line in tree(theirs) if " -> " in line}
    assert links == {line for line in tree(ours) if " -> " in line}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_installed_units_pass_systemd_analyze_verify(tmp_path: Path, provision_file: Path) -> None:
    box = tmp_path / "box"
    run("device", "provision", "--config", str(provision_file), "--root", str(box))
    check = tmp_path / "check"
    check.mkdir()
    installed = box / "etc/systemd/system"
    shutil.copy(installed / "edge-sdk-agent.service", check / "edge-sdk-agent.service")
    shutil.copy(installed / "edge-sdk-enroll.service", check / "edge-sdk-enroll.service")
    shutil.copy(installed / "edge-sdk-pipeline@.service", check / "edge-sdk-pipeline@people.service")
    for name in ("edge-sdk-agent.service", "edge-sdk-enroll.service", "edge-sdk-pipeline@people.service"):
        done = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(check / name)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{name}: {done.stderr}"


def test_the_units_installed_are_deploy_systemds(tmp_path: Path, provision_file: Path) -> None:
    box = tmp_path / "box"
    provision_file.write_text(PROVISION)  # no executable: the one beside this Python
    run("device", "provision", "--config", str(provision_file), "--root", str(box))
    for name in ("edge-sdk-agent.service", "edge-sdk-enroll.service", "edge-sdk-pipeline@.service"):
        shipped = (REPO_ROOT / "deploy/systemd" / name).read_text()
        assert (box / "etc/systemd/system" / name).read_text() == shipped.replace(
            "/usr/local/bin/edge-sdk", str(EDGE_SDK)
        )


def test_the_guides_provision_file_provisions_a_box_and_its_error_example_is_real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guide = (REPO_ROOT / "docs" / "provision.md").read_text()
    (example,) = re.findall(r"```yaml\n(# provision\.yaml.*?)```", guide, re.S)
    source = tmp_path / "source"
    source.mkdir()
    for name in ("ca.pem", "cam-001.pem", "cam-001.key", "signing.pub", "people.yaml"):
        (source / name).write_text(f"{name}\n")
    (source / "provision.yaml").write_text(example)
    box = tmp_path / "box"
    code, output = run("device", "provision", "--config", str(source / "provision.yaml"), "--root", str(box))
    assert code == 0, output
    assert (
        "ExecStart=/opt/edge-sdk/bin/edge-sdk agent" in (box / "etc/systemd/system/edge-sdk-agent.service").read_text()
    )

    (error,) = re.findall(r"^(error: provision\.yaml:\d+: .*)$", guide, re.M)
    (source / "provision.yaml").write_text(example.replace("\nlabels:", "\nlabel:"))
    monkeypatch.chdir(source)
    code, output = run("device", "provision", "--config", "provision.yaml", "--root", str(box))
    assert output.strip() == error


def test_provisioning_this_machine_needs_root_and_says_so_in_one_line(
    provision_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    def never(step: Step, root: Path) -> None:
        raise AssertionError(f"a step ran on this machine: {step.describe()}")

    monkeypatch.setattr(Step, "apply", never)  # whatever happens, nothing here is changed
    code, output = run("device", "provision", "--config", str(provision_file))
    assert code == 2
    assert output.strip().splitlines() == [
        "error: provisioning this box writes /etc and /var/lib and creates a user: run it as root (sudo), "
        "or give --root DIR to provision a folder"
    ]


def test_a_claim_without_device_id_takes_the_host_name_and_a_claim_with_a_device_key_is_refused(
    tmp_path: Path, provision_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = provision_file.parent
    for name in ("claim.pem", "claim.key"):
        (source / name).write_text(f"{name}\n")
    claim = "claim: {cert: claim.pem, key: claim.key}\n"
    no_id = PROVISION.replace("device_id: cam-001\n", "").replace(", cert: cam-001.pem, key: cam-001.key", "")
    provision_file.write_text(no_id + claim)
    monkeypatch.setattr("socket.gethostname", lambda: "box-17.local")
    box = tmp_path / "box"
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box))
    assert code == 0, output
    assert load_agent_config(box / "etc/edge-sdk/agent.yaml").device_id == "box-17"

    provision_file.write_text(PROVISION + claim)
    code, output = run("device", "provision", "--config", str(provision_file), "--root", str(box))
    assert code == 2
    assert "provision.yaml:1: key '(top level)': Value error, expected 'claim' (the box makes its own key)" in output
