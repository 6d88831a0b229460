"""What tools/bench/offload.py makes of its runs: per-cell figures from the JSONL and the proxy's byte
counters, the oracle, the ratios, the adaptation times of the bandwidth-step run, and the tables."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

EDGE, CLOUD, ADAPTIVE, ORACLE = "edge", "cloud", "adaptive", "oracle"
SWITCH = re.compile(r"switched to (\S+?):")


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def result_time(row: Mapping[str, Any]) -> float:
    """When a frame's result was ready: the camera's stamp plus its total latency."""
    return float(row["timestamp"]) + float(row["timings_ms"]["total"]) / 1000


@dataclass
class Cell:
    bandwidth_mbps: float
    variant: str
    """edge, cloud, a split's label, adaptive, or oracle."""
    mode: str | None
    """The agent's mode name it was pinned to (offload.fixed); None for the adaptive agent."""
    frames: int
    """Frames in the measured window."""
    mean_ms: float
    p50_ms: float
    p99_ms: float
    fps: float
    shares: dict[str, float]
    """Share of the window's frames per place computed (edge, cloud, a split's label)."""
    up_bytes_per_frame: float
    down_bytes_per_frame: float
    dropped: int
    """Window frames without a final result: the live camera's ring dropped them while the edge was behind."""
    lost: int
    """Frames of the whole run without a result and not counted as dropped by the ring (gaps between the
    first and the last result, less the run summary's drops): must be 0."""
    duplicates: int
    """Window frames with more than one final result."""
    ring_dropped: int | None
    """Frames the runtime's ring dropped over the whole run (the run summary), start-up included."""
    start_s: float
    """From the run's start to its first result."""
    picked: str | None = None
    """For the oracle: the fixed variant it is."""


def cell_of(
    bandwidth_mbps: float,
    variant: str,
    mode: str | None,
    rows: Sequence[Mapping[str, Any]],
    window: tuple[int, int],
    bytes_between: Any,
    labels: Mapping[str, str],
    summary: Mapping[str, Any] | None,
    start_s: float,
) -> Cell:
    first, end = window
    inside = [row for row in rows if first <= row["frame"] < end]
    counts = Counter(row["frame"] for row in inside)
    latencies = [float(row["timings_ms"]["total"]) for row in inside]
    done = sorted(result_time(row) for row in inside)
    span = done[-1] - done[0] if len(done) > 1 else math.nan
    places = Counter(labels.get(row.get("computed_at") or EDGE, row.get("computed_at") or EDGE) for row in inside)
    started = min((float(row["timestamp"]) for row in inside), default=math.nan)
    up, down = bytes_between(started, done[-1]) if done else (math.nan, math.nan)
    count = len(inside) or 1
    dropped = summary.get("dropped") if summary else None
    return Cell(
        bandwidth_mbps=bandwidth_mbps,
        variant=variant,
        mode=mode,
        frames=end - first,
        mean_ms=statistics.fmean(latencies) if latencies else math.nan,
        p50_ms=percentile(latencies, 0.5),
        p99_ms=percentile(latencies, 0.99),
        fps=(len(done) - 1) / span if span and span > 0 else math.nan,
        shares={place: n / count for place, n in places.most_common()},
        up_bytes_per_frame=up / count,
        down_bytes_per_frame=down / count,
        dropped=sum(1 for index in range(first, end) if index not in counts),
        lost=max(0, _gaps(rows) - sum(dropped.values())) if isinstance(dropped, dict) else _gaps(rows),
        duplicates=sum(1 for n in counts.values() if n > 1),
        ring_dropped=sum(dropped.values()) if isinstance(dropped, dict) else None,
        start_s=start_s,
    )


def _gaps(rows: Sequence[Mapping[str, Any]]) -> int:
    frames = {int(row["frame"]) for row in rows}
    return max(frames) - min(frames) + 1 - len(frames) if frames else 0


def add_oracles(cells: list[Cell], fixed: Sequence[str]) -> list[Cell]:
    """Each bandwidth's oracle: the fixed variant with the lowest mean latency there, picked offline, among
    those that kept up with the camera (no frame dropped). A fixed mode the link cannot carry falls back
    to the edge by its deadline, and its few frames that get through look fast while the rest are dropped."""
    out = list(cells)
    for mbps in dict.fromkeys(cell.bandwidth_mbps for cell in cells):
        measured = [c for c in cells if c.bandwidth_mbps == mbps and c.variant in fixed and not math.isnan(c.mean_ms)]
        candidates = [c for c in measured if c.dropped == 0] or measured
        if candidates:
            best = min(candidates, key=lambda c: c.mean_ms)
            out.append(Cell(**{**asdict(best), "variant": ORACLE, "picked": best.variant}))
    return out


