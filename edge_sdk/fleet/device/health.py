"""The deployment health check: build the engine for this device's profile, run the sample, compare outputs.

`sample_input` and `expected_output` are .npz files of named arrays (a single unnamed array maps to the
model's single input or output). Outputs pass when |actual - expected| <= atol + rtol * |expected|
element-wise, the manifest's `HealthCheck` tolerances.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np

from edge_sdk.core.errors import FleetError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.profiles import DeviceProfile

log = logging.getLogger(__name__)

MAX_HEALTH_ARRAY_BYTES = 256 * 2**20


class HealthCheckError(FleetError):
    """The new version's sample inference did not produce the expected output (or could not run)."""

    reason = "health_failed"


def load_arrays(path: Path, what: str) -> dict[str, np.ndarray]:
    """Named arrays of a .npz (or one array of a .npy, named ''); no pickles."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return {"": loaded}
        with loaded:
            arrays = {}
            total = 0
            for name in loaded.files:
                array = loaded[name]
                total += array.nbytes
                if total > MAX_HEALTH_ARRAY_BYTES:
                    raise HealthCheckError(f"{what} '{path.name}': arrays larger than {MAX_HEALTH_ARRAY_BYTES} bytes")
                arrays[name] = array
            return arrays
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise HealthCheckError(f"{what} '{path.name}': expected a .npz or .npy of arrays ({exc})") from None


def _by_name(arrays: dict[str, np.ndarray], names: list[str], what: str) -> dict[str, np.ndarray]:
    if len(arrays) == 1 and len(names) == 1 and set(arrays) != set(names):
        return {names[0]: next(iter(arrays.values()))}
    return arrays


def compare_outputs(
    actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], atol: float, rtol: float
) -> str | None:
    """Why the outputs differ (the first mismatch), or None when every expected output matches."""
    expected = _by_name(expected, list(actual), "expected output")
    for name, want in expected.items():
        if name not in actual:
            return f"expected an output '{name}', the engine has {', '.join(sorted(actual)) or 'none'}"
        got = np.asarray(actual[name])
        if got.shape != want.shape:
            return f"output '{name}': expected shape {_shape(want.shape)}, got {_shape(got.shape)}"
        got64 = got.astype(np.float64)
        want64 = want.astype(np.float64)
        if not np.all(np.isfinite(got64) | ~np.isfinite(want64)):
            return f"output '{name}': got non-finite values"
        bound = atol + rtol * np.abs(want64)
        diff = np.abs(got64 - want64)
        if not np.all(diff <= bound):
            worst = int(np.argmax(diff - bound))
            return (
                f"output '{name}': {int(np.sum(diff > bound))} of {diff.size} values outside atol={atol:g} "
                f"rtol={rtol:g}; max |diff| {float(diff.max()):.6g} (e.g. expected {float(want64.flat[worst]):.6g}, "
                f"got {float(got64.flat[worst]):.6g})"
            )
    return None


def run_health_check(
    store: ArtifactStore, version: int, profile: DeviceProfile, cache: EngineCache | None = None
) -> dict[str, object]:
    """Build the engine of every model of `version` for `profile`; run the manifest's health check.

    Returns facts for the report (engines built, check passed); raises HealthCheckError with the reason.
    """
    manifest = store.manifest(version)
    facts: dict[str, object] = {"engines": {}}
    engines: dict[str, object] = {}
    prepared = {}
    for artifact in manifest.artifacts:
        if artifact.kind != "model":
            continue
        try:
            engine = prepare_engine(store.artifact_path(artifact.name, version), profile, cache=cache)
        except Exception as exc:  # any build failure (backend errors included) fails the check
            raise HealthCheckError(
                f"engine build of '{artifact.name}' for profile '{profile.name}' failed: {exc}"
            ) from None
        prepared[artifact.name] = engine
        engines[artifact.name] = {"built": engine.built, "precision": engine.precision}
    facts["engines"] = engines
    check = manifest.health_check
    model = manifest.health_check_model()
    if check is None or model is None:
        facts["health_check"] = "none"
        return facts
    inputs = load_arrays(store.artifact_path(check.sample_input, version), "sample_input")
    expected = load_arrays(store.artifact_path(check.expected_output, version), "expected_output")
    engine = prepared[model]
    try:
        with engine.open(threads=1, share_cpu=True) as runner:
            feed = _by_name(inputs, [meta.name for meta in runner.inputs], "sample input")
            outputs = runner.infer(feed)
    except Exception as exc:  # backend errors are not all EdgeSDKError
        raise HealthCheckError(f"sample inference of '{model}' failed: {exc}") from None
    mismatch = compare_outputs(outputs, expected, check.atol, check.rtol)
    if mismatch is not None:
        raise HealthCheckError(f"health check of '{model}' failed: {mismatch}")
    facts["health_check"] = "passed"
    log.info("version %d: health check of %s passed", version, model)
    return facts


def _shape(shape: tuple[int, ...]) -> str:
    """A shape as people write it: 1x3x8x8 (a scalar's is 'scalar')."""
    return "x".join(str(n) for n in shape) or "scalar"
