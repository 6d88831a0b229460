"""Imports only point down the layer order of docs/architecture.md: every edge_sdk import in the library,
at module level or inside a function (TYPE_CHECKING blocks included), is read from the source."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[1] / "edge_sdk"

LAYERS = (
    "core",
    "graph",
    "sources",
    "postprocess",
    "backends",
    "profiles",
    "engines",
    "serving",
    "mqtt",
    "sinks",
    "pipeline",
    "fleet",
    "cli",
)
"""Bottom to top; a module may import its own layer and the ones before it (docs/architecture.md says why)."""

TOP_LEVEL_MODULES = {
    "annotate": "sinks",
    "doctor": "cli",
    "schemas": "cli",
}
"""Modules at the top of the package and the layer each belongs to (`__init__` is the public face, above all)."""


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "cli"  # edge_sdk/__init__.py
    top = parts[1]
    if top in TOP_LEVEL_MODULES:
        return TOP_LEVEL_MODULES[top]
    if top not in LAYERS:
        raise AssertionError(f"{module}: package '{top}' has no place in the layer order; add it to LAYERS")
    return top


def module_name(path: Path) -> str:
    parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every edge_sdk import in `path`, relative ones resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from edge_sdk.pkg import module` names the module itself
            found += [(target, node.lineno)]
    return [(target, line) for target, line in found if target == "edge_sdk" or target.startswith("edge_sdk.")]


@functools.cache
def all_imports() -> list[tuple[str, str, int]]:
    return [
        (module_name(path), target, line)
        for path in sorted(LIBRARY.rglob("*.py"))
        for target, line in imported_modules(path)
    ]


def upward(imports: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    rank = {layer: index for index, layer in enumerate(LAYERS)}
    return [
        (source, target, line)
        for source, target, line in imports
        if module_name_is_library(source) and target != "edge_sdk" and rank[layer_of(target)] > rank[layer_of(source)]
    ]


def module_name_is_library(module: str) -> bool:
    return module != "edge_sdk"  # the package's __init__ re-exports from every layer


def test_every_import_points_down_the_layer_order() -> None:
    found = upward(all_imports())
    lines = [f"{s}:{line} imports {t} ({layer_of(s)} -> {layer_of(t)})" for s, t, line in found]
    assert not lines, "upward imports (docs/architecture.md gives the order):\n" + "\n".join(lines)


@pytest.mark.parametrize(
    ("source", "target", "is_upward"),
    [
        ("edge_sdk.pipeline.runtime", "edge_sdk.engines.engine", False),
        ("edge_sdk.engines.engine", "edge_sdk.pipeline.runtime", True),
        ("edge_sdk.core.preprocess", "edge_sdk.core.errors", False),
        ("edge_sdk.core.errors", "edge_sdk.backends.runner", True),
        ("edge_sdk.sinks.mqtt", "edge_sdk.mqtt.client", False),
        ("edge_sdk.annotate", "edge_sdk.pipeline.config", True),
    ],
)
def test_upward_finds_imports_against_the_order(source: str, target: str, is_upward: bool) -> None:
    assert bool(upward([(source, target, 1)])) is is_upward


def test_imported_modules_resolves_relative_and_function_level_imports() -> None:
    package = LIBRARY / "backends" / "onnxruntime"
    found = dict(imported_modules(package / "runner.py"))
    assert "edge_sdk.backends.runner" in found, "`from ..runner import` resolves to the backends package"
    assert "edge_sdk.backends.onnxruntime.io_binding" in found
    local = dict(imported_modules(LIBRARY / "backends" / "onnxruntime" / "quantize.py"))
    assert "edge_sdk.core.host" in local, "an import inside a function counts"


FLEET_SIDES = {"wire": set(), "device": {"wire"}, "operator": {"wire"}, "dashboard": {"operator", "wire"}}
"""edge_sdk/fleet/ by role: what both sides share (wire), the device's side, the operator's side, and the
dashboard, an operator in a browser (it may use the operator's side, never the device's)."""


def test_the_fleets_device_and_operator_sides_meet_only_in_the_wire_format() -> None:
    crossings = []
    for source, target, line in all_imports():
        parts, target_parts = source.split("."), target.split(".")
        if len(parts) > 2 and parts[1] == "fleet" and len(target_parts) > 2 and target_parts[1] == "fleet":
            side, other = parts[2], target_parts[2]
            if other != side and other not in FLEET_SIDES.get(side, set()):
                crossings.append(f"{source}:{line} imports {target}")
    assert not crossings, "\n".join(crossings)


def test_the_sdk_never_imports_cloud_offload() -> None:
    # cloud_offload builds on edge_sdk (issue 13: "it may use edge_sdk freely, never the reverse")
    found = [
        f"{path.relative_to(LIBRARY.parent)}:{node.lineno}"
        for path in LIBRARY.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            name == "cloud_offload" or name.startswith("cloud_offload.")
            for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        )
    ]
    assert not found, found
