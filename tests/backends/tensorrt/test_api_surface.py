"""Every TensorRT name the backend uses exists in the TensorRT versions it claims, per the names in PyPI's
bindings wheels (tests/fixtures/tensorrt_names, extracted by tools/tensorrt_names): a typo, or an API a
version removed, fails here although TensorRT cannot run on this machine."""

from __future__ import annotations

import ast
import gzip
from pathlib import Path

import pytest

import edge_sdk.backends.tensorrt as package
from edge_sdk.backends.tensorrt.api_surface import GONE_IN_11, TENSORRT_MODULES, TENSORRT_OBJECTS, USED

NAMES = Path(__file__).parents[2] / "fixtures" / "tensorrt_names"
PACKAGE = Path(package.__file__).parent
WHEELS = {
    tuple(int(part) for part in path.name.removesuffix(".txt.gz").split(".")[:2]): path
    for path in NAMES.glob("*.txt.gz")
}


def names_in(version: tuple[int, int]) -> set[str]:
    return set(gzip.decompress(WHEELS[version].read_bytes()).decode().split())


def test_the_wheels_of_each_generation_are_here() -> None:
    assert sorted(WHEELS) == [(8, 6), (10, 3), (10, 13), (10, 16), (11, 4)]


@pytest.mark.parametrize("version", sorted(WHEELS), ids=lambda v: f"{v[0]}.{v[1]}")
def test_every_name_used_in_a_version_exists_in_that_versions_bindings(version: tuple[int, int]) -> None:
    present = names_in(version)
    used = [
        name
        for name, (since, until) in USED.items()
        if (since is None or version >= since) and (until is None or version < until)
    ]
    missing = sorted(name for name in used if name not in present)
    assert not missing, f"TensorRT {version[0]}.{version[1]} has no {missing}"


def test_the_names_tensorrt_11_removed_are_gone_from_its_bindings() -> None:
    """The backend's branches for 11 (no precision flags, no calibrators) rest on these removals."""
    present = names_in((11, 4))
    assert not [name for name in GONE_IN_11 if name in present]
    assert all(name in names_in((10, 16)) for name in GONE_IN_11)


def attributes_read_of_tensorrt_objects(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self":
            owner = base.attr
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "trt":
            owner = "trt"  # trt.BuilderFlag.FP16: FP16 is read of a TensorRT enum
        elif isinstance(base, ast.Name):
            owner = base.id
        else:
            continue
        if owner in TENSORRT_OBJECTS:
            found.add(node.attr)
    return found


@pytest.mark.parametrize("module", TENSORRT_MODULES)
def test_every_attribute_read_of_a_tensorrt_object_is_declared(module: str) -> None:
    read = attributes_read_of_tensorrt_objects((PACKAGE / module).read_text())
    own = {
        "__version__",
        "__init__",
        "lines",
        "errors",
        "free",
        "phases",
        "remaining",
        "buffers",
        "stream",
        "trt",
        "engine",
        "context",
    }
    undeclared = sorted(read - set(USED) - own)
    assert not undeclared, f"{module} reads {undeclared} of TensorRT objects; declare them in api_surface.USED"


def test_the_checker_catches_a_typo() -> None:
    source = "def f(trt, context):\n    context.execute_async_v2(0)\n    trt.BuilderFlag.FP61\n"
    assert {"execute_async_v2", "FP61"} <= attributes_read_of_tensorrt_objects(source) - set(USED)
