"""Range check: tensors whose INT8 range clips many values, or spends its steps on a few outliers."""

from __future__ import annotations

import numpy as np

from edge_sdk.backends.int8.range_check import TensorStats, check_ranges


def _stats(values: np.ndarray, low: float, high: float, magnitudes: bool = False) -> TensorStats:
    data = np.abs(values) if magnitudes else values
    counts, edges = np.histogram(data, bins=2048)
    return TensorStats(
        low, high, float(values.min()), float(values.max()), (counts, edges.astype(np.float32)), magnitudes
    )


def test_check_ranges_when_range_fits_the_values_reports_nothing() -> None:
    # given ReLU-like activations calibrated to their observed extremes
    values = np.abs(np.random.default_rng(0).standard_normal(100_000)).astype(np.float32)
    stats = {"relu": _stats(values, 0.0, float(values.max()))}
    # when
    warnings = check_ranges(stats)
    # then
    assert warnings == [], f"a well-fitted range should pass, got {warnings}"


def test_check_ranges_when_range_clips_the_tail_reports_saturation() -> None:
    # given a range that cuts at the 90th percentile: 10% of the values clip
    values = np.random.default_rng(1).uniform(0.0, 10.0, 50_000).astype(np.float32)
    stats = {"conv_out": _stats(values, 0.0, 9.0)}
    # when
    warnings = check_ranges(stats)
    # then
    assert [w.kind for w in warnings] == ["saturate"], warnings
    assert warnings[0].tensor == "conv_out"
    assert warnings[0].clipped_fraction is not None and 0.08 < warnings[0].clipped_fraction < 0.12
    assert "% of the calibration values fall outside the INT8 range [0, 9]" in warnings[0].detail


def test_check_ranges_when_magnitude_histogram_and_symmetric_range_clips_reports_saturation() -> None:
    # given a symmetric range of +-2 over normal values, histogrammed as |x| like ORT's percentile calibrator
    values = np.random.default_rng(2).standard_normal(50_000).astype(np.float32)
    stats = {"x": _stats(values, -2.0, 2.0, magnitudes=True)}
    # when
    warnings = check_ranges(stats)
    # then: about 4.6% of a standard normal lies beyond +-2
    assert [w.kind for w in warnings] == ["saturate"]
    assert 0.03 < (warnings[0].clipped_fraction or 0.0) < 0.06


def test_check_ranges_when_outliers_stretch_the_range_reports_precision_loss() -> None:
    # given values mostly within +-1 and a handful at 200, calibrated with minmax
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(100_000), [200.0, -180.0, 150.0]]).astype(np.float32)
    stats = {"attention": _stats(values, float(values.min()), float(values.max()))}
    # when
    warnings = check_ranges(stats)
    # then: 99% of values (|x| < 2.6) span about 2 of the 255 steps of [-180, 200]
    assert [w.kind for w in warnings] == ["precision"], warnings
    assert warnings[0].levels is not None and warnings[0].levels < 5
    assert "outliers widen the range" in warnings[0].detail


def test_check_ranges_when_no_histogram_flags_extremes_far_outside_the_range() -> None:
    stats = {
        "fits": TensorStats(-1.0, 1.0, observed_min=-1.0, observed_max=1.0),
        "far": TensorStats(0.0, 6.0, observed_min=0.0, observed_max=40.0),
    }
    warnings = check_ranges(stats)
    assert [(w.tensor, w.kind) for w in warnings] == [("far", "saturate")]
    assert "6.7x" in warnings[0].detail


def test_check_ranges_when_several_problems_lists_saturation_worst_first() -> None:
    rng = np.random.default_rng(4)
    uniform = rng.uniform(0.0, 10.0, 20_000).astype(np.float32)
    stats = {
        "a_mild": _stats(uniform, 0.0, 9.9),
        "b_severe": _stats(uniform, 0.0, 5.0),
        "constant": TensorStats(0.0, 0.0),
    }
    warnings = check_ranges(stats)
    assert [w.tensor for w in warnings] == ["b_severe", "a_mild"], "the worst clipping comes first"
