"""The DLA placement report from the builder's log, the network's per-layer DLA check and the engine
inspector's JSON (fixtures built from the documented formats: fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.backends.tensorrt.placement import (
    PlacementReport,
    engine_layers,
    fallback_reasons,
    network_layers,
    tagged_engine_layers,
)
from edge_sdk.core.errors import EngineBuildError

FIXTURES = Path(__file__).parent / "fixtures"
LOG = (FIXTURES / "dla_build_log.txt").read_text().splitlines()
NETWORK = [
    ("conv1", "CONVOLUTION", True),
    ("relu1", "ACTIVATION", True),
    ("relu5", "ACTIVATION", True),
    ("box_reshape", "SHUFFLE", False),
    ("scores", "SOFTMAX", True),  # the DLA could run it, the build moved it: the log wins
    ("topk", "TOPK", False),
]


def report() -> PlacementReport:
    tags = tagged_engine_layers(LOG)
    return PlacementReport(
        0,
        network_layers(NETWORK, fallback_reasons(LOG)),
        engine_layers((FIXTURES / "inspector_detailed.json").read_text(), tags),
    )


def test_each_fallback_has_the_reason_tensorrt_gave() -> None:
    reasons = fallback_reasons(LOG)
    assert reasons["box_reshape"] == "DLA only supports reshaping 4 dimensional tensors."
    assert "Unsupported on DLA" in reasons["scores"]  # no reason line before it: the warning itself
    assert "not supported on DLA" in reasons["topk"]  # the pre-8.5 wording


def test_the_report_counts_layers_on_the_dla_and_lists_what_fell_back() -> None:
    placement = report()
    assert placement.dla_share == pytest.approx(3 / 6)
    assert [layer.name for layer in placement.fallbacks] == ["box_reshape", "scores", "topk"]
    lines = placement.lines()
    assert lines[0] == "3 of 6 layers on DLA core 0 (50%), 3 on the GPU"
    assert "  GPU  box_reshape (SHUFFLE): DLA only supports reshaping 4 dimensional tensors." in lines


def test_engine_layers_take_the_device_from_the_log_not_from_the_foreignnode_name() -> None:
    """A Myelin subgraph on the GPU is also a {ForeignNode[...]}: only the DLA one is on the DLA."""
    devices = {layer.name: layer.device for layer in report().engine_layers}
    assert devices["{ForeignNode[conv1...relu5]}"] == "DLA"
    assert devices["{ForeignNode[box_reshape...scores]}"] == "GPU"
    assert devices["topk"] == "GPU"


def test_without_the_log_a_foreignnode_between_nvm_transfers_is_the_dla_one() -> None:
    for fixture in ("inspector_detailed.json", "inspector_names_only.json"):
        layers = engine_layers((FIXTURES / fixture).read_text(), tags={})
        on_dla = [layer.name for layer in layers if layer.device == "DLA"]
        assert on_dla == ["{ForeignNode[conv1...relu5]}"], fixture


def test_a_build_below_the_profiles_minimum_share_fails_with_the_report() -> None:
    placement = report()
    placement.check_share(0.5)  # exactly at the minimum passes
    with pytest.raises(
        EngineBuildError, match=r"only 50% of the layers run on the DLA, the profile requires 75%"
    ) as info:
        placement.check_share(0.75)
    assert "box_reshape (SHUFFLE)" in str(info.value)


def test_the_report_survives_the_manifest() -> None:
    placement = report()
    again = PlacementReport.from_dict(placement.to_dict())
    assert again.lines() == placement.lines() and again.engine_layers == placement.engine_layers
