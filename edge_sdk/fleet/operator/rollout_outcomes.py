"""What a device's answers mean for a rollout: its answer to `deploy`, or the deploy its reported state tells of.

Each gives an `Outcome` and a reason. The reported state resolves the devices whose answer never came:
those sent the deployment through their desired state (offline), those whose command timed out, and
those in flight when a run stopped.
"""

from __future__ import annotations

from edge_sdk.fleet.operator.client import DeviceRecord
from edge_sdk.fleet.operator.rollout_store import Outcome
from edge_sdk.fleet.wire.protocol import ACTIVATION_FAILED, HEALTH_FAILED, REFUSED, Response

__all__ = ["outcome_of", "reported_outcome"]


def outcome_of(response: Response, version: int, record: DeviceRecord) -> tuple[Outcome, str | None]:
    """A device's final answer to `deploy`, as a rollout outcome and a reason."""
    if response.ok:
        status = (response.result or {}).get("status")
        if status == "active":
            return Outcome.ACTIVE, None
        return Outcome.FAILED, (
            f"the device answered deploy with status '{status}', expected 'active'"
            if status is not None
            else "the device answered deploy without a status, expected 'active'"
        )
    error = response.error
    if error is None:
        return Outcome.FAILED, "the device answered ok=false without an error"
    text = f"{error.reason}{f' ({error.detail})' if error.detail else ''}: {error.message}"
    if error.reason == REFUSED:
        if error.detail == "replay" and record.active_version == version:
            return Outcome.ACTIVE, None  # already running it (e.g. converged through its desired state)
        return Outcome.REFUSED, text
    if error.reason in (HEALTH_FAILED, ACTIVATION_FAILED):
        return Outcome.FAILED, text
    return Outcome.FAILED, text


def reported_outcome(record: DeviceRecord, version: int) -> tuple[Outcome, str | None] | None:
    """The outcome of deploying `version` that the device's reported state shows, or None while it shows none."""
    reported = record.reported
    if reported is None or reported.last_deploy is None or reported.last_deploy.version != version:
        if reported is not None and reported.active_version == version:
            return Outcome.ACTIVE, "reported active"
        return None
    last = reported.last_deploy
    if last.outcome == "pending":  # converging through desired state, waiting for inline chunks
        return None
    if last.outcome == "active":
        return Outcome.ACTIVE, "reported active"
    if last.outcome == "refused":
        return Outcome.REFUSED, f"reported refused: {last.reason}"
    return Outcome.FAILED, f"reported {last.outcome}: {last.reason}"
