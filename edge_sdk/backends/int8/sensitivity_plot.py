"""A PNG bar chart of per-layer sensitivity (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ConfigError

from .sensitivity import LayerSensitivity

MAX_BARS = 60
"""Past this many layers the labels stop being readable; the least sensitive are left out."""


def plot_sensitivity(layers: Sequence[LayerSensitivity], path: Path, title: str = "", metric: str = "") -> Path:
    """Write a horizontal bar chart of `metric_drop` per layer, most sensitive on top; returns `path`."""
    if not layers:
        raise ConfigError("expected at least one layer to plot, got none")
    plt = _import_pyplot()
    shown = list(layers)[:MAX_BARS]
    names = [_short(layer.node) for layer in shown]
    drops, label = _values(shown, metric)
    height = max(3.0, 0.28 * len(shown) + 1.5)
    figure, axes = plt.subplots(figsize=(9.0, height), dpi=100)
    try:
        colors = ["#c0392b" if drop > 0 else "#7f8c8d" for drop in drops]
        axes.barh(range(len(shown)), drops, color=colors)
        axes.set_yticks(range(len(shown)), labels=names, fontsize=7)
        axes.invert_yaxis()
        axes.set_xlabel(label)
        suffix = f" (top {len(shown)} of {len(layers)})" if len(shown) < len(layers) else ""
        axes.set_title((title or "INT8 sensitivity: each layer quantised alone") + suffix, fontsize=10)
        axes.axvline(0.0, color="black", linewidth=0.6)
        axes.grid(axis="x", linestyle=":", linewidth=0.5)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(str(path), format="png")
    finally:
        plt.close(figure)
    return path


def _values(layers: Sequence[LayerSensitivity], metric: str) -> tuple[list[float], str]:
    """The drop per layer; when no layer drops at all (common for detection on a few samples), what
    separates them instead: score drift of matched boxes, else 1 - cosine."""
    if any(layer.metric_drop != 0.0 for layer in layers):
        return [layer.metric_drop for layer in layers], metric or layers[0].metric
    if all(layer.score_drift is not None for layer in layers):
        return [float(layer.score_drift or 0.0) for layer in layers], "score drift of matched boxes (no box lost)"
    return [1.0 - layer.cosine for layer in layers], f"1 - lowest cosine ({layers[0].metric} is 0 for every layer)"


def _short(node: str, limit: int = 48) -> str:
    return node if len(node) <= limit else "…" + node[-(limit - 1) :]


def _import_pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'edge-sdk[plot]'") from None
    matplotlib.use("Agg")  # files only; never open a window or need a display
    import matplotlib.pyplot as plt

    return plt
