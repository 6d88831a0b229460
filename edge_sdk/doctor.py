"""What this host is, what the SDK can use on it, and what is missing with the command to fix it."""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from edge_sdk.backends.backend import Package
from edge_sdk.backends.registry import BACKENDS
from edge_sdk.core.errors import EdgeSDKError
from edge_sdk.core.host import HostFacts, HostProbe
from edge_sdk.profiles import ProfileCatalog
from edge_sdk.profiles.route import choose_route

PACKAGES: tuple[Package, ...] = (
    Package(("numpy",), "numpy", "arrays", "pip install numpy"),
    Package(("onnx",), "onnx", "model checks and graph passes", "pip install onnx"),
    Package(
        ("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
        "cv2",
        "video and image I/O",
        "pip install 'edge-sdk[opencv]'",
    ),
    Package(("pydantic",), "pydantic", "configuration", "pip install pydantic"),
    Package(("paho-mqtt",), "paho", "MQTT sinks and fleet control", "pip install paho-mqtt"),
)
"""What every install needs; each backend adds its own packages (`Backend.packages`)."""


@dataclass(frozen=True)
class PackageStatus:
    name: str
    purpose: str
    version: str | None
    install: str


ProblemCause = Literal["host", "backend", "profile"]
"""Why a profile cannot run here: "host", this box lacks what the profile is for (architecture, board,
accelerator), which no install fixes; "backend", its backend cannot run it here (a package or a library
is missing: the problem says what to install); "profile", the profile file itself does not load."""


@dataclass(frozen=True)
class ProfileStatus:
    name: str
    usable: bool
    problem: str | None
    note: str | None = None
    """For a usable profile: what its backend skips on this host (providers that cannot load)."""
    cause: ProblemCause | None = None


@dataclass(frozen=True)
class DoctorReport:
    python: str
    host: dict[str, Any]
    detected_profile: str | None
    detection_problem: str | None
    packages: list[PackageStatus]
    profiles: list[ProfileStatus]
    backends: dict[str, dict[str, str]] = field(default_factory=dict)
    """What each registered backend reports of itself here (ONNX Runtime: each provider it lists, "usable"
    or "listed but cannot load: <missing library; how to install it>")."""
    tools: dict[str, str | None] = field(default_factory=dict)

    @property
    def missing(self) -> list[PackageStatus]:
        return [p for p in self.packages if p.version is None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(catalog: ProfileCatalog, facts: HostFacts | None = None) -> DoctorReport:
    facts = facts or HostProbe().facts()
    try:
        detected, problem = catalog.detect(facts, announce=False).name, None
    except EdgeSDKError as exc:
        detected, problem = None, str(exc)
    profiles = [_profile_status(catalog, name, facts) for name in catalog.names()]
    host = asdict(facts) | {"cpu_flags": len(facts.cpu_flags), "device_identity": facts.device_identity()}
    return DoctorReport(
        python=platform.python_version(),
        host=host,
        detected_profile=detected,
        detection_problem=problem,
        packages=[_package_status(package) for package in _packages()],
        profiles=profiles,
        backends={name: backend.doctor_facts() for name, backend in BACKENDS.items()},
        tools={"mosquitto": shutil.which("mosquitto"), "nvidia-smi": shutil.which("nvidia-smi")},
    )


def _profile_status(catalog: ProfileCatalog, name: str, facts: HostFacts) -> ProfileStatus:
    """Usable when the host has what the profile needs, then when its backend can run it here. The host
    comes first: on a box the profile is not for, the backend's install advice would send the user
    after a package that cannot help."""
    try:
        written = catalog.load(name, as_written=True)
    except EdgeSDKError as exc:
        return ProfileStatus(name, False, str(exc), cause="profile")
    if unmet := written.detect.mismatches(facts, required_only=True):
        return ProfileStatus(name, False, unmet[0], cause="host")
    profile, fallback_reason = choose_route(written, announce=False)
    route = [f"route: {profile.engine.backend}" + (f", because {fallback_reason}" if fallback_reason else "")]
    try:
        backend = profile.backend()
        backend.builder().check(profile.engine, profile.default_precision)
    except EdgeSDKError as exc:
        problem = f"{route[0]}; {exc}" if written.fallback_engine is not None else str(exc)
        return ProfileStatus(name, False, problem, cause="backend")
    notes = route if written.fallback_engine is not None else []
    return ProfileStatus(name, True, None, "; ".join(notes + backend.host_notes(profile.engine)) or None)


def _packages() -> list[Package]:
    packages = list(PACKAGES)
    for backend in BACKENDS.values():
        packages += [package for package in backend.packages if package not in packages]
    return packages


def _package_status(package: Package) -> PackageStatus:
    return PackageStatus(
        package.module, package.purpose, _version(package.distributions, package.module), package.install
    )


def _version(distributions: tuple[str, ...], module: str) -> str | None:
    for dist in distributions:
        try:
            return f"{importlib.metadata.version(dist)} ({dist})"
        except importlib.metadata.PackageNotFoundError:
            continue
    # A system build without pip metadata, like the OpenCV that JetPack ships.
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return None
    return f"{getattr(imported, '__version__', 'unknown')} (system)"
