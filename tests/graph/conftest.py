"""Models the graph pass tests share: the shipped detector and a ResNet-18-shaped CNN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tools.harness.onnx_models import resnet18_like


@pytest.fixture(scope="session")
def resnet_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ResNet-18 layout at width 8 (full width is for tools/bench): same graph, small weights."""
    return resnet18_like(tmp_path_factory.mktemp("resnet") / "resnet18_w8.onnx", width=8)


@pytest.fixture(scope="session")
def resnet(resnet_path: Path) -> onnx.ModelProto:
    return onnx.load(str(resnet_path))


@pytest.fixture(scope="session")
def detector(demo_model: Path) -> onnx.ModelProto:
    return onnx.load(str(demo_model))


@pytest.fixture(scope="session")
def detector_feeds(astronaut_bgr: np.ndarray) -> dict[str, np.ndarray]:
    """The astronaut photo as the detector takes it (RGB uint8 NHWC): it finds one person there."""
    return {"image_tensor:0": np.ascontiguousarray(astronaut_bgr[np.newaxis, :, :, ::-1])}
