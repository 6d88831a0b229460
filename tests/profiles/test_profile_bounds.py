"""Bounds on the numbers of a device profile (threads, devices, DLA core, workspace, batch, priority):
refused when the profile loads, with the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.profiles import ProfileCatalog

# A valid profile; every bad case below changes exactly one numbered line of it.
LINES = [
    "name: test-box",  # 1
    "description: Bounds of profile numbers",  # 2
    "priority: 10",  # 3
    "detect: {}",  # 4
    "precisions: [fp32, fp16]",  # 5
    "default_precision: fp16",  # 6
    "batch: keep",  # 7
    "engine:",  # 8
    "  backend: onnxruntime",  # 9
    "  intra_op_threads: 0",  # 10
    "  execution_providers:",  # 11
    "    - type: tensorrt",  # 12
    "      device_id: 0",  # 13
    "      dla_core: 0",  # 14
    "      workspace_mb: 512",  # 15
    "    - type: xnnpack",  # 16
    "      threads: 2",  # 17
]


def load(tmp_path: Path, line: int | None = None, text: str = "") -> tuple[Path, ProfileCatalog]:
    lines = list(LINES)
    if line is not None:
        lines[line - 1] = text
    path = tmp_path / "test-box.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, ProfileCatalog(tmp_path)


def test_profile_when_numbers_are_in_bounds_loads(tmp_path: Path) -> None:
    _, catalog = load(tmp_path)
    assert catalog.load("test-box").batch == "keep", "the base profile of the cases below is valid"


@pytest.mark.parametrize(
    ("line", "text", "key", "fragment"),
    [
        pytest.param(3, "priority: 1e9", "priority", "'1e9'", id="priority-string"),
        pytest.param(3, "priority: 1000000", "priority", "1000", id="priority-big"),
        pytest.param(7, "batch: 1000000", "batch", "1..1024", id="batch-1e6"),
        pytest.param(7, "batch: 0", "batch", "1..1024", id="batch-0"),
        pytest.param(7, "batch: 2.5", "batch", "2.5", id="batch-float"),
        pytest.param(7, "batch: true", "batch", "got true", id="batch-bool"),
        pytest.param(7, "batch: lots", "batch", "'lots'", id="batch-word"),
        pytest.param(10, "  intra_op_threads: 100000", "engine.intra_op_threads", "256", id="intra-threads"),
        pytest.param(10, "  inter_op_threads: 0", "engine.inter_op_threads", "1", id="inter-threads-0"),
        pytest.param(13, "      device_id: 1000", "engine.execution_providers.0.device_id", "63", id="device-id"),
        pytest.param(14, "      dla_core: 99", "engine.execution_providers.0.dla_core", "7", id="dla-core"),
        pytest.param(14, "      dla_core: -1", "engine.execution_providers.0.dla_core", "0", id="dla-core-neg"),
        pytest.param(
            15, "      workspace_mb: 10000000", "engine.execution_providers.0.workspace_mb", "65536", id="workspace"
        ),
        pytest.param(15, "      workspace_mb: 0", "engine.execution_providers.0.workspace_mb", "1", id="workspace-0"),
        pytest.param(17, "      threads: 1e6", "engine.execution_providers.1.threads", "'1e6'", id="xnnpack-str"),
        pytest.param(17, "      threads: 5000", "engine.execution_providers.1.threads", "256", id="xnnpack-big"),
    ],
)
def test_profile_when_a_number_is_out_of_bounds_names_file_line_and_key(
    tmp_path: Path, line: int, text: str, key: str, fragment: str
) -> None:
    # given a valid profile with one number out of bounds
    path, catalog = load(tmp_path, line, text)
    # when
    with pytest.raises(ConfigError) as raised:
        catalog.load("test-box")
    # then
    message = str(raised.value)
    assert message.startswith(f"{path}:{line}: "), f"the error names the file and line {line}: {message}"
    assert f"key '{key}'" in message, f"the error names the key {key}: {message}"
    assert fragment in message, f"the error shows the bound or the value ({fragment}): {message}"
    assert "\n" not in message, f"one line: {message!r}"
