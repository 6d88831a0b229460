"""What a split of the shipped detector would send, against sending the frame as a JPEG (issue 13's
`cloud` mode, which the split-computing benchmark SC2 found most splits lose to), and what each
precision costs in detections.

Usage: python tools/bench/offload_codec.py [--frames 40] [--video build/demo/demo.mp4]

For each useful cut (cloud_offload/partition.py: fewer bytes than every earlier cut and than the
input) and each precision (fp32, fp16, int8) with zstd: the message's bytes per frame (mean over the
frames), encode + decode time, and the tail's detections on the decoded tensors against the whole
model's (the SDK's matched-box metric). Beside them, the frame (300x300 RGB, what the detector's input
takes) as OpenCV JPEG at quality 75 and 90, with the whole model's detections on the decoded JPEG.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cloud_offload.partition import cut_points, measure_cuts, split_model, useful_cuts  # noqa: E402
from cloud_offload.tensor_codec import TensorPayload, decode, encode  # noqa: E402
from edge_sdk.backends.int8.box_match import BoxMatch, FrameBoxes, count_boxes  # noqa: E402
from edge_sdk.core.results import Detection  # noqa: E402

MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
INPUT = "image_tensor:0"
RULE = BoxMatch(iou_threshold=0.5, score_threshold=0.5, lenient_threshold=0.45)


def session(model: onnx.ModelProto) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(runner: onnxruntime.InferenceSession, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [out.name for out in runner.get_outputs()]
    return dict(zip(names, runner.run(names, feed), strict=True))


def boxes(outputs: dict[str, np.ndarray]) -> list[Detection]:
    count = int(outputs["num_detections:0"][0])
    return [
        Detection(float(b[1]), float(b[0]), float(b[3]), float(b[2]), float(s), int(c), str(int(c)))
        for b, s, c in zip(
            outputs["detection_boxes:0"][0][:count],
            outputs["detection_scores:0"][0][:count],
            outputs["detection_classes:0"][0][:count],
            strict=True,
        )
    ]


def frames_of(video: Path, count: int) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(video))
    frames = []
    while len(frames) < count:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(cv2.resize(frame, (300, 300)), cv2.COLOR_BGR2RGB)[np.newaxis])
    capture.release()
    if not frames:
        raise SystemExit(f"{video}: no frames (run `make demo` or tools/make_demo_video.py first)")
    return frames


def matched(reference: list[list[Detection]], candidate: list[list[Detection]]) -> str:
    """The SDK's matched-box metric (docs/int8.md): of the whole model's boxes, how many were found."""

    def above(found: list[Detection], threshold: float) -> list[Detection]:
        return [d for d in found if d.score >= threshold]

    frames = [
        FrameBoxes(
            above(r, RULE.score_threshold),
            above(r, RULE.lenient_threshold),
            above(c, RULE.score_threshold),
            above(c, RULE.lenient_threshold),
        )
        for r, c in zip(reference, candidate, strict=True)
    ]
    counts = count_boxes(frames, RULE)
    return f"{counts.matched} of {counts.reference} found, {counts.extra} extra"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--video", type=Path, default=REPO / "build" / "demo" / "demo.mp4")
    args = parser.parse_args()
    model = onnx.load(str(MODEL))
    frames = frames_of(args.video, args.frames)
    whole = session(model)
    reference = [boxes(run(whole, {INPUT: frame})) for frame in frames]
    measured = useful_cuts(measure_cuts(model, cut_points(model), {INPUT: frames[0]}), frames[0].nbytes)
    print(f"shipped detector, {len(frames)} frames of {args.video}, 300x300 RGB input ({frames[0].nbytes} bytes raw)")
    print("| sends | bytes/frame | encode+decode ms | detections vs the whole model |")
    print("|---|---:|---:|---|")
    for quality in (75, 90):
        sizes, times, found = [], [], []
        for frame in frames:
            started = time.perf_counter()
            _ok, jpeg = cv2.imencode(".jpg", frame[0], [cv2.IMWRITE_JPEG_QUALITY, quality])
            decoded = cv2.imdecode(jpeg, cv2.IMREAD_UNCHANGED)[np.newaxis]
            times.append((time.perf_counter() - started) * 1000)
            sizes.append(len(jpeg))
            found.append(boxes(run(whole, {INPUT: decoded})))
        print(
            f"| frame, JPEG q{quality} (cloud) | {statistics.mean(sizes):,.0f} | {statistics.median(times):.2f} | {matched(reference, found)} |"
        )
    for cut in measured:
        head_model, tail_model = split_model(model, cut)
        head, tail = session(head_model), session(tail_model)
        crossing = [run(head, {INPUT: frame}) for frame in frames]
        for precision in ("fp32", "fp16", "int8"):
            sizes, times, found = [], [], []
            for index, tensors in enumerate(crossing):
                started = time.perf_counter()
                data = encode(TensorPayload(index, 0.0, tensors), precision, "zstd")  # type: ignore[arg-type]
                back = decode(data).tensors
                times.append((time.perf_counter() - started) * 1000)
                sizes.append(len(data))
                found.append(boxes(run(tail, dict(back))))
            label = f"split after {cut.cut.after[-48:]} ({len(cut.cut.tensors)} tensors), {precision} + zstd"
            print(
                f"| {label} | {statistics.mean(sizes):,.0f} | {statistics.median(times):.2f} | {matched(reference, found)} |"
            )


if __name__ == "__main__":
    main()