def oracle_variant(cells: Sequence[Cell], mbps: float) -> str | None:
    return next((c.picked for c in cells if c.variant == ORACLE and c.bandwidth_mbps == mbps), None)


def _at(cells: Sequence[Cell], mbps: float, variant: str) -> Cell | None:
    return next((c for c in cells if c.bandwidth_mbps == mbps and c.variant == variant), None)


def ratios(cells: Sequence[Cell], cell: Cell) -> dict[str, float | None]:
    """Mean latency against the better of edge-only and cloud-only and against the oracle; up bytes
    against cloud-only."""
    baselines = [c.mean_ms for v in (EDGE, CLOUD) if (c := _at(cells, cell.bandwidth_mbps, v)) is not None]
    oracle = _at(cells, cell.bandwidth_mbps, ORACLE)
    cloud = _at(cells, cell.bandwidth_mbps, CLOUD)
    return {
        "vs_best_baseline": cell.mean_ms / min(baselines) if baselines else None,
        "vs_oracle": cell.mean_ms / oracle.mean_ms if oracle else None,
        "up_vs_cloud": cell.up_bytes_per_frame / cloud.up_bytes_per_frame
        if cloud and cloud.up_bytes_per_frame
        else None,
    }


# --- the bandwidth-step run -----------------------------------------------------------------------------


@dataclass
class Step:
    at_s: float
    """Seconds after the schedule began."""
    from_mbps: float
    to_mbps: float
    best: str | None
    """The oracle's variant at the new bandwidth (from the table)."""
    mode_before: str | None
    """Where the last frames before the step were computed."""
    first_in_best_s: float | None
    """From the step to the camera's first frame after it computed in `best` (0: already there and stayed)."""
    switch_s: float | None
    """From the step to the agent's first 'switched to <best>' event after it, when it logged one."""
    switches: int
    """Mode switches the agent logged in this segment (flapping shows here)."""
    shares: dict[str, float] = field(default_factory=dict)
    mean_ms: float = math.nan
    p99_ms: float = math.nan
    frames: int = 0


def steps_of(
    schedule: Sequence[tuple[float, float]],
    started: float,
    end_s: float,
    rows: Sequence[Mapping[str, Any]],
    log: Sequence[tuple[float, str]],
    cells: Sequence[Cell],
    labels: Mapping[str, str],
) -> list[Step]:
    """`schedule`: (seconds after `started`, Mbit/s) from 0; each segment runs to the next or `end_s`."""

    def place(row: Mapping[str, Any]) -> str:
        where = row.get("computed_at") or EDGE
        return labels.get(where, where)

    ordered = sorted((row for row in rows if row["timestamp"] >= started), key=lambda row: row["timestamp"])
    switches = [
        (t - started, labels.get(m, m)) for t, line in log if (match := SWITCH.search(line)) for m in [match[1]]
    ]
    steps = []
    for number, (at, mbps) in enumerate(schedule):
        until = schedule[number + 1][0] if number + 1 < len(schedule) else end_s
        segment = [row for row in ordered if at <= row["timestamp"] - started < until]
        before = [row for row in ordered if row["timestamp"] - started < at]
        best = oracle_variant(cells, mbps)
        previous = schedule[number - 1][1] if number else math.nan
        mode_before = place(before[-1]) if before else None
        first_in_best = next((row["timestamp"] - started - at for row in segment if place(row) == best), None)
        if best is not None and mode_before == best and segment and all(place(row) == best for row in segment[:5]):
            first_in_best = 0.0
        switch = next((t - at for t, mode in switches if at <= t < until and mode == best), None)
        latencies = [float(row["timings_ms"]["total"]) for row in segment]
        places = Counter(place(row) for row in segment)
        steps.append(
            Step(
                at_s=at,
                from_mbps=previous,
                to_mbps=mbps,
                best=best,
                mode_before=mode_before,
                first_in_best_s=first_in_best,
                switch_s=switch,
                switches=sum(1 for t, _mode in switches if at <= t < until),
                shares={p: n / len(segment) for p, n in places.most_common()} if segment else {},
                mean_ms=statistics.fmean(latencies) if latencies else math.nan,
                p99_ms=percentile(latencies, 0.99),
                frames=len(segment),
            )
        )
    return steps


# --- tables -----------------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}{suffix}"


def _shares(shares: Mapping[str, float]) -> str:
    return " ".join(f"{place} {share * 100:.0f}%" for place, share in shares.items())


