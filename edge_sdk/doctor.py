"""What this host is, what the SDK can use on it, and what is missing with the command to fix it."""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from edge_sdk.backends.onnxruntime import providers
from edge_sdk.backends.registry import get_backend
from edge_sdk.core.errors import BackendUnavailableError, EdgeSDKError
from edge_sdk.core.host import HostFacts, HostProbe
from edge_sdk.profiles import ProfileCatalog

# (distribution names that provide it, import name, why, install command)
PACKAGES: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("numpy",), "numpy", "arrays", "pip install numpy"),
    (("onnx",), "onnx", "model checks and graph passes", "pip install onnx"),
    (
        ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-cann"),
        "onnxruntime",
        "onnxruntime backend",
        "pip install 'edge-sdk[cpu]'",
    ),
    (
        ("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
        "cv2",
        "video and image I/O",
        "pip install 'edge-sdk[opencv]'",
    ),
    (("pydantic",), "pydantic", "configuration", "pip install pydantic"),
    (("paho-mqtt",), "paho", "MQTT sinks and fleet control", "pip install paho-mqtt"),
)


@dataclass(frozen=True)
class PackageStatus:
    name: str
    purpose: str
    version: str | None
    install: str


@dataclass(frozen=True)
class ProfileStatus:
    name: str
    usable: bool
    problem: str | None
    note: str | None = None
    """For a usable profile: what its backend skips on this host (providers that cannot load)."""


@dataclass(frozen=True)
class DoctorReport:
    python: str
    host: dict[str, Any]
    detected_profile: str | None
    detection_problem: str | None
    packages: list[PackageStatus]
    onnxruntime_providers: list[str]
    profiles: list[ProfileStatus]
    provider_status: dict[str, str] = field(default_factory=dict)
    """Each listed provider: "usable" or "listed but cannot load: <missing library; how to install it>"."""
    tools: dict[str, str | None] = field(default_factory=dict)

    @property
    def missing(self) -> list[PackageStatus]:
        return [p for p in self.packages if p.version is None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(catalog: ProfileCatalog, facts: HostFacts | None = None) -> DoctorReport:
    facts = facts or HostProbe().facts()
    try:
        detected, problem = catalog.detect(facts).name, None
    except EdgeSDKError as exc:
        detected, problem = None, str(exc)
    profiles = [_profile_status(catalog, name, facts) for name in catalog.names()]
    host = asdict(facts) | {"cpu_flags": len(facts.cpu_flags), "device_identity": facts.device_identity()}
    return DoctorReport(
        python=platform.python_version(),
        host=host,
        detected_profile=detected,
        detection_problem=problem,
        packages=[PackageStatus(imp, why, _version(dists, imp), cmd) for dists, imp, why, cmd in PACKAGES],
        onnxruntime_providers=_ort_providers(),
        profiles=profiles,
        provider_status=_provider_status(),
        tools={"mosquitto": shutil.which("mosquitto"), "nvidia-smi": shutil.which("nvidia-smi")},
    )


def _profile_status(catalog: ProfileCatalog, name: str, facts: HostFacts) -> ProfileStatus:
    """Usable when the host has what the profile needs, then when its backend can run it here."""
    try:
        profile = catalog.load(name)
        if unmet := profile.detect.mismatches(facts, required_only=True):
            return ProfileStatus(name, False, unmet[0])
        backend = get_backend(profile.engine.backend)
        backend.builder().check(profile.engine, profile.default_precision)
    except EdgeSDKError as exc:
        return ProfileStatus(name, False, str(exc))
    return ProfileStatus(name, True, None, "; ".join(backend.host_notes(profile.engine)) or None)


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


def _ort_providers() -> list[str]:
    try:
        return providers.available_providers()
    except BackendUnavailableError:  # no onnxruntime: the packages table says how to install it
        return []


def _provider_status() -> dict[str, str]:
    status = {}
    for name in _ort_providers():
        problem = providers.provider_load_problem(name)
        status[name] = "usable" if problem is None else f"listed but cannot load: {problem}"
    return status
