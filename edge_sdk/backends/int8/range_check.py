"""Range check: activations whose calibrated INT8 range would saturate or lose precision, found before deployment.

Two ways a range goes wrong:
- **saturate**: the range cuts off a meaningful share of the values seen during calibration (a percentile
  or entropy range that is too tight): those values all become the same extreme INT8 code;
- **precision**: the range is so wide (a few outliers stretch it) that the bulk of the values lands on a
  handful of the 256 INT8 steps: most of the tensor is quantised with a few bits.
Both need the distribution of values, so they are measured on histograms; a tensor without one is only
checked for observed extremes far outside its range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from .quantizer import CalibratedRanges, Quantizer

INT8_STEPS = 255
"""Steps between the lowest and highest code of an 8-bit type."""

HISTOGRAM_SAMPLES = 32
"""Samples the histogram pass of `range_warnings` reads."""
HISTOGRAM_BINS = 2048

RangeProblem = Literal["saturate", "precision"]


@dataclass(frozen=True)
class TensorStats:
    """What calibration saw of one tensor and the range it chose.

    `histogram` is (counts, bin edges) over the values, or over their magnitudes when the first edge is
    not negative and `magnitudes` is set (ONNX Runtime's percentile and entropy calibrators collect |x|).
    """

    low: float
    high: float
    observed_min: float | None = None
    observed_max: float | None = None
    histogram: tuple[np.ndarray, np.ndarray] | None = None
    magnitudes: bool = False


@dataclass(frozen=True)
class RangeWarning:
    tensor: str
    kind: RangeProblem
    detail: str
    clipped_fraction: float | None = None
    levels: float | None = None
    """INT8 steps that the bulk of the values (the `coverage` percentile of |x|) spans."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "kind": self.kind,
            "detail": self.detail,
            "clipped_fraction": self.clipped_fraction,
            "levels": self.levels,
        }


def check_ranges(
    ranges: Any,
    *,
    max_clipped_fraction: float = 1e-3,
    min_levels: float = 16.0,
    coverage: float = 99.0,
    outlier_factor: float = 2.0,
) -> list[RangeWarning]:
    """Warnings for the tensors of `ranges` (a CalibratedRanges or a mapping name -> TensorStats), worst first.

    - saturate: more than `max_clipped_fraction` of the observed values fall outside the range, or, with
      no histogram, the observed extremes exceed the range by `outlier_factor` or more;
    - precision: the `coverage` percentile of |x| spans fewer than `min_levels` INT8 steps.
    """
    warnings: list[RangeWarning] = []
    for name, stats in sorted(tensor_stats(ranges).items()):
        warnings.extend(_check(name, stats, max_clipped_fraction, min_levels, coverage, outlier_factor))
    saturating = sorted((w for w in warnings if w.kind == "saturate"), key=lambda w: -(w.clipped_fraction or 1.0))
    imprecise = sorted((w for w in warnings if w.kind == "precision"), key=lambda w: w.levels or 0.0)
    return saturating + imprecise


def tensor_stats(ranges: Any) -> dict[str, TensorStats]:
    """TensorStats by tensor name from such a mapping, or from a CalibratedRanges (ranges only, no histograms)."""
    if isinstance(ranges, Mapping):
        return {str(name): stats for name, stats in ranges.items()}
    return {name: TensorStats(low, high) for name, (low, high) in ranges.ranges().items()}


def range_warnings(
    model_path: Path,
    ranges: CalibratedRanges,
    samples: Iterable[Mapping[str, np.ndarray]],
    quantizer: Quantizer,
    *,
    max_samples: int = HISTOGRAM_SAMPLES,
    **thresholds: float,
) -> list[RangeWarning]:
    """`check_ranges` on calibrated `ranges`, with the values' distribution measured on `samples` first.

    One pass over at most `max_samples` of the (calibration) samples histograms every calibrated tensor
    inside its range, and counts what falls outside it. `thresholds` go to `check_ranges`.
    """
    bounds = {name: (low, high) for name, (low, high) in ranges.ranges().items() if high > low}
    stats = collect_stats(model_path, bounds, list(samples)[:max_samples], quantizer)
    return check_ranges(stats, **thresholds)