def cells_table(cells: Sequence[Cell], variants: Sequence[str]) -> str:
    """Every cell: one line per bandwidth and variant, the oracle last in each bandwidth."""
    width = max(len(v) for v in [*variants, "oracle = split@expanded_conv_3"])
    head = (
        f"{'Mbit/s':>6}  {'variant':<{width}}  {'mean ms':>8} {'p99 ms':>8} {'FPS':>5} {'up KB/fr':>8} "
        f"{'x best e/c':>10} {'x oracle':>8} {'up/cloud':>8} {'drop':>4} {'lost':>4}  computed at"
    )
    lines = [head, "-" * len(head)]
    order = {v: n for n, v in enumerate([*variants, ORACLE])}
    for mbps in dict.fromkeys(cell.bandwidth_mbps for cell in cells):
        for cell in sorted((c for c in cells if c.bandwidth_mbps == mbps), key=lambda c: order.get(c.variant, 99)):
            r = ratios(cells, cell)
            name = f"oracle = {cell.picked}" if cell.variant == ORACLE else cell.variant
            lines.append(
                f"{mbps:>6g}  {name:<{width}}  {_num(cell.mean_ms):>8} {_num(cell.p99_ms):>8} {_num(cell.fps):>5} "
                f"{_num(cell.up_bytes_per_frame / 1000):>8} {_num(r['vs_best_baseline'], 2, 'x'):>10} "
                f"{_num(r['vs_oracle'], 2, 'x'):>8} {_num(r['up_vs_cloud'], 2, 'x'):>8} {cell.dropped:>4} {cell.lost:>4}  "
                f"{_shares(cell.shares)}"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def side_by_side(cells: Sequence[Cell], variants: Sequence[str]) -> str:
    """Mean / p99 ms and FPS per variant (rows) and bandwidth (columns), then the adaptive agent's ratios."""
    bandwidths = list(dict.fromkeys(cell.bandwidth_mbps for cell in cells))
    width = max(len(v) for v in [*variants, "adaptive / best(edge, cloud)"])
    column = 21
    lines = [f"{'mean / p99 ms, FPS':<{width}}  " + "".join(f"{f'{mbps:g} Mbit/s':>{column}}" for mbps in bandwidths)]
    lines.append("-" * len(lines[0]))
    for variant in [*variants, ORACLE]:
        cols = []
        for mbps in bandwidths:
            cell = _at(cells, mbps, variant)
            cols.append(
                f"{_num(cell.mean_ms, 0)} / {_num(cell.p99_ms, 0)}, {_num(cell.fps, 1)}" if cell is not None else "-"
            )
        lines.append(f"{variant:<{width}}  " + "".join(f"{c:>{column}}" for c in cols))
    picks = [oracle_variant(cells, mbps) or "-" for mbps in bandwidths]
    lines.append(f"{'  oracle is':<{width}}  " + "".join(f"{p[-column + 1 :]:>{column}}" for p in picks))
    for label, key in (
        ("adaptive / best(edge, cloud)", "vs_best_baseline"),
        ("adaptive / oracle", "vs_oracle"),
        ("adaptive up bytes / cloud", "up_vs_cloud"),
    ):
        cols = []
        for mbps in bandwidths:
            cell = _at(cells, mbps, ADAPTIVE)
            cols.append(_num(ratios(cells, cell)[key], 2, "x") if cell is not None else "-")
        lines.append(f"{label:<{width}}  " + "".join(f"{c:>{column}}" for c in cols))
    return "\n".join(lines) + "\n"


def steps_table(steps: Sequence[Step]) -> str:
    head = (
        f"{'at s':>5} {'Mbit/s':>11}  {'best (oracle)':<24} {'agent before':<24} {'first in best':>13} "
        f"{'switch':>7} {'switches':>8} {'mean ms':>8} {'p99 ms':>7}  computed at"
    )
    lines = [head, "-" * len(head)]
    for step in steps:
        change = f"{step.to_mbps:g}" if math.isnan(step.from_mbps) else f"{step.from_mbps:g} -> {step.to_mbps:g}"
        lines.append(
            f"{step.at_s:>5.0f} {change:>11}  {step.best or '-':<24} {step.mode_before or '-':<24} "
            f"{_num(step.first_in_best_s, 2, ' s'):>13} {_num(step.switch_s, 2, ' s'):>7} {step.switches:>8} "
            f"{_num(step.mean_ms):>8} {_num(step.p99_ms):>7}  {_shares(step.shares)}"
        )
    return "\n".join(lines) + "\n"
