"""Cuts of a branched model found as minimum cuts of its graph (the DADS formulation, INFOCOM'19).

A head is a set of main-graph nodes closed under "reads from": whatever a head node reads is computed
in the head, or is the model's input, or a constant. Its cost at the edge is its nodes' time (the
per-layer profile, node_profile.py); what it sends is every tensor it computes that a tail node, or
the model's output, still reads, each once however many tail nodes read it. For an exchange rate mu
(milliseconds a byte), the head minimising

    edge time of the head + mu * bytes sent

is a minimum s-t cut of a flow network: node -> sink with the node's time (cut when the node is in
the head), producer -> tensor with mu * its bytes and tensor -> each reader unbounded (cut once when
any reader is in the tail), reader -> producer unbounded (no tail node feeds a head node), and the
source -> each reader of the model's input unbounded (the input is on the edge: a tail reading it
would be cloud mode). As mu grows from 0 the best head grows from the input's readers to the whole
model, through every head worth considering: each is the cheapest way to send that few bytes.
`min_cuts` solves it for a sweep of exchange rates and keeps each distinct head; with mu in ms a
byte, mu = 1 / bandwidth, so the sweep spans the links a plan is made for. (The smallest heads send
more than the frame itself and `partition.useful_cuts` drops them: that is cloud mode.)

This finds cuts a single node order cannot: where the order interleaves branches (a detector's box
predictors hang off several feature maps), every prefix of it carries tensors a better head would
have kept, or consumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from .partition import Cut, constant_tensors, head_cut, node_reads

EDGE_SOURCE, CLOUD_SINK = "edge", "cloud"
SWEEP_POINTS = 24
MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS = 0.5e6, 1e9
"""The exchange rates swept: 1 / bandwidth over the links a plan is drawn for and beyond (bits per second)."""


def min_cuts(
    model: onnx.ModelProto,
    node_ms: Sequence[float],
    tensor_bytes: Mapping[str, int],
    points: int = SWEEP_POINTS,
) -> list[Cut]:
    """The distinct heads that are a minimum cut for some exchange rate of the sweep, smallest first,
    but the whole model (nothing would cross). `node_ms[i]` is node i's time, `tensor_bytes` each
    computed tensor's size (a tensor missing from it counts as free)."""
    import networkx

    graph = model.graph
    if len(node_ms) != len(graph.node):
        raise ValueError(f"expected a time for each of the {len(graph.node)} nodes, got {len(node_ms)}")
    constant = constant_tensors(graph)
    inputs = {value.name for value in graph.input} - constant
    active = [index for index, node in enumerate(graph.node) if not set(node.output) <= constant]
    producer = {out: index for index in active for out in graph.node[index].output if out}
    readers: dict[str, list[int]] = {}
    for index in active:
        for name in node_reads(graph.node[index]) - constant:
            readers.setdefault(name, []).append(index)

    network = networkx.DiGraph()  # an edge without a capacity is unbounded
    for index in active:
        network.add_edge(index, CLOUD_SINK, capacity=max(0.0, float(node_ms[index])))
    sent: list[tuple[int, tuple[str, str], int]] = []
    """(producer, tensor vertex, bytes): the edges whose capacity is the exchange rate times the bytes."""
    for name, reading in readers.items():
        if name in inputs:
            for reader in reading:
                network.add_edge(EDGE_SOURCE, reader)
        elif name in producer:
            sent.append((producer[name], ("tensor", name), tensor_bytes.get(name, 0)))
            for reader in reading:
                network.add_edge(("tensor", name), reader)
                network.add_edge(reader, producer[name])
    for value in graph.output:  # an output the head computes crosses too
        if value.name in producer:
            sent.append((producer[value.name], ("tensor", value.name), tensor_bytes.get(value.name, 0)))
            network.add_edge(("tensor", value.name), CLOUD_SINK)

    heads: list[frozenset[int]] = []
    whole = frozenset(active)
    for bandwidth in np.geomspace(MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS, points):
        ms_per_byte = 8000.0 / bandwidth
        for source, tensor, nbytes in sent:
            network.add_edge(source, tensor, capacity=ms_per_byte * nbytes)
        _value, (edge_side, _cloud_side) = networkx.minimum_cut(network, EDGE_SOURCE, CLOUD_SINK)
        head = frozenset(vertex for vertex in edge_side if isinstance(vertex, int))
        if head and head != whole and head not in heads:
            heads.append(head)
    cuts = [head_cut(model, head, constant) for head in sorted(heads, key=len)]
    return [cut for cut in cuts if cut.tensors and not set(cut.tensors) & inputs]
