"""`edge-sdk doctor` in-process: each provider's state, and profile usability that follows the host."""

from __future__ import annotations

import json
import platform

import pytest

from .conftest import Run

x86_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="checks what an x86 host says of ARM profiles")


@x86_only
def test_doctor_when_host_is_x86_calls_arm_cpu_the_wrong_architecture(
    edge_sdk: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a wide terminal, so table cells are not wrapped
    monkeypatch.setenv("COLUMNS", "200")

    # When doctor runs on this x86 host
    code, out, err = edge_sdk("doctor")

    # Then arm-cpu is not usable for the right reason, not for want of a pip package
    assert code == 0, err
    arm_cpu = next(line for line in out.splitlines() if "arm-cpu" in line)
    assert "wrong architecture: profile is for aarch64, this host is x86_64" in arm_cpu, arm_cpu
    assert "pip install" not in arm_cpu, "arm-cpu on x86 is not fixed by installing anything"
    assert "CPUExecutionProvider: usable" in out, "doctor lists each provider's state"


@x86_only
def test_doctor_when_host_is_x86_does_not_call_jetson_profiles_usable(edge_sdk: Run) -> None:
    code, out, err = edge_sdk("doctor", "--json")
    assert code == 0, err
    report = json.loads(out)
    profiles = {p["name"]: p for p in report["profiles"]}
    for name in ("jetson-orin-dla", "jetson-orin-gpu"):
        assert not profiles[name]["usable"], f"{name} must not be usable on an x86 host"
        assert profiles[name]["problem"].startswith("wrong architecture"), profiles[name]["problem"]
    assert report["backends"]["onnxruntime"]["CPUExecutionProvider"] == "usable"


@x86_only
def test_doctor_when_json_says_whether_installing_can_help_each_profile(edge_sdk: Run) -> None:
    code, out, err = edge_sdk("doctor", "--format", "json")

    assert code == 0, err
    profiles = {p["name"]: p for p in json.loads(out)["profiles"]}
    assert profiles["arm-cpu"]["cause"] == "host", "the box, not a package, keeps arm-cpu from running on x86"
    assert profiles["x86-cpu"]["usable"] and profiles["x86-cpu"]["cause"] is None
