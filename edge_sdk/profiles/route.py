"""Which route a profile takes on this host: its `engine:`, or its `fallback_engine:` when the engine's
backend cannot run here (e.g. a Jetson profile names TensorRT, and ONNX Runtime's route stands in where
TensorRT is not importable). One log line per process says why."""

from __future__ import annotations

import logging

from .model import DeviceProfile

log = logging.getLogger(__name__)
_said: set[tuple[str, str]] = set()


def choose_route(profile: DeviceProfile, *, announce: bool = True) -> tuple[DeviceProfile, str | None]:
    """(the profile as it runs here, why its engine was replaced by the fallback or None). `announce` logs
    the replacement once per process (listing profiles does not)."""
    if profile.fallback_engine is None:
        return profile, None
    problem = profile.backend().unavailable(profile.engine)
    if problem is None:
        return profile, None
    fallback = profile.fallback_engine
    active = profile.model_copy(update={"engine": fallback, "fallback_engine": None})
    reason = f"{profile.engine.backend} cannot run here ({problem})"
    if announce and (profile.name, reason) not in _said:
        _said.add((profile.name, reason))
        log.warning("profile %s: using the %s route: %s", profile.name, fallback.backend, reason)
    return active, reason
