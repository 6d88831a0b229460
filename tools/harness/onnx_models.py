"""The one registry of tiny ONNX models that tests and benchmarks build on the fly (real ONNX, run by ONNX Runtime)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
IR_VERSION = 8
"""The IR version test models are written with, whatever onnx builds them: onnx writes its newest by
default (14 from onnx 1.23), which older ONNX Runtimes refuse (onnxruntime-gpu 1.31 reads up to 13);
every ONNX Runtime the SDK supports (1.17 and newer) reads 8, the IR of opsets up to 18."""


def make_model(
    graph: onnx.GraphProto,
    opset: int = OPSET,
    extra_opsets: Sequence[tuple[str, int]] = (),
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """helper.make_model with the IR version pinned: `ir_version`, else IR_VERSION or what the opsets need if more."""
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(domain, v) for domain, v in extra_opsets)]
    model = helper.make_model(graph, opset_imports=opsets)
    if ir_version is None:
        ir_version = max(IR_VERSION, helper.find_min_ir_version_for(opsets, ignore_unknown=True))
    model.ir_version = ir_version
    return model


def _save(graph: onnx.GraphProto, path: Path, metadata: dict[str, str] | None = None) -> Path:
    model = make_model(graph)
    if metadata:
        helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def float_classifier(path: Path, classes: int = 4, size: int = 8, batch: int | str = "N") -> Path:
    """float32 NCHW [batch, 3, size, size] -> Conv -> ReLU -> global pool -> Gemm -> logits [batch, classes]."""
    rng = np.random.default_rng(7)
    conv_w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv_w")
    conv_b = numpy_helper.from_array(np.zeros(8, np.float32), "conv_b")
    fc_w = numpy_helper.from_array(rng.standard_normal((classes, 8)).astype(np.float32), "fc_w")
    fc_b = numpy_helper.from_array(np.arange(classes, dtype=np.float32), "fc_b")
    nodes = [
        helper.make_node("Conv", ["images", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "float_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        [conv_w, conv_b, fc_w, fc_b],
    )
    return _save(graph, path)


def uint8_mean_classifier(path: Path, classes: int = 3) -> Path:
    """uint8 NHWC [N, H, W, 3] (any size) -> per-channel means as class scores [N, 3].

    Class 0 wins on red-heavy frames, 1 on green, 2 on blue (channels arrive RGB), so a test can
    predict the answer from the frame it feeds.
    """
    nodes = [
        helper.make_node("Cast", ["frames"], ["as_float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["as_float", "axes"], ["means"], keepdims=0),
        helper.make_node("Div", ["means", "scale"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "uint8_mean_classifier",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, ["N", "H", "W", 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", classes])],
        [
            numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"),
            numpy_helper.from_array(np.array(255.0, dtype=np.float32), "scale"),
        ],
    )
    return _save(graph, path)


def resnet18_like(
    path: Path, width: int = 64, seed: int = 0, batch: int | str = "N", classes: int = 1000, size: int = 224
) -> Path:
    """A ResNet-18-shaped CNN: float32 NCHW [batch, 3, size, size] -> logits [batch, classes].

    Conv+BatchNormalization+Relu blocks (stem, max pool, 4 stages of 2 basic blocks, widths
    width..8*width, 1x1 downsample convs), residual Adds, GlobalAveragePool, Gemm. Weights are
    He-initialised from `default_rng(seed)`; every BatchNormalization has non-trivial running
    statistics, so folding it into the Conv changes the weights. Like an exported model it also
    carries the leftovers graph passes clean up: Constant nodes building the flatten shape, a
    Transpose of the FC weight, an Identity and an inference-mode Dropout.
    """
    net = _ResNet(seed)
    x, c_in = net.stem(width)
    for stage, c_out in enumerate((width, 2 * width, 4 * width, 8 * width), start=1):
        for block in range(2):
            name = f"layer{stage}.{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            y = net.conv_bn(x, f"{name}.a", c_in, c_out, 3, stride, relu=True)
            y = net.conv_bn(y, f"{name}.b", c_out, c_out, 3, 1, relu=False)
            x, c_in = net.residual(name, x, y, c_in, c_out, stride), c_out
    return _save(net.graph("resnet18_like", x, c_in, batch, classes, size), path)


def resnet50_like(
    path: Path, width: int = 64, seed: int = 0, batch: int | str = "N", classes: int = 1000, size: int = 224
) -> Path:
    """A ResNet-50-shaped CNN (4.1 GFLOP at 224 px, 25.6 M parameters): as `resnet18_like`, with 4 stages
    of 3, 4, 6 and 3 bottleneck blocks (1x1 reduce, 3x3 with the stride, 1x1 to 4x the width)."""
    net = _ResNet(seed)
    x, c_in = net.stem(width)
    for stage, blocks in enumerate((3, 4, 6, 3), start=1):
        inner = width * 2 ** (stage - 1)
        for block in range(blocks):
            name = f"layer{stage}.{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            y = net.conv_bn(x, f"{name}.a", c_in, inner, 1, 1, relu=True)
            y = net.conv_bn(y, f"{name}.b", inner, inner, 3, stride, relu=True)
            y = net.conv_bn(y, f"{name}.c", inner, 4 * inner, 1, 1, relu=False)
            x, c_in = net.residual(name, x, y, c_in, 4 * inner, stride), 4 * inner
    return _save(net.graph("resnet50_like", x, c_in, batch, classes, size), path)


class _ResNet:
    """The layers both ResNet shapes are made of, with their weights and nodes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.initializers: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv_bn(self, x: str, name: str, c_in: int, c_out: int, kernel: int, stride: int, relu: bool) -> str:
        fan_in = c_in * kernel * kernel
        w = self.constant(f"{name}.w", self.rng.standard_normal((c_out, c_in, kernel, kernel)) * np.sqrt(2.0 / fan_in))
        pad = kernel // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, w],
                [f"{name}.conv"],
                kernel_shape=[kernel, kernel],
                strides=[stride, stride],
                pads=[pad] * 4,
                name=f"{name}.conv",
            )
        )
        bn_params = [
            self.constant(f"{name}.gamma", self.rng.uniform(0.5, 1.5, c_out)),
            self.constant(f"{name}.beta", self.rng.normal(0.0, 0.1, c_out)),
            self.constant(f"{name}.mean", self.rng.normal(0.0, 0.1, c_out)),
            self.constant(f"{name}.var", self.rng.uniform(0.5, 2.0, c_out)),
        ]
        self.nodes.append(
            helper.make_node(
                "BatchNormalization", [f"{name}.conv", *bn_params], [f"{name}.bn"], epsilon=1e-5, name=f"{name}.bn"
            )
        )
        if not relu:
            return f"{name}.bn"
        self.nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"], name=f"{name}.relu"))
        return f"{name}.relu"

    def stem(self, width: int) -> tuple[str, int]:
        x = self.conv_bn("images", "stem", 3, width, 7, 2, relu=True)
        self.nodes.append(
            helper.make_node("MaxPool", [x], ["stem.pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        )
        return "stem.pool", width

    def residual(self, name: str, x: str, y: str, c_in: int, c_out: int, stride: int) -> str:
        """y + x (through a 1x1 downsample conv when the shape changes), then Relu."""
        shortcut = self.conv_bn(x, f"{name}.down", c_in, c_out, 1, stride, relu=False) if c_in != c_out else x
        self.nodes.append(helper.make_node("Add", [y, shortcut], [f"{name}.add"], name=f"{name}.add"))
        self.nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.out"))
        return f"{name}.out"

    def graph(self, name: str, x: str, c_in: int, batch: int | str, classes: int, size: int) -> onnx.GraphProto:
        fc_w = self.constant("fc.w_t", self.rng.standard_normal((c_in, classes)) * np.sqrt(1.0 / c_in))
        fc_b = self.constant("fc.b", self.rng.normal(0.0, 0.1, classes))
        self.nodes += [
            helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"),
            helper.make_node("Dropout", ["pool"], ["dropout"], name="dropout"),
            helper.make_node("Constant", [], ["keep_batch"], value=numpy_helper.from_array(np.array([0], np.int64))),
            helper.make_node("Constant", [], ["flatten_rest"], value=numpy_helper.from_array(np.array([-1], np.int64))),
            helper.make_node("Concat", ["keep_batch", "flatten_rest"], ["flat_shape"], axis=0, name="flat_shape"),
            helper.make_node("Reshape", ["dropout", "flat_shape"], ["flat"], name="flatten"),
            helper.make_node("Identity", ["flat"], ["features"], name="features"),
            helper.make_node("Transpose", [fc_w], ["fc.w"], perm=[1, 0], name="fc.w"),
            helper.make_node("Gemm", ["features", "fc.w", fc_b], ["logits"], transB=1, name="fc"),
        ]
        return helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
            self.initializers,
        )


def fixed_batch_reshape_classifier(path: Path, classes: int = 4, size: int = 8) -> Path:
    """float32 [1, 3, size, size] -> Conv -> Reshape to [1, -1] (a hard-coded batch, as `x.view(1, -1)`
    exports) -> Gemm -> logits [1, classes]. It cannot run any other batch size correctly."""
    rng = np.random.default_rng(11)
    features = 8 * size * size
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "flat_shape"),
        numpy_helper.from_array(rng.standard_normal((classes, features)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "conv_w"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["conv", "flat_shape"], ["flat"], name="view_1_minus_1"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "fixed_batch_reshape_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        inits,
    )
    return _save(graph, path)


COLOUR_LABELS = ("red", "green", "blue")
"""The classes of the colour models below, in channel order (the models take RGB)."""
BOX_SIDE = 0.2
"""Side of every box the colour detector proposes, as a fraction of its input side."""


def _colour_weights(gain: float, offset: float) -> tuple[np.ndarray, np.ndarray]:
    """Per class c: gain * (channel c - mean of the other two) - offset, as [3, 3] weights and [3] bias."""
    weights = gain * (np.eye(3, dtype=np.float32) * 1.5 - 0.5)
    return weights, np.full(3, -offset, np.float32)


def _ultralytics_metadata(size: int, task: str) -> dict[str, str]:
    """Metadata as an Ultralytics export writes it: class names as a dict literal, the input size [h, w]."""
    names = "{" + ", ".join(f"{i}: {name!r}" for i, name in enumerate(COLOUR_LABELS)) + "}"
    return {"names": names, "imgsz": f"[{size}, {size}]", "task": task}


def colour_yolov8(path: Path, size: int = 320) -> Path:
    """A YOLOv8-shaped colour detector: float32 NCHW RGB [1, 3, size, size] (0..1) -> `output0`
    [1, 4 + 3, anchors], like an Ultralytics export without NMS (2100 anchors at 320).

    Each anchor sits on a cell of the strides 8, 16 and 32 and proposes a box twice the stride wide,
    centred on the cell (cx, cy, w, h in input pixels); its class scores are a sigmoid of how much
    the averaged box area leans to red, green or blue. Real ONNX, meaningful on any photo: the
    astronaut's orange suit and the flag score as red. Metadata carries the class names.
    """
    weights, bias = _colour_weights(gain=20.0, offset=8.0)
    inits = [
        numpy_helper.from_array(weights.reshape(3, 3, 1, 1), "colour_w"),
        numpy_helper.from_array(bias, "colour_b"),
        numpy_helper.from_array(np.array([1, 3, -1], np.int64), "flat_shape"),
    ]
    nodes, scores, boxes = [], [], []
    for stride in (8, 16, 32):
        cells = size // stride
        nodes += [
            helper.make_node(
                "AveragePool",
                ["images"],
                [f"pool{stride}"],
                kernel_shape=[2 * stride] * 2,
                strides=[stride] * 2,
                pads=[stride // 2] * 4,
                count_include_pad=0,
            ),
            helper.make_node("Conv", [f"pool{stride}", "colour_w", "colour_b"], [f"lean{stride}"]),
            helper.make_node("Sigmoid", [f"lean{stride}"], [f"score{stride}"]),
            # Only local peaks score, so one coloured area gives a few boxes, not a carpet of them.
            helper.make_node(
                "MaxPool", [f"score{stride}"], [f"peak{stride}"], kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4
            ),
            helper.make_node("Equal", [f"score{stride}", f"peak{stride}"], [f"is_peak{stride}"]),
            helper.make_node("Cast", [f"is_peak{stride}"], [f"peak_mask{stride}"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"score{stride}", f"peak_mask{stride}"], [f"kept{stride}"]),
            helper.make_node("Reshape", [f"kept{stride}", "flat_shape"], [f"flat{stride}"]),
        ]
        scores.append(f"flat{stride}")
        centres = (np.arange(cells, dtype=np.float32) + 0.5) * stride
        cy, cx = np.meshgrid(centres, centres, indexing="ij")
        side = np.full(cells * cells, BOX_SIDE * size, np.float32)
        boxes.append(np.stack([cx.ravel(), cy.ravel(), side, side]))
    inits.append(numpy_helper.from_array(np.concatenate(boxes, axis=1)[np.newaxis], "anchor_boxes"))
    nodes += [
        helper.make_node("Concat", scores, ["class_scores"], axis=2),
        helper.make_node("Concat", ["anchor_boxes", "class_scores"], ["output0"], axis=1),
    ]
    anchors = sum((size // stride) ** 2 for stride in (8, 16, 32))
    graph = helper.make_graph(
        nodes,
        "colour_yolov8",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + len(COLOUR_LABELS), anchors])],
        inits,
    )
    return _save(graph, path, _ultralytics_metadata(size, "detect"))


def colour_classifier(path: Path, size: int = 64) -> Path:
    """A colour classifier: float32 NCHW RGB [1, 3, size, size] (0..1) -> logits [1, 3] (red, green,
    blue: how much the whole frame leans to each), names in the metadata like an Ultralytics export."""
    weights, bias = _colour_weights(gain=10.0, offset=0.0)
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "colour_w", "colour_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "colour_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, len(COLOUR_LABELS)])],
        [numpy_helper.from_array(weights, "colour_w"), numpy_helper.from_array(bias, "colour_b")],
    )
    return _save(graph, path, _ultralytics_metadata(size, "classify"))
