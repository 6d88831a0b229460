"""Facts about the host, read through an injectable probe so tests can present any kind of box."""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CommandRunner = Callable[[list[str]], str | None]
"""Runs a command and returns its stdout, or None when the command is absent or fails."""


def run_command(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass(frozen=True)
class HostFacts:
    """What detection rules and engine cache keys look at."""

    arch: str
    cpu_model: str = ""
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    tegra_release: str | None = None
    device_tree_model: str | None = None
    device_tree_compatible: tuple[str, ...] = ()
    dla_cores: int = 0
    npu_devices: int = 0
    npu_chip: str | None = None
    nvidia_gpus: tuple[str, ...] = ()

    @property
    def is_tegra(self) -> bool:
        return (
            self.tegra_release is not None
            or any(c.startswith("nvidia,tegra") for c in self.device_tree_compatible)
            or "jetson" in (self.device_tree_model or "").lower()
        )

    @property
    def board(self) -> str:
        """Device-tree model and compatible strings, for board matching."""
        return " ".join([self.device_tree_model or "", *self.device_tree_compatible])

    def device_identity(self) -> str:
        """A stable string naming the hardware an engine was optimised for."""
        flags = hashlib.sha256(" ".join(sorted(self.cpu_flags)).encode()).hexdigest()[:12]
        parts = [f"arch={self.arch}", f"cpu={self.cpu_model}", f"cpu_flags={flags}"]
        if self.tegra_release:  # the L4T release fixes the TensorRT/CUDA versions engines were built with
            parts.append("l4t=" + self.tegra_release.splitlines()[0].split(", GCID")[0].lstrip("# "))
        if self.device_tree_model:
            parts.append(f"board={self.device_tree_model}")
        if self.dla_cores:
            parts.append(f"dla_cores={self.dla_cores}")
        if self.npu_chip or self.npu_devices:
            parts.append(f"npu={self.npu_chip or 'unknown'}x{self.npu_devices}")
        if self.nvidia_gpus:
            parts.append("gpus=" + ",".join(self.nvidia_gpus))
        return ";".join(parts)


class HostProbe:
    """Reads host facts below `root` (normally `/`) and from commands run through `run`."""

    def __init__(self, root: Path = Path("/"), run: CommandRunner = run_command, arch: str | None = None):
        self.root = root
        self.run = run
        self.arch = arch

    def facts(self) -> HostFacts:
        cpuinfo = self._read("proc/cpuinfo") or ""
        # The running machine's arch only stands in when probing the real root.
        fallback = platform.machine() if self.root == Path("/") else "unknown"
        arch = self.arch or self._read("proc/sys/kernel/arch") or fallback
        return HostFacts(
            arch=_normalise_arch(arch.strip()),
            cpu_model=_cpuinfo_value(cpuinfo, ("model name", "Model", "Hardware", "CPU part")),
            cpu_flags=frozenset(_cpuinfo_value(cpuinfo, ("flags", "Features")).split()),
            tegra_release=self._read("etc/nv_tegra_release"),
            device_tree_model=(self._read("proc/device-tree/model") or "").strip("\0\n ") or None,
            device_tree_compatible=tuple(
                c for c in (self._read("proc/device-tree/compatible") or "").split("\0") if c.strip()
            ),
            dla_cores=self._dla_cores(),
            npu_devices=len([p for p in (self.root / "dev").glob("davinci[0-9]*")]),
            npu_chip=_npu_chip(self.run(["npu-smi", "info"])),
            nvidia_gpus=_nvidia_gpus(self.run(["nvidia-smi", "-L"])),
        )

    def _dla_cores(self) -> int:
        """Distinct NVDLA indices among device nodes (JetPack 5/6) and host1x platform devices."""
        patterns = ("dev/nvhost-ctrl-nvdla*", "dev/nvhost-nvdla*", "sys/devices/platform/**/*.nvdla[0-9]")
        names = [path.name for pattern in patterns for path in self.root.glob(pattern)]
        return len({match.group(1) for name in names if (match := re.search(r"nvdla(\d+)$", name))})

    def _read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None


def _normalise_arch(arch: str) -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch.lower(), arch.lower())


def _cpuinfo_value(cpuinfo: str, keys: tuple[str, ...]) -> str:
    for key in keys:
        for line in cpuinfo.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key:
                return value.strip()
    return ""


def _npu_chip(npu_smi: str | None) -> str | None:
    """Pick the chip name (e.g. '310P3', '910B') from `npu-smi info`'s table."""
    if not npu_smi:
        return None
    for line in npu_smi.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = cells[0].split() if cells else []
        if len(first) >= 2 and first[0].isdigit() and first[1][:3].isdigit():
            return first[1]
    return "unknown"


def _nvidia_gpus(listing: str | None) -> tuple[str, ...]:
    """Names from `nvidia-smi -L` lines like 'GPU 0: NVIDIA A10G (UUID: GPU-...)'."""
    if not listing:
        return ()
    names = []
    for line in listing.splitlines():
        if line.startswith("GPU ") and ":" in line:
            names.append(line.split(":", 1)[1].split("(UUID")[0].strip())
    return tuple(names)
