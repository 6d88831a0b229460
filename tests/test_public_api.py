"""`from edge_sdk import ...`: every public name resolves, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import edge_sdk


def test_every_public_name_resolves_and_the_list_is_the_table() -> None:
    assert sorted(edge_sdk.__all__) == sorted(["__version__", *edge_sdk._EXPORTS])
    for name in edge_sdk._EXPORTS:
        assert getattr(edge_sdk, name) is not None, name


def test_importing_edge_sdk_loads_neither_onnxruntime_nor_paho_nor_opencv() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, edge_sdk; print(sorted(m for m in ('onnxruntime', 'paho', 'cv2', 'onnx') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="not_a_name"):
        edge_sdk.not_a_name  # noqa: B018


def test_every_lazy_name_of_edge_sdk_fleet_resolves() -> None:
    import edge_sdk.fleet as fleet

    for name in ("Agent", "run_agent", "AgentConfig", "load_agent_config"):
        assert getattr(fleet, name).__name__ == name
