"""A rollout as JSON: what `fleet status --json` prints and the dashboard's rollouts page reads."""

from __future__ import annotations

from typing import Any

from edge_sdk.fleet.operator.rollout_store import RolloutRecord


def rollout_json(record: RolloutRecord) -> dict[str, Any]:
    failed = sum(1 for d in record.devices if d.outcome.failure)
    return {
        "id": record.id,
        "deployment_id": record.spec.deployment_id,
        "version": record.spec.version,
        "state": record.state.value,
        "reason": record.reason,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "first_wave": record.spec.first_wave,
        "rate_per_min": record.spec.rate_per_min,
        "abort_threshold": record.spec.abort_threshold,
        "failed_share": failed / len(record.devices) if record.devices else 0.0,
        "aborted_wave": record.aborted_wave,
        "counts": record.counts(),
        "devices": [
            {
                "device": d.device,
                "wave": d.wave,
                "outcome": d.outcome.value,
                "via": d.via,
                "reason": d.reason,
                "previous_version": d.previous_version,
                "rollback_signed": d.rollback_manifest is not None,
                "attempts": d.attempts,
                "sent_at": d.sent_at,
                "finished_at": d.finished_at,
            }
            for d in record.devices
        ],
    }
