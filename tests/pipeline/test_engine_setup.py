"""pipeline_graph for a detector split after its box head: the pipeline's engine graph, fed as the
inference stage feeds it and decoded as the output stage decodes it, finds what the uncut graph finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.preprocess import frame_feed
from edge_sdk.core.results import FrameMeta
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.graph.optimize import optimize_graph
from edge_sdk.graph.options import GraphOptions
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.engine_setup import pipeline_graph
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.sources.synthetic import PanZoomSource

ort = pytest.importorskip("onnxruntime")

ASTRONAUT = Path(__file__).resolve().parents[2] / "tools" / "assets" / "astronaut.jpg"
PIPELINE = """\
name: split
model: {{path: {model}}}
preprocess: {{resize: [300, 300], color: rgb, layout: nhwc, dtype: uint8, fold: {fold}}}
sources: [{{uri: "synthetic://?image={image}&frames=8&size=640x480"}}]
postprocess: {{type: ssd, score_threshold: 0.3, labels: [person], decode: {decode}}}
"""


def engine_results(tmp_path: Path, demo_model: Path, decode: str, fold: bool) -> list[list[tuple[float, ...]]]:
    """Boxes and scores of every frame, through the engine graph this pipeline builds (ORT on the CPU)."""
    path = tmp_path / f"{decode}-{fold}.yaml"
    path.write_text(PIPELINE.format(model=demo_model, image=ASTRONAUT, decode=decode, fold=str(fold).lower()))
    config = load_pipeline(path)
    model = ModelFile.load(config.model.path)
    graph = onnx.load(str(demo_model))
    options = pipeline_graph(config, model)
    if options is not None:
        graph, _reports = optimize_graph(graph, options)
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    engine_input = TensorMeta.from_value_info(graph.graph.input[0])
    feed = frame_feed(config.preprocess, engine_input)
    post = build_postprocessor(config.postprocess)
    names = [o.name for o in session.get_outputs()]
    found = []
    with PanZoomSource(ASTRONAUT, frames=8, size=(640, 480)) as source:
        for frame in source:
            outputs = dict(zip(names, session.run(None, {engine_input.name: feed(frame.image)}), strict=True))
            meta = FrameMeta("cam", frame.meta.index, 0.0, frame.meta.width, frame.meta.height)
            result = post({k: v[0] for k, v in outputs.items()}, meta, feed.geometry(meta.width, meta.height))
            found.append([(d.x1, d.y1, d.x2, d.y2, d.score) for d in result.detections])
    return found


@pytest.mark.parametrize("fold", [True, False], ids=["folded", "unfolded"])
def test_pipeline_graph_when_decode_is_sdk_cuts_the_engine_and_the_host_decode_finds_the_same_boxes(
    tmp_path: Path, demo_model: Path, fold: bool
) -> None:
    # when
    uncut = engine_results(tmp_path, demo_model, "graph", fold)
    split = engine_results(tmp_path, demo_model, "sdk", fold)

    # then
    assert sum(map(len, uncut)) >= 4, "the person is found in most frames"
    assert [len(f) for f in split] == [len(f) for f in uncut], "the same number of detections in every frame"
    for want, got in zip(uncut, split, strict=True):
        np.testing.assert_allclose(np.array(got).reshape(-1, 5), np.array(want).reshape(-1, 5), atol=1e-3)


def test_pipeline_graph_when_decode_is_sdk_asks_for_the_split_with_or_without_the_fold(
    tmp_path: Path, demo_model: Path
) -> None:
    # given
    model = ModelFile.load(demo_model)

    def options(decode: str, fold: bool) -> GraphOptions | None:
        path = tmp_path / f"{decode}-{fold}.yaml"
        path.write_text(PIPELINE.format(model=demo_model, image=ASTRONAUT, decode=decode, fold=str(fold).lower()))
        return pipeline_graph(load_pipeline(path), model)

    # when
    plain, folded, split, folded_split = (options(d, f) for d in ("graph", "sdk") for f in (False, True))

    # then
    assert plain is None, "nothing to do to the graph: the engine is the model"
    assert folded is not None and not folded.ssd_split
    assert split is not None and split.ssd_split and split.preprocess is None, "the split alone: numpy preprocessing"
    assert folded_split is not None and folded_split.ssd_split and folded_split.preprocess is not None
