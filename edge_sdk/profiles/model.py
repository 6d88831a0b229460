"""The DeviceProfile schema: what a box is and how engines are built and run on it."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema

from edge_sdk.backends.backend import Backend, BackendOptions
from edge_sdk.backends.calibration.settings import Int8Settings
from edge_sdk.backends.registry import BACKENDS, backend_options, get_backend
from edge_sdk.core.host import HostFacts
from edge_sdk.core.precision import Precision

from .equivalence_settings import EquivalenceSettings

PROFILE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
"""A profile name: lower-case letters, digits and '-', so it is always a plain file stem in the profile folder."""
MAX_PROFILE_BATCH = 1024
"""Largest fixed batch axis a profile may ask for (the pipeline's runtime.batch_size has the same bound)."""


class _RegisteredBackends:
    """The JSON Schema of `engine:`: one member per registered backend's options, chosen by `backend:`
    (read from the registry when the schema is made, so a backend registered later is in it)."""

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        members = [handler(backend.options.__pydantic_core_schema__) for backend in BACKENDS.values()]
        return {"oneOf": members, "discriminator": {"propertyName": "backend"}}


EngineOptions = Annotated[SerializeAsAny[BackendOptions], BeforeValidator(backend_options), _RegisteredBackends()]
"""A profile's `engine:` block, validated by the options model of the backend it names (backends/registry.py)."""


class DetectionRule(BaseModel):
    """Every condition that is set must hold for the profile to match the host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arch: list[Literal["x86_64", "aarch64"]] = Field(
        default_factory=list, description="CPU architectures that match (any of); empty = any."
    )
    tegra: bool | None = Field(None, description="Require (true) or exclude (false) an NVIDIA Tegra/Jetson SoC.")
    board_contains: list[str] = Field(
        default_factory=list,
        description="Device-tree model or compatible must contain one of these (case-insensitive).",
    )
    dla: bool | None = Field(None, description="Require (true) or exclude (false) NVDLA cores.")
    npu: bool | None = Field(None, description="Require (true) or exclude (false) an Ascend NPU (/dev/davinci*).")
    nvidia_gpu: bool | None = Field(None, description="Require (true) or exclude (false) a discrete NVIDIA GPU.")
    cpu_flags_all: list[str] = Field(
        default_factory=list, description="CPU flags (/proc/cpuinfo flags or Features) that must all be present."
    )

    def matches(self, facts: HostFacts) -> bool:
        return not self.mismatches(facts)

    def mismatches(self, facts: HostFacts, *, required_only: bool = False) -> list[str]:
        """The conditions `facts` fails, one line each, the architecture first.

        `required_only` keeps the conditions a profile needs to run (arch, `tegra: true`, `dla: true`,
        `npu: true`, `nvidia_gpu: true`, board, CPU flags) and drops exclusions such as `tegra: false`,
        which only steer detection (arm-cpu still runs on a Jetson).
        """
        board = facts.board.lower()
        found: list[tuple[bool, str]] = []  # (required, line)
        if self.arch and facts.arch not in self.arch:
            arch = " or ".join(self.arch)
            found.append((True, f"wrong architecture: profile is for {arch}, this host is {facts.arch}"))
        # (the rule's value, the host's, the line when required, the line when excluded)
        presence = (
            (self.tegra, facts.is_tegra, "needs a Jetson (Tegra) board", "is for boards other than a Jetson"),
            (self.dla, facts.dla_cores > 0, "needs NVDLA cores (a Jetson with DLA)", "is for boards without DLA"),
            (self.npu, facts.npu_devices > 0 or facts.npu_chip is not None, "needs an Ascend NPU", "excludes NPUs"),
            (self.nvidia_gpu, bool(facts.nvidia_gpus), "needs an NVIDIA GPU (nvidia-smi lists none)", "excludes GPUs"),
        )
        for wanted, present, needs, excludes in presence:
            if wanted is not None and present != wanted:
                found.append((wanted, needs if wanted else excludes))
        if self.board_contains and not any(s.lower() in board for s in self.board_contains):
            names = " or ".join(self.board_contains)
            found.append((True, f"needs a board named like {names}, this one is {facts.board.strip() or 'unnamed'}"))
        if missing := [flag for flag in self.cpu_flags_all if flag not in facts.cpu_flags]:
            found.append((True, f"needs CPU flags {', '.join(missing)}"))
        return [line for required, line in found if required or not required_only]


class DeviceProfile(BaseModel):
    """One kind of box. Loaded from `device_profiles/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=PROFILE_NAME_PATTERN, description="Profile name; must equal the file name.")
    description: str = Field(description="One line a person reads in `edge-sdk profiles list`.")
    priority: int = Field(
        0,
        ge=-1000,
        le=1000,
        strict=True,
        description="When several profiles match a host, the highest priority wins; -1000..1000.",
    )
    detect: DetectionRule = Field(description="Host facts that select this profile in `edge-sdk profiles detect`.")
    precisions: list[Precision] = Field(min_length=1, description="Precisions engines may be built in.")
    default_precision: Precision = Field(description="Precision used when none is asked for.")
    engine: EngineOptions = Field(description="Backend and its options, keyed on `backend:`.")
    fallback_engine: EngineOptions | None = Field(
        None,
        description="The route used when `engine:`'s backend cannot run on this host (its library or device is "
        "missing), e.g. ONNX Runtime under a TensorRT profile; one log line says why. null = no fallback.",
    )
    batch: Annotated[int, Field(ge=1, le=MAX_PROFILE_BATCH)] | Literal["dynamic", "keep"] = Field(
        "keep",
        description=f"Batch axis of engines built here: a fixed size 1..{MAX_PROFILE_BATCH} (static shapes, e.g. "
        "for DLA), dynamic, or keep the model's own. A pipeline or build that asks for a batch itself wins.",
    )
    int8: Int8Settings | None = Field(
        None,
        description="How int8 engines are calibrated, quantised and checked on this box (the build's flags "
        "override); null = the defaults.",
    )

    equivalence: EquivalenceSettings | None = Field(
        None,
        description="How far engines built here may drift from the FP32 model on the CPU before a build "
        "refuses them (the equivalence gate); null = the defaults.",
    )

    @field_validator("default_precision")
    @classmethod
    def _default_precision_is_supported(cls, value: Precision, info: ValidationInfo) -> Precision:
        precisions = info.data.get("precisions")
        if precisions is not None and value not in precisions:
            raise ValueError(f"expected one of precisions {precisions}")
        return value

    @field_validator("batch", mode="before")
    @classmethod
    def _batch_is_a_size_or_a_word(cls, value: object) -> object:
        """One clear message instead of one per member of the union (and no bool or float as a size)."""
        if value in ("dynamic", "keep") and isinstance(value, str):
            return value
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PROFILE_BATCH:
            raise ValueError(f"expected a batch size 1..{MAX_PROFILE_BATCH}, 'dynamic' or 'keep'")
        return value

    @model_validator(mode="after")
    def _backend_builds_the_precisions(self) -> DeviceProfile:
        for engine in (self.engine, self.fallback_engine):
            if engine is not None and (
                unknown := sorted(set(self.precisions) - get_backend(engine.backend).precisions)
            ):
                raise ValueError(f"precisions {unknown}: backend {engine.backend} does not build them")
        return self

    def backend(self) -> Backend:
        """The backend `engine:` names."""
        return get_backend(self.engine.backend)

    def content_hash(self) -> str:
        """Hash of everything in the profile, so editing a profile invalidates its engines."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()
