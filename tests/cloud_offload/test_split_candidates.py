"""The cuts the agent and the worker consider (cloud_offload/split_engines.py) on the shipped detector:
its minimum cuts, one rule for tails too small to be worth a split, and any cut found again from the
tensors a request names."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloud_offload.split_engines import SplitModel, candidate_of_tensors, split_candidates, split_model_of
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig

DETECTOR = {
    "name": "detector",
    "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
    "sources": [{"uri": "synthetic://?frames=4&size=320x240", "name": "cam"}],
    "postprocess": {"type": "ssd", "labels": ["person"]},
}


@pytest.fixture(scope="module")
def split(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> SplitModel:
    config = PipelineConfig.model_validate({**DETECTOR, "model": {"path": str(demo_model)}})
    return split_model_of(config, EngineCache(tmp_path_factory.mktemp("engines")))


def test_the_cut_after_the_nms_is_marked_as_a_tail_that_computes_nothing(split: SplitModel) -> None:
    candidates = split_candidates(split)
    by_name = {candidate.name: candidate for candidate in candidates}
    after_nms = by_name["split@detection_boxes:0+3"]
    assert after_nms.trivial_tail and after_nms.tail_share is not None and after_nms.tail_share < 0.01
    backbone = [c for c in candidates if "expanded_conv" in c.name]
    assert backbone and not any(c.trivial_tail for c in backbone), [(c.name, c.tail_share) for c in candidates]
    sizes = [c.measured.bytes for c in candidates]
    assert sizes == sorted(sizes, reverse=True), "each useful cut sends less than those with less edge work"


def test_a_worker_finds_each_cut_again_from_the_tensors_a_request_names(split: SplitModel) -> None:
    for candidate in split_candidates(split):
        again = candidate_of_tensors(split, candidate.measured.cut.tensors)
        assert again is not None and again.part == candidate.part, candidate.name
        assert again.measured.bytes == candidate.measured.bytes
    several = next(c for c in split_candidates(split) if len(c.measured.cut.tensors) > 1)
    assert candidate_of_tensors(split, several.measured.cut.tensors[1:]) is None, "part of a cut is no cut"
    assert candidate_of_tensors(split, ["image_tensor:0"]) is None, "the frame itself is cloud mode"
    assert candidate_of_tensors(split, ["no such tensor"]) is None
