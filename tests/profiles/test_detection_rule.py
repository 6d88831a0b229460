"""DetectionRule.mismatches: what a host lacks for a profile, and which of it makes the profile unusable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from edge_sdk.core.host import HostFacts
from edge_sdk.profiles import ProfileCatalog
from edge_sdk.profiles.model import DetectionRule

X86_SERVER = HostFacts(arch="x86_64", cpu_flags=frozenset({"sse4_2", "avx2"}))
ORIN = HostFacts(
    arch="aarch64",
    tegra_release="# R36 (release), REVISION: 3.0",
    device_tree_model="NVIDIA Jetson AGX Orin Developer Kit",
    device_tree_compatible=("nvidia,p3737-0000+p3701-0000", "nvidia,tegra234"),
    dla_cores=2,
)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"arch": ["aarch64"]}, "wrong architecture: profile is for aarch64, this host is x86_64"),
        ({"tegra": True}, "needs a Jetson (Tegra) board"),
        ({"board_contains": ["Orin", "tegra234"]}, "needs a board named like Orin or tegra234"),
        ({"dla": True}, "needs NVDLA cores"),
        ({"npu": True}, "needs an Ascend NPU"),
        ({"nvidia_gpu": True}, "needs an NVIDIA GPU"),
        ({"cpu_flags_all": ["avx2", "avx512f"]}, "needs CPU flags avx512f"),
    ],
)
def test_mismatches_when_a_required_condition_fails_names_it_and_the_profile_is_unusable(
    rule: dict[str, Any], expected: str
) -> None:
    # Given a plain x86 server and a rule that requires something it lacks
    detection = DetectionRule.model_validate(rule)

    # When the rule is held against it
    everything, required = detection.mismatches(X86_SERVER), detection.mismatches(X86_SERVER, required_only=True)

    # Then one line says what is missing, it counts for usability, and detection does not match
    assert len(everything) == 1 and everything[0].startswith(expected), f"expected {expected!r}, got {everything}"
    assert required == everything, "a required condition makes the profile unusable"
    assert not detection.matches(X86_SERVER), "matches() is 'no mismatches'"


@pytest.mark.parametrize("rule", [{"tegra": False}, {"dla": False}, {"npu": False, "tegra": False}])
def test_mismatches_when_only_an_exclusion_fails_steers_detection_but_keeps_the_profile_usable(
    rule: dict[str, Any],
) -> None:
    # Given a Jetson and a rule that excludes Jetsons or DLA (like arm-cpu's tegra: false)
    detection = DetectionRule.model_validate({"arch": ["aarch64"], **rule})

    # When the rule is held against it
    everything, required = detection.mismatches(ORIN), detection.mismatches(ORIN, required_only=True)

    # Then detection skips the profile, but nothing the profile needs to run is missing
    assert everything, "the exclusion must keep the profile from being detected here"
    assert not detection.matches(ORIN)
    assert required == [], f"an exclusion must not make the profile unusable, got {required}"


def test_mismatches_when_every_condition_holds_is_empty() -> None:
    detection = DetectionRule(arch=["aarch64"], tegra=True, board_contains=["orin"], dla=True, npu=False)
    assert detection.mismatches(ORIN) == [], "an Orin with DLA meets the DLA profile's rule"
    assert detection.matches(ORIN)


@pytest.mark.parametrize(
    ("profile", "host", "first"),
    [
        ("jetson-orin-gpu", "x86-server-gpu", "wrong architecture: profile is for aarch64, this host is x86_64"),
        ("arm-cpu", "x86-laptop", "wrong architecture: profile is for aarch64, this host is x86_64"),
        ("jetson-orin-dla", "raspberry-pi-5", "needs a Jetson (Tegra) board"),
        ("x86-nvidia", "x86-laptop", "needs an NVIDIA GPU"),
        ("atlas-npu", "x86-server-gpu", "needs an Ascend NPU"),
    ],
)
def test_mismatches_when_a_shipped_profile_meets_the_wrong_host_says_why_first(
    shipped_catalog: ProfileCatalog, facts_of: Callable[[str], HostFacts], profile: str, host: str, first: str
) -> None:
    unmet = shipped_catalog.load(profile).detect.mismatches(facts_of(host), required_only=True)
    assert unmet and unmet[0].startswith(first), f"{profile} on {host}: expected {first!r} first, got {unmet}"


def test_mismatches_when_arm_cpu_meets_a_jetson_keeps_it_usable(
    shipped_catalog: ProfileCatalog, facts_of: Callable[[str], HostFacts]
) -> None:
    # Given arm-cpu (tegra: false, npu: false) and a Jetson AGX Orin
    rule, orin = shipped_catalog.load("arm-cpu").detect, facts_of("jetson-agx-orin-jp6")

    # Then detection leaves it to the Jetson profiles, but a Jetson can run it
    assert not rule.matches(orin), "a Jetson must be detected as a Jetson, not arm-cpu"
    assert rule.mismatches(orin, required_only=True) == [], "arm-cpu runs on a Jetson's CPU"
