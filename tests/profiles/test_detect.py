"""Profile detection on fixture hosts built from real host files (see tests/fixtures/hosts/README.md)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.host import HostFacts, HostProbe
from edge_sdk.profiles import ProfileCatalog

HostFactsOf = Callable[[str], HostFacts]

EXPECTED_PROFILE = {
    "jetson-agx-orin-jp6": "jetson-orin-dla",
    "jetson-orin-nano-jp6": "jetson-orin-gpu",
    "jetson-agx-orin-jp5": "jetson-orin-dla",
    "atlas-310p": "atlas-npu",
    "raspberry-pi-5": "arm-cpu",
    "x86-server-gpu": "x86-nvidia",
    "x86-laptop": "x86-cpu",
}

ORIN_FLAGS = {"asimd", "asimdhp", "asimddp", "paca", "pacg"}

# Facts each fixture host must yield; fields left out are checked by other tests.
EXPECTED_FACTS: dict[str, dict[str, object]] = {
    "jetson-agx-orin-jp6": {
        "arch": "aarch64",
        "is_tegra": True,
        "dla_cores": 2,
        "npu_devices": 0,
        "npu_chip": None,
        "nvidia_gpus": (),
        "device_tree_model": "NVIDIA Jetson AGX Orin Developer Kit",
        "device_tree_compatible": ("nvidia,p3737-0000+p3701-0000", "nvidia,p3701-0000", "nvidia,tegra234"),
        "cpu_model": "0xd42",
    },
    "jetson-orin-nano-jp6": {
        "arch": "aarch64",
        "is_tegra": True,
        "dla_cores": 0,
        "npu_devices": 0,
        "npu_chip": None,
        "nvidia_gpus": (),
        "device_tree_model": "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
    },
    "jetson-agx-orin-jp5": {
        "arch": "aarch64",
        "is_tegra": True,
        "dla_cores": 2,
        "npu_devices": 0,
        "npu_chip": None,
        "nvidia_gpus": (),
        "device_tree_model": "Jetson AGX Orin Developer Kit",
    },
    "atlas-310p": {
        "arch": "aarch64",
        "is_tegra": False,
        "dla_cores": 0,
        "npu_devices": 2,
        "npu_chip": "310P3",
        "nvidia_gpus": (),
        "device_tree_model": None,
        "cpu_model": "0xd01",
    },
    "raspberry-pi-5": {
        "arch": "aarch64",
        "is_tegra": False,
        "dla_cores": 0,
        "npu_devices": 0,
        "npu_chip": None,
        "nvidia_gpus": (),
        "device_tree_model": "Raspberry Pi 5 Model B Rev 1.0",
        "device_tree_compatible": ("raspberrypi,5-model-b", "brcm,bcm2712"),
        "cpu_model": "Raspberry Pi 5 Model B Rev 1.0",
    },
    "x86-server-gpu": {
        "arch": "x86_64",
        "is_tegra": False,
        "dla_cores": 0,
        "npu_devices": 0,
        "npu_chip": None,
        "nvidia_gpus": ("Tesla T4",),
        "device_tree_model": None,
        "cpu_model": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    },
    "x86-laptop": {
        "arch": "x86_64",
        "is_tegra": False,
        "dla_cores": 0,
        "npu_devices": 0,
        "npu_chip": None,
        "nvidia_gpus": (),
        "device_tree_model": None,
        "cpu_model": "11th Gen Intel(R) Core(TM) i5-1135G7 @ 2.40GHz",
    },
}

# `npu-smi info` as printed by other Ascend parts, verbatim (public logs and Ascend ModelZoo docs).
NPU_SMI_910B2 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.7                   Version: 23.0.7                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B2               | OK            | 96.5        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          29954/ 65536         |
+===========================+===============+====================================================+
"""
NPU_SMI_310B4 = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                                 Version: 23.0.rc3                                     |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 0       310B4                 | OK              | 7.2          37                15    / 15            |
| 0       0                     | NA              | 0            1797 / 3513                             |
+===============================+=================+======================================================+
"""


@pytest.mark.parametrize(("host", "expected"), EXPECTED_PROFILE.items(), ids=EXPECTED_PROFILE.keys())
def test_detect_when_probing_fixture_host_picks_its_profile(
    host: str, expected: str, shipped_catalog: ProfileCatalog, facts_of: HostFactsOf
) -> None:
    # Given the facts probed from a fixture host
    facts = facts_of(host)

    # When the shipped catalog detects a profile for them
    profile = shipped_catalog.detect(facts)

    # Then it is the profile written for that kind of box
    assert profile.name == expected, f"{host} should be detected as {expected}, got {profile.name} from {facts}"


@pytest.mark.parametrize(("host", "expected"), EXPECTED_FACTS.items(), ids=EXPECTED_FACTS.keys())
def test_probe_when_reading_fixture_host_reports_its_hardware(
    host: str, expected: dict[str, object], facts_of: HostFactsOf
) -> None:
    # Given a fixture host with known hardware
    # When it is probed
    facts = facts_of(host)

    # Then every listed fact matches what the host files say
    actual = {field: getattr(facts, field) for field in expected}
    assert actual == expected, f"probing {host} should report its hardware as written in its files"


def test_probe_when_host_is_jetson_reads_release_and_neon_flags(facts_of: HostFactsOf) -> None:
    # Given the JetPack 5 and JetPack 6 AGX Orin fixtures
    # When both are probed
    jp5, jp6 = facts_of("jetson-agx-orin-jp5"), facts_of("jetson-agx-orin-jp6")

    # Then the L4T release line is kept and the cpuinfo Features line becomes the CPU flags
    assert (jp5.tegra_release or "").startswith("# R35 (release), REVISION: 4.1,"), (
        "the JetPack 5 host should report its R35 nv_tegra_release"
    )
    assert (jp6.tegra_release or "").startswith("# R36 (release), REVISION: 3.0,"), (
        "the JetPack 6 host should report its R36 nv_tegra_release"
    )
    assert jp6.cpu_flags >= ORIN_FLAGS, "aarch64 'Features' should be read as CPU flags"


def test_probe_when_host_is_x86_reads_flags_line(facts_of: HostFactsOf) -> None:
    # Given the x86 fixtures
    # When they are probed
    server, laptop = facts_of("x86-server-gpu"), facts_of("x86-laptop")

    # Then the cpuinfo 'flags' line is parsed into individual flags
    assert {"avx2", "avx512f", "fma"} <= server.cpu_flags, "x86 'flags' should be read as CPU flags"
    assert "avx512_vp2intersect" in laptop.cpu_flags, "the whole flags line should be read, up to its last flag"
    assert "arch_capabilities" in laptop.cpu_flags, "the last flag on the line should be kept"


def test_probe_when_host_has_davinci_manager_counts_only_numbered_npus(facts_of: HostFactsOf) -> None:
    # Given the Atlas fixture, whose /dev has davinci0, davinci1 and davinci_manager
    # When it is probed
    facts = facts_of("atlas-310p")

    # Then only the numbered NPU nodes are counted
    assert facts.npu_devices == 2, "davinci_manager is the management node, not an NPU"


def test_probe_when_fixture_host_is_probed_asks_for_npu_and_gpu_listings(hosts_dir: Path) -> None:
    # Given a probe whose command runner records what it is asked to run
    calls: list[list[str]] = []

    def run(argv: list[str]) -> str | None:
        calls.append(list(argv))
        return None

    # When facts are read
    HostProbe(root=hosts_dir / "x86-laptop", run=run).facts()

    # Then it ran exactly the two listing commands, through the injected runner
    assert sorted(calls) == [["npu-smi", "info"], ["nvidia-smi", "-L"]], (
        "the probe should query npu-smi and nvidia-smi through the injected runner only"
    )


@pytest.mark.parametrize(
    ("listing", "chip"),
    [(NPU_SMI_910B2, "910B2"), (NPU_SMI_310B4, "310B4")],
    ids=["atlas-800-910b2", "atlas-200i-dk-310b4"],
)
def test_probe_when_npu_smi_prints_a_table_reads_the_chip_name(tmp_path: Path, listing: str, chip: str) -> None:
    # Given a host whose npu-smi prints a real table, with the version header and HBM columns
    def run(argv: list[str]) -> str | None:
        return listing if argv == ["npu-smi", "info"] else None

    # When it is probed
    facts = HostProbe(root=tmp_path, run=run, arch="aarch64").facts()

    # Then the chip name is the Name cell of the first NPU row
    assert facts.npu_chip == chip, f"npu-smi's table should yield chip {chip}"


def test_probe_when_arch_is_passed_normalises_it_and_ignores_kernel_arch(hosts_dir: Path) -> None:
    # Given the x86 laptop fixture, whose kernel says x86_64
    root = hosts_dir / "x86-laptop"

    # When the probe is told the arch in Debian spelling
    facts = HostProbe(root=root, run=lambda argv: None, arch="arm64").facts()

    # Then the given arch wins and is normalised to the kernel spelling
    assert facts.arch == "aarch64", "an explicit arch should override proc/sys/kernel/arch and be normalised"


def test_detect_when_several_profiles_match_picks_highest_priority(
    shipped_catalog: ProfileCatalog, facts_of: HostFactsOf
) -> None:
    # Given hosts that more than one shipped profile matches
    cases = {"jetson-agx-orin-jp6": "jetson-orin-dla", "x86-server-gpu": "x86-nvidia"}

    for host, winner in cases.items():
        facts = facts_of(host)
        matching = {p.name: p.priority for p in shipped_catalog.load_all() if p.detect.matches(facts)}

        # When detection runs
        detected = shipped_catalog.detect(facts)

        # Then the match with the highest priority wins
        assert len(matching) > 1, f"{host} should match several profiles for this test to mean anything: {matching}"
        assert detected.name == winner == max(matching, key=matching.__getitem__), (
            f"{host} matches {matching}; the highest priority should win"
        )


def test_detect_when_no_profile_matches_raises_config_error(shipped_catalog: ProfileCatalog) -> None:
    # Given a host no shipped profile covers
    facts = HostFacts(arch="riscv64")

    # When detection runs
    with pytest.raises(ConfigError) as raised:
        shipped_catalog.detect(facts)

    # Then the error says which arch was seen and how to get past it
    message = str(raised.value)
    assert "riscv64" in message, "the error should name the host arch that matched nothing"
    assert "--profile" in message, "the error should tell the user how to pick a profile by hand"


def test_device_identity_when_hosts_differ_is_distinct(facts_of: HostFactsOf) -> None:
    # Given every fixture host
    identities = {host: facts_of(host).device_identity() for host in EXPECTED_PROFILE}

    # When their device identities are compared pairwise
    clashes = [(a, b) for a, b in combinations(identities, 2) if identities[a] == identities[b]]

    # Then no two hosts share one, so no host reuses an engine built for another
    assert not clashes, f"device identities should differ between hosts, but these clash: {clashes}"


def test_device_identity_when_same_host_is_probed_twice_is_stable(facts_of: HostFactsOf) -> None:
    # Given one fixture host
    # When it is probed twice
    first, second = facts_of("jetson-agx-orin-jp6"), facts_of("jetson-agx-orin-jp6")

    # Then the identity is the same string, so cached engines are found again
    assert first.device_identity() == second.device_identity(), "device identity should be stable across probes"
