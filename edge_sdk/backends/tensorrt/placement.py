"""Where each layer of a DLA build runs, and why a layer fell back to the GPU.

Three sources, because TensorRT has no single one:
- before the build, `IBuilderConfig.can_run_on_DLA(layer)` for every layer of the parsed network (the
  documented per-layer check): the network layers' placement;
- the builder's log: its fallback warnings carry the reason ("Layer 'X' (CONSTANT): Unsupported on DLA.
  Switching this layer's device type to GPU.", preceded by a line saying why; "Default DLA is enabled but
  layer X is not supported on DLA, falling back to GPU." before 8.5), and its summary tags each engine
  layer "[DlaLayer]" or "[GpuLayer]";
- the engine inspector's JSON (ProfilingVerbosity.DETAILED): the engine's layers. A DLA subgraph is one
  `{ForeignNode[first...last]}` layer, but so is a Myelin-fused GPU subgraph, so the inspector alone cannot
  tell DLA from GPU: the log's tags decide, and `X to nvm` / `X from nvm` reformats mark DLA boundaries.
Formats: docs/nvidia.md cites them; tests/backends/tensorrt/fixtures holds examples built from them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from edge_sdk.core.errors import EngineBuildError

Device = Literal["DLA", "GPU"]

_FALLBACK_PATTERNS = (
    # TensorRT 8.5 and later
    re.compile(
        r"Layer '(?P<layer>.+?)' \((?P<type>[A-Z_]+)\): Unsupported on DLA\. Switching this layer's device type to GPU"
    ),
    # before 8.5
    re.compile(r"Default DLA is enabled but layer (?P<layer>.+?) is not supported on DLA, falling back to GPU"),
    re.compile(r"DLA supports only \d+ subgraphs per DLA core\. Switching to GPU for layer (?P<layer>.+?)\s*$"),
    re.compile(r"DLA only supports FP16 and Int8 precision type\. Switching (?P<layer>.+?) device type to GPU"),
)
_TAGGED = re.compile(r"\[(?P<device>Dla|Gpu)Layer\]\s*(?:[A-Z_]+: )?(?P<layer>.+?)\s*,?\s*$")
"""'[DlaLayer] {ForeignNode[a...b]}' or '[GpuLayer] SHUFFLE: name' (the GPU lines carry the layer's type)."""
_LOG_PREFIX = re.compile(r"^\s*(?:\[[A-Z]\]\s*)*(?:\[TRT\]\s*)?")


@dataclass(frozen=True)
class LayerPlacement:
    name: str
    type: str
    device: Device
    reason: str | None = None


@dataclass
class PlacementReport:
    dla_core: int
    network_layers: list[LayerPlacement] = field(default_factory=list)
    """Every layer of the parsed network, with where TensorRT will put it."""
    engine_layers: list[LayerPlacement] = field(default_factory=list)
    """The built engine's layers (DLA subgraphs are one layer each)."""

    @property
    def dla_share(self) -> float:
        if not self.network_layers:
            return 0.0
        return sum(layer.device == "DLA" for layer in self.network_layers) / len(self.network_layers)

    @property
    def fallbacks(self) -> list[LayerPlacement]:
        return [layer for layer in self.network_layers if layer.device == "GPU"]

    def summary(self) -> str:
        total = len(self.network_layers)
        on_dla = total - len(self.fallbacks)
        return f"{on_dla} of {total} layers on DLA core {self.dla_core} ({self.dla_share:.0%}), {len(self.fallbacks)} on the GPU"

    def lines(self, limit: int = 20) -> list[str]:
        """The summary, then each fallback with its reason (at most `limit`), for `build` and `inspect`."""
        lines = [self.summary()]
        for layer in self.fallbacks[:limit]:
            lines.append(f"  GPU  {layer.name} ({layer.type}): {layer.reason or 'TensorRT gave no reason'}")
        if len(self.fallbacks) > limit:
            lines.append(f"  ... and {len(self.fallbacks) - limit} more on the GPU (the manifest lists all)")
        return lines

    def check_share(self, minimum: float) -> None:
        if minimum > 0 and self.dla_share < minimum:
            raise EngineBuildError(
                f"only {self.dla_share:.0%} of the layers run on the DLA, the profile requires {minimum:.0%} "
                f"(min_dla_share): " + "\n".join(self.lines())
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dla_core": self.dla_core,
            "dla_share": round(self.dla_share, 4),
            "network_layers": [asdict(layer) for layer in self.network_layers],
            "engine_layers": [asdict(layer) for layer in self.engine_layers],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlacementReport:
        return cls(
            int(data["dla_core"]),
            [LayerPlacement(**layer) for layer in data.get("network_layers", [])],
            [LayerPlacement(**layer) for layer in data.get("engine_layers", [])],
        )


def fallback_reasons(log_lines: Sequence[str]) -> dict[str, str]:
    """Layer name -> why TensorRT moved it to the GPU, from the builder's warnings. The line before a
    fallback warning that names the layer and is not itself a fallback is its reason (8.5+ writes one)."""
    reasons: dict[str, str] = {}
    cleaned = [_LOG_PREFIX.sub("", line).strip() for line in log_lines]
    for index, line in enumerate(cleaned):
        for pattern in _FALLBACK_PATTERNS:
            found = pattern.search(line)
            if found is None:
                continue
            layer = found.group("layer").strip()
            previous = cleaned[index - 1] if index else ""
            detail = previous if previous.startswith(f"{layer}:") else None
            reasons[layer] = detail.split(":", 1)[1].strip() if detail else line
            break
    return reasons


def tagged_engine_layers(log_lines: Iterable[str]) -> dict[str, Device]:
    """Engine layer name -> device, from the builder's "[DlaLayer] X" / "[GpuLayer] X" summary lines."""
    tags: dict[str, Device] = {}
    for line in log_lines:
        found = _TAGGED.search(line)
        if found:
            tags[found.group("layer")] = "DLA" if found.group("device") == "Dla" else "GPU"
    return tags


def engine_layers(inspector_json: str, tags: dict[str, Device]) -> list[LayerPlacement]:
    """The inspector's layers with their device: the log's tag, else DLA for a ForeignNode fed by a
    `to nvm` transfer or feeding a `from nvm` one, else GPU. Layers are objects with DETAILED verbosity
    and plain names with the default verbosity; both are read."""
    layers = json.loads(inspector_json).get("Layers", [])
    named = [
        (layer, "") if isinstance(layer, str) else (str(layer.get("Name", "")), str(layer.get("LayerType", "")))
        for layer in layers
    ]
    result = []
    for index, (name, kind) in enumerate(named):
        device = tags.get(name)
        if device is None:
            before = named[index - 1][0] if index > 0 else ""
            after = named[index + 1][0] if index + 1 < len(named) else ""
            between_nvm = before.endswith(" to nvm") or after.endswith(" from nvm")
            device = "DLA" if name.startswith("{ForeignNode[") and between_nvm else "GPU"
        result.append(LayerPlacement(name, kind or "unknown", device))
    return result


def network_layers(layers: Sequence[tuple[str, str, bool]], reasons: dict[str, str]) -> list[LayerPlacement]:
    """(name, type, can run on DLA) per network layer -> placements. A layer the DLA could run can still be
    moved to the GPU by the build (e.g. past the DLA's subgraph limit): the log's fallback warnings win."""
    placements = []
    for name, kind, can_run in layers:
        on_dla = can_run and name not in reasons
        reason = None if on_dla else reasons.get(name, "IBuilderConfig.can_run_on_DLA is false for this layer")
        placements.append(LayerPlacement(name, kind, "DLA" if on_dla else "GPU", reason))
    return placements