def collect_stats(
    model_path: Path,
    bounds: Mapping[str, tuple[float, float]],
    samples: Sequence[Mapping[str, np.ndarray]],
    quantizer: Quantizer,
    bins: int = HISTOGRAM_BINS,
) -> dict[str, TensorStats]:
    """Run the model with every tensor of `bounds` as an output and histogram each against its bounds.

    The histogram has `bins` bins inside [low, high] plus one bin below and one above (up to the observed
    extremes), so clipping is counted exactly, whatever the calibration method.
    """
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    outputs = {output.name for output in model.graph.output}
    names = [name for name in bounds if name not in outputs]
    model.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in names)
    session = quantizer.session(model, optimize=False)  # unoptimised: every tensor keeps its name
    wanted = [name for name in bounds if name in outputs or name in set(names)]
    inner = {name: np.zeros(bins, np.int64) for name in wanted}
    below = dict.fromkeys(wanted, 0)
    above = dict.fromkeys(wanted, 0)
    lowest = dict.fromkeys(wanted, np.inf)
    highest = dict.fromkeys(wanted, -np.inf)
    for sample in samples:
        for name, value in zip(wanted, session.run(wanted, dict(sample)), strict=True):
            values = np.asarray(value, dtype=np.float32).reshape(-1)
            values = values[np.isfinite(values)]
            if not values.size:
                continue
            low, high = bounds[name]
            inner[name] += np.histogram(values, bins=bins, range=(low, high))[0]
            below[name] += int(np.count_nonzero(values < low))
            above[name] += int(np.count_nonzero(values > high))
            lowest[name] = min(lowest[name], float(values.min()))
            highest[name] = max(highest[name], float(values.max()))
    stats = {}
    for name in wanted:
        low, high = bounds[name]
        if not np.isfinite(lowest[name]):
            continue  # never produced a finite value
        edges = np.concatenate([[min(lowest[name], low)], np.linspace(low, high, bins + 1), [max(highest[name], high)]])
        counts = np.concatenate([[below[name]], inner[name], [above[name]]])
        stats[name] = TensorStats(low, high, lowest[name], highest[name], (counts, edges))
    return stats


def _check(
    name: str, stats: TensorStats, max_clipped: float, min_levels: float, coverage: float, outlier_factor: float
) -> list[RangeWarning]:
    width = stats.high - stats.low
    if not np.isfinite(width) or width <= 0.0:
        return []  # a constant tensor: nothing to saturate, nothing to resolve
    step = width / INT8_STEPS
    bound = f"[{stats.low:.4g}, {stats.high:.4g}]"
    found: list[RangeWarning] = []
    if stats.histogram is None:
        extreme = max(abs(v) for v in (stats.observed_min, stats.observed_max, 0.0) if v is not None)
        limit = max(abs(stats.low), abs(stats.high))
        if extreme >= outlier_factor * limit:
            found.append(
                RangeWarning(
                    name,
                    "saturate",
                    f"observed values reach {extreme:.4g}, {extreme / limit:.1f}x the INT8 range {bound}",
                )
            )
        return found
    centres, counts = _magnitude_bins(stats)
    total = float(counts.sum())
    if total <= 0:
        return found
    clipped = _clipped_fraction(stats) / total
    if clipped > max_clipped:
        found.append(
            RangeWarning(
                name,
                "saturate",
                f"{100 * clipped:.2f}% of the calibration values fall outside the INT8 range {bound} and clip "
                f"to its ends",
                clipped_fraction=clipped,
            )
        )
    typical = _percentile(centres, counts, coverage)
    limit = max(abs(stats.low), abs(stats.high))
    levels = min(typical, limit) / step
    if levels < min_levels and typical > 0.0:
        found.append(
            RangeWarning(
                name,
                "precision",
                f"{coverage:g}% of the values have |x| <= {typical:.4g}, which spans {levels:.1f} of the "
                f"{INT8_STEPS} INT8 steps of {bound} (outliers widen the range)",
                levels=levels,
            )
        )
    return found


def _magnitude_bins(stats: TensorStats) -> tuple[np.ndarray, np.ndarray]:
    """(|bin centre|, count) pairs, whatever the histogram is over."""
    assert stats.histogram is not None
    counts, edges = (np.asarray(a, dtype=np.float64) for a in stats.histogram)
    centres = np.abs((edges[:-1] + edges[1:]) / 2.0)
    return centres, counts


def _clipped_fraction(stats: TensorStats) -> float:
    """Count of histogram values outside [low, high] (bins straddling a bound count in proportion)."""
    assert stats.histogram is not None
    counts, edges = (np.asarray(a, dtype=np.float64) for a in stats.histogram)
    left, right = edges[:-1], edges[1:]
    widths = np.where(right > left, right - left, 1.0)
    if stats.magnitudes or (edges[0] >= 0.0 and stats.low < 0.0):
        # Over |x|: a value is clipped when its magnitude exceeds the bound on its side; the sign is lost,
        # so use the wider side (never reports clipping that did not happen).
        limit = max(abs(stats.low), abs(stats.high))
        outside = np.clip((right - np.maximum(left, limit)) / widths, 0.0, 1.0)
    else:
        above = np.clip((right - np.maximum(left, stats.high)) / widths, 0.0, 1.0)
        below = np.clip((np.minimum(right, stats.low) - left) / widths, 0.0, 1.0)
        outside = above + below
    return float((counts * outside).sum())


def _percentile(values: np.ndarray, weights: np.ndarray, percent: float) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, cumulative[-1] * percent / 100.0))
    return float(values[order][min(index, len(values) - 1)])
