"""How long each node of a model's main graph takes on the CPU: the per-layer profile the DAG
min-cut (dag_cuts.py) weighs a head's edge work by, and that a projection scales.

ONNX Runtime's own profiler times every kernel. The model is run with its main-graph nodes renamed
to their index (ONNX names are optional and need not be unique), one thread, basic graph
optimisations only, so that each kernel is one node of the graph (the extended levels fuse nodes
under new names). A node ONNX Runtime removed (an Identity, a Dropout) or folded into another
(a BatchNormalization into its Conv) takes no time of its own. A Loop's or If's time includes its
subgraph's.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx

NODE_PREFIX = "edge_sdk_node_"


def node_times_ms(model: onnx.ModelProto, feed: Mapping[str, np.ndarray], runs: int = 5) -> list[float]:
    """Median milliseconds of each main-graph node over `runs` runs (after one warm-up), in node order."""
    import onnxruntime

    named = onnx.ModelProto()
    named.CopyFrom(model)
    for index, node in enumerate(named.graph.node):
        node.name = f"{NODE_PREFIX}{index}"
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with tempfile.TemporaryDirectory() as folder:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(folder) / "profile")
        session = onnxruntime.InferenceSession(named.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [output.name for output in session.get_outputs()]
        for _ in range(1 + runs):
            session.run(names, dict(feed))
        events = json.loads(Path(session.end_profiling()).read_text())
    per_run: dict[int, list[float]] = defaultdict(list)
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") == "Node" and name.startswith(NODE_PREFIX) and name.endswith("_kernel_time"):
            number = name.removeprefix(NODE_PREFIX).removesuffix("_kernel_time")
            if number.isdigit():
                per_run[int(number)].append(float(event["dur"]) / 1000.0)
    # the first run of each node is the warm-up
    return [
        statistics.median(per_run[index][1:]) if len(per_run[index]) > 1 else 0.0
        for index in range(len(model.graph.node))
    ]
