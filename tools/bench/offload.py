"""Issue 13, figure 1 (here, 2 cores): edge-only, cloud-only, every fixed split, the adaptive agent and
the oracle per bandwidth on a throttled link, then the adaptive agent under a bandwidth schedule.

Each cell is one `taskset -c 0 edge-sdk run --json` of the demo detector with an `offload:` section
(`fixed:` pins a variant; the adaptive agent has none), against one worker
(`taskset -c 1 edge-sdk offload worker --threads 1`) through a private Mosquitto. Only the edge's
link is throttled: its broker file points at tools/harness's throttling proxy (bandwidth per cell,
RTT/2 of delay each way), which counts the bytes it carries; the worker talks to the broker directly.
The frames are the demo video's (the synthetic source it is rendered from: the same photo, path and
300-frame cycle at 640x480), paced at --fps like a live camera. A cell measures --frames consecutive
frames, from the first the camera made --settle-s after the run's first result (start-up and the
link estimate's first samples are left out), each of which must have exactly one final result.

    PYTHONPATH=. .venv/bin/python tools/bench/offload.py            # the whole figure (~9 minutes)
    PYTHONPATH=. .venv/bin/python tools/bench/offload.py --quick    # 100 and 1 Mbit/s, fewer frames

--json prints one JSON document on stdout (progress goes to stderr either way).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench.offload_bed import DEVICE, MODELS, Bed, Placement, demo_pipeline, open_bed, run_edge  # noqa: E402
from tools.bench.offload_report import (  # noqa: E402
    ADAPTIVE,
    CLOUD,
    EDGE,
    Cell,
    add_oracles,
    cell_of,
    cells_table,
    ratios,
    side_by_side,
    steps_of,
    steps_table,
)

GENERIC = ("FeatureExtractor", "MobilenetV2")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the variants -----------------------------------------------------------------------------------------


def split_variants(fps: float, model: str, folder: Path) -> dict[str, dict[str, Any]]:
    """label -> the agent's mode name and cut tensor, for each split the agent offers with cuts: auto
    (its tails compute something: split_engines.TRIVIAL_TAIL_SHARE leaves out the cut after the NMS)."""
    import numpy as np

    from cloud_offload.split_engines import largest_tensor, split_candidates, split_model_of
    from edge_sdk.engines.cache import EngineCache
    from edge_sdk.pipeline.config import PipelineConfig

    config = PipelineConfig.model_validate(demo_pipeline(fps, None, None, model, folder))
    split = split_model_of(config, EngineCache())
    names: dict[str, tuple[str, int]] = {}
    for candidate in split_candidates(split):
        if candidate.trivial_tail:
            log(f"left out {candidate.name}: its tail is {candidate.tail_share:.1%} of the model (the agent's rule)")
            continue
        sizes = zip(candidate.measured.shapes, candidate.measured.dtypes, strict=True)
        nbytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in sizes)
        names[candidate.name] = (largest_tensor(candidate.measured), nbytes)
    segments = {
        name: [s for s in tensor.split(":")[0].split("/") if s not in GENERIC] for name, (tensor, _) in names.items()
    }
    out = {}
    for name, parts in segments.items():
        unique = sum(1 for other in segments.values() if other[0] == parts[0]) == 1
        label = "split@" + (parts[0] if unique else "/".join(parts[:2]))
        out[label] = {"mode": name, "tensor": names[name][0], "cut_bytes_fp32": names[name][1]}
    return out


def offload_section(bed: Bed, variant: str, splits: dict[str, dict[str, Any]], deadline_ms: float) -> dict[str, Any]:
    """A fixed variant also gets only its own mode (and cut) besides the edge, so the agent does not
    open the heads it would never use: start-up takes 2-3 s instead of 6, and nothing else differs."""
    section: dict[str, Any] = {"broker": str(bed.edge_broker_file), "device": DEVICE, "deadline_ms": deadline_ms}
    if variant == EDGE:
        section |= {"fixed": EDGE, "modes": [EDGE]}
    elif variant == CLOUD:
        section |= {"fixed": CLOUD, "modes": [EDGE, CLOUD]}
    elif variant in splits:
        section |= {"fixed": splits[variant]["mode"], "modes": [EDGE, "split"], "cuts": [splits[variant]["tensor"]]}
    return section


# --- the runs ------------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace, bed: Bed, variants: list[str], splits: dict[str, dict[str, Any]]) -> list[Cell]:
    labels = {spec["mode"]: label for label, spec in splits.items()}
    cells: list[Cell] = []
    for mbps in args.bandwidths:
        for variant in variants:
            bed.proxy.set(bandwidth_bps=mbps * 1e6)
            section = offload_section(bed, variant, splits, args.deadline_ms)
            name = f"{mbps:g}mbps-{variant.replace('/', '_')}"
            try:
                run = run_edge(bed, name, args.fps, section, args.frames, args.settle_s)
            except RuntimeError as exc:  # one cell that cannot run leaves the others to measure
                log(f"{mbps:>5g} Mbit/s {variant:<24} FAILED: {exc}")
                continue
            cell = cell_of(
                mbps,
                variant,
                section.get("fixed"),
                run.rows,
                run.window,
                bed.proxy.bytes_between,
                labels,
                run.summary,
                run.rows[0]["_seen"] - run.launched,
            )
            cells.append(cell)
            notes = [line for _t, line in run.log if not line.startswith(("info: source", "interrupted (SIGINT)"))]
            log(
                f"{mbps:>5g} Mbit/s {variant:<24} mean {cell.mean_ms:6.1f} p99 {cell.p99_ms:6.1f} ms "
                f"FPS {cell.fps:4.1f} up {cell.up_bytes_per_frame / 1000:6.1f} KB/frame dropped {cell.dropped} lost {cell.lost} "
                f"dup {cell.duplicates} start {cell.start_s:.1f} s {cell.shares}"
                + (f"\n    the run said: {notes[:5]}" if notes else "")
            )
    return cells


def adapt(
    args: argparse.Namespace, bed: Bed, cells: list[Cell], splits: dict[str, dict[str, Any]]
) -> tuple[list[tuple[float, float]], list[Any], list[tuple[float, str]]]:
    schedule = [(n * args.step_s, mbps) for n, mbps in enumerate([*args.bandwidths, args.bandwidths[0]])]
    end_s = len(schedule) * args.step_s
    started: list[float] = []

    def begin(_window_start: float) -> None:
        started.append(time.time())
        bed.proxy.follow([(at, {"bandwidth_bps": mbps * 1e6}) for at, mbps in schedule])

    bed.proxy.set(bandwidth_bps=schedule[0][1] * 1e6)
    log(
        f"adaptive agent under the schedule {' -> '.join(f'{m:g}' for _a, m in schedule)} Mbit/s, {args.step_s:g} s each"
    )
    section = offload_section(bed, ADAPTIVE, splits, args.deadline_ms)
    frames = math.ceil(end_s * args.fps)
    run = run_edge(bed, "schedule", args.fps, section, frames, args.settle_s, on_window=begin)
    labels = {spec["mode"]: label for label, spec in splits.items()}
    steps = steps_of(schedule, started[0], end_s, run.rows, run.log, cells, labels)
    window = [row for row in run.rows if run.window[0] <= row["frame"] < run.window[1]]
    unanswered = frames - len({row["frame"] for row in window})
    ring_dropped = sum((run.summary or {}).get("dropped", {}).values())
    lost = max(0, unanswered - ring_dropped)
    log(
        f"schedule run: {len(window)} results for {frames} frames, {unanswered} without one, ring dropped {ring_dropped}"
    )
    switches = [(t - started[0], line) for t, line in run.log if "switched to" in line or "->" in line]
    for at, line in switches:
        log(f"  {at:6.2f} s  {line}")
    return (
        schedule,
        steps,
        [(at, line) for at, line in switches]
        + [
            (
                math.nan,
                f"{unanswered} of {frames} frames without a result, {ring_dropped} dropped by the ring, {lost} lost",
            )
        ],
    )


def host() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    return f"{os.cpu_count()} cores, {model}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", choices=MODELS, default="detector", help="the demo detector or the ResNet-18-shaped CNN"
    )
    parser.add_argument("--edge-cores", default="0", help="taskset CPU list of the edge")
    parser.add_argument("--edge-threads", type=int, default=1, help="the edge's inference threads")
    parser.add_argument("--edge-profile", help="the edge's device profile (default: detected)")
    parser.add_argument("--worker-cores", default="1", help="taskset CPU list of the worker")
    parser.add_argument("--worker-threads", type=int, default=1, help="the worker's threads (0: its profile's)")
    parser.add_argument("--worker-profile", help="the worker's device profile (default: detected)")
    parser.add_argument("--bandwidths", default="100,20,5,1", help="Mbit/s per cell, and the schedule's steps")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added round-trip time (half each way)")
    parser.add_argument("--frames", type=int, default=150, help="frames measured per cell")
    parser.add_argument("--fps", type=float, default=15.0, help="the camera's frame rate")
    parser.add_argument("--settle-s", type=float, default=2.0, help="left out after a run's first result")
    parser.add_argument("--step-s", type=float, default=10.0, help="seconds per bandwidth in the schedule run")
    parser.add_argument("--deadline-ms", type=float, default=800.0, help="offload.deadline_ms")
    parser.add_argument(
        "--variants",
        default="edge,cloud,splits,adaptive",
        help="edge, cloud, splits (every split), a split's label (split@...), adaptive; the oracle is derived",
    )
    parser.add_argument("--no-schedule", action="store_true", help="skip the bandwidth-step run")
    parser.add_argument("--quick", action="store_true", help="100 and 1 Mbit/s, 45 frames, one split, 5 s steps")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document on stdout")
    parser.add_argument("--keep", type=Path, help="keep the runs' files (pipelines, JSONL, logs) in this folder")
    args = parser.parse_args()
    if args.quick:
        args.bandwidths, args.frames, args.step_s = "100,1", 45, 5.0
        if args.variants == parser.get_default("variants"):
            args.variants = "edge,cloud,smallest-split,adaptive"
    args.bandwidths = [float(b) for b in args.bandwidths.split(",")]

    def on_term(signum: int, frame: object) -> NoReturn:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    begun = time.monotonic()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="offload-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    splits = split_variants(args.fps, args.model, folder)
    wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
    variants: list[str] = []
    for variant in wanted:
        if variant == "splits":
            variants += list(splits)
        elif variant == "smallest-split":  # --quick: the split that sends the least
            variants.append(min(splits, key=lambda label: splits[label]["cut_bytes_fp32"]))
        elif variant in (EDGE, CLOUD, ADAPTIVE) or variant in splits:
            variants.append(variant)
        else:
            parser.error(
                f"unknown variant {variant!r}: expected edge, cloud, splits, adaptive or one of {list(splits)}"
            )
    log(f"host: {host()}; edge on cores {args.edge_cores}, worker on {args.worker_cores}; files in {folder}")
    try:
        placement = Placement(
            args.edge_cores,
            args.edge_threads,
            args.edge_profile,
            args.worker_cores,
            args.worker_threads or None,
            args.worker_profile,
        )
        with open_bed(folder, args.rtt_ms, args.fps, log, args.model, placement) as bed:
            cells = measure(args, bed, variants, splits)
            fixed = [v for v in variants if v != ADAPTIVE]
            cells = add_oracles(cells, fixed)
            schedule: list[tuple[float, float]] = []
            steps: list[Any] = []
            switches: list[tuple[float, str]] = []
            if not args.no_schedule and ADAPTIVE in variants:
                schedule, steps, switches = adapt(args, bed, cells, splits)
    except KeyboardInterrupt:
        log("interrupted: everything the bench started is stopped")
        sys.exit(130)
    finally:
        if args.keep is None:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    seconds = time.monotonic() - begun
    if args.json:
        document = {
            "host": host(),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "splits": splits,
            "cells": [asdict(cell) | {"ratios": ratios(cells, cell)} for cell in cells],
            "schedule": schedule,
            "steps": [asdict(step) for step in steps],
            "switches": switches,
            "seconds": round(seconds, 1),
        }
        print(json.dumps(document, indent=2, default=str))
        return
    print(f"{args.model}; host: {host()}; {args.frames} frames per cell at {args.fps:g} FPS, RTT {args.rtt_ms:g} ms")
    print()
    print(side_by_side(cells, variants))
    print(cells_table(cells, variants))
    if steps:
        print(f"adaptive agent, bandwidth steps every {args.step_s:g} s (one run):")
        print(steps_table(steps))
        for at, line in switches:
            print(f"  {at:6.2f} s  {line}" if not math.isnan(at) else f"  {line}")
    print(f"\n{seconds:.0f} s in all")


if __name__ == "__main__":
    main()
