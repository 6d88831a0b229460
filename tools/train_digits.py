"""Train the small digits CNN and write models/digits_cnn.onnx with its calibration and held-out data.

Dev-time only: needs torch and scikit-learn, which neither the SDK nor its tests use
(`pip install torch==2.13.0 scikit-learn`). The run is deterministic: fixed seeds, deterministic
algorithms, one thread, a seeded split; on the same machine and library versions, two runs write
byte-identical files (the .npz files are written with a fixed zip timestamp for that reason).

Data: scikit-learn's `load_digits` (1797 8x8 images, pixels 0..16, the UCI optdigits test set),
scaled to 0..1 (divided by 16), split 70% training / 30% held out by a permutation seeded with SPLIT_SEED.

Outputs (see models/README.md):
- digits_cnn.onnx: input `image` float32 [N, 1, 8, 8] in 0..1, output `logits` float32 [N, 10];
  opset 17, exported unfused (Conv -> BatchNormalization -> Relu) so that the graph passes have work to do.
- digits_calibration.npz: the first CALIBRATION_SAMPLES training images (`image`) and their `labels`.
- digits_holdout.npz: every held-out image (`image`) and its `labels`.

Usage: python tools/train_digits.py [--out-dir models] [--qdq-check]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from sklearn.datasets import load_digits
from torch import nn

REPO = Path(__file__).resolve().parent.parent
INPUT_NAME = "image"
OUTPUT_NAME = "logits"
SPLIT_SEED = 0
TORCH_SEED = 0
TRAIN_FRACTION = 0.7
CALIBRATION_SAMPLES = 300
EPOCHS = 30
BATCH = 32
LEARNING_RATE = 3e-3
OPSET = 17


class DigitsCNN(nn.Module):
    """conv 16 -> conv 32 -> max pool -> fc 10; about 10k parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def make_deterministic() -> None:
    torch.manual_seed(TORCH_SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, held-out images, held-out labels); images float32 [K, 1, 8, 8] in 0..1."""
    digits = load_digits()
    images = (digits.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(labels))
    n_train = round(TRAIN_FRACTION * len(labels))
    train, held_out = order[:n_train], order[n_train:]
    return images[train], labels[train], images[held_out], labels[held_out]


def train(images: np.ndarray, labels: np.ndarray) -> DigitsCNN:
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    shuffle = torch.Generator().manual_seed(TORCH_SEED)
    model.train()
    for epoch in range(EPOCHS):
        order = torch.randperm(len(y), generator=shuffle)
        total = 0.0
        for start in range(0, len(y), BATCH):
            batch = order[start : start + BATCH]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        scheduler.step()
        if epoch % 10 == 9 or epoch == EPOCHS - 1:
            print(f"epoch {epoch + 1:3d}  train loss {total / len(y):.4f}")
    return model.eval()


def export_onnx(model: DigitsCNN) -> bytes:
    """The model as ONNX bytes, BatchNormalization kept as its own node (no constant folding in eval mode)."""
    buffer = io.BytesIO()
    torch.onnx.export(
        model,
        (torch.zeros(1, 1, 8, 8),),
        buffer,
        dynamo=False,
        opset_version=OPSET,
        # With folding on, the eval-mode exporter fuses each BatchNormalization into its Conv.
        do_constant_folding=False,
        training=torch.onnx.TrainingMode.EVAL,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_axes={INPUT_NAME: {0: "N"}, OUTPUT_NAME: {0: "N"}},
    )
    data = buffer.getvalue()
    proto = onnx.load_from_string(data)
    onnx.checker.check_model(proto)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise RuntimeError("expected every initializer inside the .onnx file, got external data")
    return data


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like np.savez_compressed, but with a fixed timestamp in the zip so that the bytes are reproducible."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            body = io.BytesIO()
            np.lib.format.write_array(body, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(info, body.getvalue())


def ort_logits(model_path: Path, images: np.ndarray, optimize: bool = True) -> np.ndarray:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run([OUTPUT_NAME], {INPUT_NAME: images})[0])


def qdq_check(model_path: Path, calibration: np.ndarray, images: np.ndarray, labels: np.ndarray) -> None:
    """Held-out accuracy after ONNX Runtime's static QDQ quantisation (u8 activations, s8 per-channel weights, MinMax).

    Printed three ways: run with the fused int8 kernels, with 7-bit weights (reduce_range), and with graph
    optimisations off so that the QDQ pairs run as float maths. On x86 CPUs without VNNI the u8 x s8 kernels
    add pairs of products in int16 with saturation, and full 8-bit per-channel weights can overflow it.
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{INPUT_NAME: calibration[i : i + 1]} for i in range(len(calibration))])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.samples, None)

    def accuracy(path: Path, optimize: bool = True) -> str:
        correct = int((ort_logits(path, images, optimize).argmax(1) == labels).sum())
        return f"{correct}/{len(labels)} = {correct / len(labels):.2%}"

    with tempfile.TemporaryDirectory() as folder:
        for reduce_range in (False, True):
            quantized = Path(folder) / f"digits_cnn.qdq.{reduce_range}.onnx"
            quantize_static(
                str(model_path),
                str(quantized),
                Reader(),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=reduce_range,
                calibrate_method=CalibrationMethod.MinMax,
            )
            weights = "7-bit weights (reduce_range)" if reduce_range else "8-bit weights"
            print(f"INT8 QDQ u8/s8 per-channel MinMax, {weights}: held-out accuracy {accuracy(quantized)}")
            if not reduce_range:
                print(f"  the same model run as float QDQ maths (optimisations off): {accuracy(quantized, False)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=REPO / "models")
    parser.add_argument("--qdq-check", action="store_true", help="also print the held-out accuracy after INT8 QDQ")
    args = parser.parse_args()

    make_deterministic()
    train_x, train_y, held_x, held_y = load_split()
    model = train(train_x, train_y)
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(held_x)).numpy()

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    onnx_path = out / "digits_cnn.onnx"
    onnx_path.write_bytes(export_onnx(model))
    write_npz(
        out / "digits_calibration.npz",
        {INPUT_NAME: train_x[:CALIBRATION_SAMPLES], "labels": train_y[:CALIBRATION_SAMPLES]},
    )
    write_npz(out / "digits_holdout.npz", {INPUT_NAME: held_x, "labels": held_y})

    logits = ort_logits(onnx_path, held_x)
    print(f"ONNX Runtime vs torch max abs logit difference: {np.abs(logits - torch_logits).max():.2e}")
    correct = int((logits.argmax(1) == held_y).sum())
    top2 = np.sort(logits, axis=1)[:, -2:]
    print(f"FP32 held-out accuracy: {correct}/{len(held_y)} = {correct / len(held_y):.2%}")
    print(f"smallest top-1 vs top-2 logit margin on held-out: {(top2[:, 1] - top2[:, 0]).min():.4f}")
    for name in ("digits_cnn.onnx", "digits_calibration.npz", "digits_holdout.npz"):
        data = (out / name).read_bytes()
        print(f"{name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    if args.qdq_check:
        qdq_check(onnx_path, train_x[:CALIBRATION_SAMPLES], held_x, held_y)


if __name__ == "__main__":
    main()
