"""A PNG of an offload plan: each kept row's expected latency against the link's bandwidth (log x,
0.5 to 200 Mbit/s) at one RTT, so where the modes cross shows. matplotlib (the `plot` extra) is
imported only when a plot is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.core.errors import ConfigError

from .cost_model import CLOUD, EDGE, SPLIT_PREFIX
from .offload_plan import OffloadPlan, PlanRow

LOW_MBPS, HIGH_MBPS = 0.5, 200.0
POINTS = 160
LABEL_CHARS = 44


def require_matplotlib() -> None:
    """Fail early, in one line, when a plot is asked for and matplotlib is missing."""
    _import_pyplot()


def plot_plan(
    plan: OffloadPlan, path: Path, rtt_ms: float, marks_mbps: tuple[float, ...] = (), cloud_queue_ms: float = 0.0
) -> Path:
    """Write the plot to `path` (PNG); `marks_mbps` are drawn as dotted verticals (the table's bandwidths)."""
    rows = plan.kept
    if not rows:
        raise ConfigError("the plan has no kept row to plot")
    plt = _import_pyplot()
    mbps = np.geomspace(LOW_MBPS, HIGH_MBPS, POINTS)
    labels = short_labels(plan.rows)
    figure, axes = plt.subplots(figsize=(9.0, 5.5), dpi=100)
    try:
        curves = []
        for row, label in zip(plan.rows, labels, strict=True):
            if row.cost is None:
                continue
            latency = [row.expected_ms(value * 1e6, rtt_ms, cloud_queue_ms) or 0.0 for value in mbps]
            style: dict[str, Any] = {"linewidth": 1.4}
            if not row.kept:  # what it would cost, faint: the user sees what the refusal gives up
                style = {"color": "grey", "linewidth": 0.8, "linestyle": ":", "alpha": 0.8}
                label += " (refused)"
            elif row.mode == EDGE:
                style = {"color": "black", "linewidth": 2.4}
            elif row.mode == CLOUD:
                style["linestyle"] = "--"
            if row.kept:
                curves.append(latency)
            axes.plot(mbps, latency, label=label, **style)
        best = np.min(np.asarray(curves), axis=0)
        axes.plot(mbps, best, color="#2ecc71", linewidth=6, alpha=0.25, label="best")
        for mark in marks_mbps:
            axes.axvline(mark, color="grey", linestyle=":", linewidth=0.8)
        axes.set_xscale("log")
        axes.set_xlim(LOW_MBPS, HIGH_MBPS)
        top = float(np.percentile(np.asarray(curves), 90))
        axes.set_ylim(0, max(top, float(best.max())) * 1.1)
        axes.set_xlabel("link bandwidth (Mbit/s)")
        axes.set_ylabel("expected latency per frame (ms)")
        title = f"{Path(plan.model).name}: edge {plan.edge_profile}, cloud {plan.cloud_profile}, RTT {rtt_ms:g} ms"
        projection = [note for note in plan.notes if note.startswith("projected")]
        axes.set_title("\n".join([title, *projection]), fontsize=10)
        axes.grid(which="both", linestyle=":", linewidth=0.5)
        axes.legend(fontsize=7, loc="upper right")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(str(path), format="png")
    finally:
        plt.close(figure)
    return path


def short_labels(rows: Sequence[PlanRow]) -> list[str]:
    """Legend labels: a long split name keeps the first path segment that tells its tensor from the
    other cuts' (`split@…/expanded_conv_6/…:0+1`), then the variant."""
    modes = list(dict.fromkeys(row.mode for row in rows if row.mode.startswith(SPLIT_PREFIX)))
    segments = {mode: mode.removeprefix(SPLIT_PREFIX).split("/") for mode in modes}
    short = {mode: _short_mode(mode, segments[mode], [segments[m] for m in modes if m != mode]) for mode in modes}
    return [
        f"{short.get(row.mode, row.mode)} ({row.variant})" if row.variant else short.get(row.mode, row.mode)
        for row in rows
    ]


def _short_mode(mode: str, parts: list[str], others: list[list[str]]) -> str:
    if len(mode) <= LABEL_CHARS or len(parts) == 1:
        return mode
    telling = next(
        (i for i, part in enumerate(parts[:-1]) if all(i >= len(other) or other[i] != part for other in others)),
        len(parts) - 1,
    )
    if telling == len(parts) - 1:
        return SPLIT_PREFIX + "…/" + parts[-1]
    last = parts[-1]
    suffix = last[last.find(":") :] if ":" in last else ""
    return SPLIT_PREFIX + ("…/" if telling else "") + parts[telling] + "/…" + suffix


def _import_pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'edge-sdk[plot]'") from None
    return plt
