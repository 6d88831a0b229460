"""Compare two JSONL results of one pipeline (e.g. x86-cpu natively against arm-cpu under emulation).

Usage: python tools/aarch64/compare_results.py REFERENCE.jsonl CANDIDATE.jsonl [--iou 0.9] [--min-share 0.95]

Per frame, the reference's boxes are matched one to one against the candidate's of the same label
(edge_sdk.backends.int8.accuracy.match_boxes: greedy, highest reference score first). Prints frames and
detections on each side, the share of reference boxes matched at IoU >= --iou (and at 0.5), and the
score and coordinate differences of the matched pairs. Exit 1 when the share is under --min-share or
the frames differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.backends.int8.accuracy import match_boxes  # noqa: E402


def load(path: Path) -> dict[tuple[str, int], list[Any]]:
    frames = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        frames[(record["source"], record["frame"])] = [
            SimpleNamespace(
                class_id=d["class_id"], score=d["score"], x1=d["box"][0], y1=d["box"][1], x2=d["box"][2], y2=d["box"][3]
            )
            for d in record["detections"]
        ]
    return frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--iou", type=float, default=0.9)
    parser.add_argument("--min-share", type=float, default=0.95)
    args = parser.parse_args()
    ref, cand = load(args.reference), load(args.candidate)
    n_ref, n_cand = sum(map(len, ref.values())), sum(map(len, cand.values()))
    same_count = sum(1 for key, boxes in ref.items() if len(cand.get(key, [])) == len(boxes))
    matched = {0.5: 0, args.iou: 0}
    score_diffs, coord_diffs = [], []
    for key, boxes in ref.items():
        for threshold in matched:
            pairs = match_boxes(boxes, cand.get(key, []), threshold)
            matched[threshold] += len(pairs)
            if threshold == args.iou:
                for i, j in pairs:
                    a, b = boxes[i], cand[key][j]
                    score_diffs.append(abs(a.score - b.score))
                    coord_diffs.append(max(abs(a.x1 - b.x1), abs(a.y1 - b.y1), abs(a.x2 - b.x2), abs(a.y2 - b.y2)))
    share = matched[args.iou] / n_ref if n_ref else 1.0
    ref_name, cand_name = (f"{p.parent.name}/{p.name}" for p in (args.reference, args.candidate))
    print(f"frames: {ref_name} {len(ref)}, {cand_name} {len(cand)}; same box count in {same_count}")
    print(f"detections: {ref_name} {n_ref}, {cand_name} {n_cand} ({100 * (n_cand - n_ref) / max(n_ref, 1):+.1f}%)")
    print(
        f"reference boxes matched at IoU >= {args.iou}: {matched[args.iou]}/{n_ref} ({share:.1%}); "
        f"at IoU >= 0.5: {matched[0.5]}/{n_ref}"
    )
    if score_diffs:
        print(
            f"matched pairs: score difference mean {sum(score_diffs) / len(score_diffs):.4f}, max {max(score_diffs):.4f}; "
            f"largest box corner difference {max(coord_diffs):.1f} px"
        )
    ok = share >= args.min_share and set(ref) == set(cand)
    print(f"equivalence (share >= {args.min_share:.0%}, same frames): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
