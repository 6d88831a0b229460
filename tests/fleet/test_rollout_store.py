"""RolloutStore: a rollout's spec, waves and per-device outcomes survive closing and reopening the SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edge_sdk.core.errors import RolloutNotFoundError
from edge_sdk.fleet.operator.rollout_store import (
    Outcome,
    RolloutSpec,
    RolloutState,
    RolloutStore,
    TargetDevice,
    assign_waves,
)
from edge_sdk.fleet.wire.manifest import TargetSelector


def spec(**overrides: object) -> RolloutSpec:
    values: dict[str, object] = {
        "manifest": b'{"envelope": true}',
        "deployment_id": "lobby",
        "version": 7,
        "selector": TargetSelector(labels={"site": "lyon"}),
        "first_wave": 2,
        "rate_per_min": 3,
        "abort_threshold": 0.2,
        "rollback_manifest": b'{"rollback": true}',
        "artifacts_dir": Path("/srv/artifacts"),
    }
    values.update(overrides)
    return RolloutSpec(**values)  # type: ignore[arg-type]


def test_assign_waves_when_first_wave_then_rate_then_waves_hold_a_minutes_worth() -> None:
    assert assign_waves(8, first_wave=2, wave_size=3) == [0, 0, 1, 1, 1, 2, 2, 2]
    assert assign_waves(1, first_wave=5, wave_size=1) == [0]
    assert assign_waves(0, first_wave=1, wave_size=1) == []


def test_store_when_reopened_then_spec_waves_and_outcomes_are_as_written(tmp_path: Path) -> None:
    # given a rollout of five devices with some outcomes recorded
    path = tmp_path / "state" / "rollouts.db"
    targets = [TargetDevice(f"cam-{i}", previous_version=6, previous_desired=b"{}" if i else None) for i in range(5)]
    with RolloutStore(path) as store:
        rollout_id = store.create(spec(), targets)
        store.set_outcome(rollout_id, "cam-0", Outcome.SENT, via="command")
        store.set_outcome(rollout_id, "cam-0", Outcome.ACTIVE)
        store.set_outcome(rollout_id, "cam-1", Outcome.SENT, "offline", via="desired")
        store.set_state(rollout_id, RolloutState.WAITING, "two devices offline")
    # when the file is opened again (a new operator process)
    with RolloutStore(path) as store:
        record = store.load(rollout_id)
        # then everything is there
        assert record.spec == spec(), "the spec round-trips"
        assert record.state is RolloutState.WAITING and record.reason == "two devices offline"
        assert [d.wave for d in record.devices] == [0, 0, 1, 1, 1]
        cam0, cam1 = record.devices[0], record.devices[1]
        assert cam0.outcome is Outcome.ACTIVE and cam0.via == "command" and cam0.attempts == 1
        assert cam0.sent_at is not None and cam0.finished_at is not None
        assert cam1.outcome is Outcome.SENT and cam1.via == "desired" and cam1.finished_at is None
        assert cam1.previous_desired == b"{}" and cam0.previous_desired is None
        assert record.counts() == {
            "pending": 3,
            "sent": 1,
            "active": 1,
            "rolled_back": 0,
            "refused": 0,
            "failed": 0,
            "timed_out": 0,
        }
        assert store.latest() == rollout_id


def test_store_when_no_target_then_the_rollout_is_completed_at_once(tmp_path: Path) -> None:
    with RolloutStore(tmp_path / "r.db") as store:
        record = store.load(store.create(spec(), []))
    assert record.state is RolloutState.COMPLETED and record.devices == []


def test_store_when_rollout_is_unknown_then_error_names_recent_ones(tmp_path: Path) -> None:
    with RolloutStore(tmp_path / "r.db") as store:
        known = store.create(spec(), [TargetDevice("cam-1")], rollout_id="known-one")
        with pytest.raises(RolloutNotFoundError, match=known):
            store.load("nope")


@pytest.mark.parametrize(
    ("field", "value"), [("first_wave", 0), ("rate_per_min", 0), ("abort_threshold", 1.5), ("command_timeout_s", 0)]
)
def test_spec_when_a_setting_is_out_of_range_then_it_is_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match="expected"):
        spec(**{field: value})


def test_store_when_a_file_from_before_broker_file_is_opened_then_it_gains_the_column(tmp_path: Path) -> None:
    # given a state file whose rollouts table has no broker_file column (an older edge-sdk wrote it)
    path = tmp_path / "old.db"
    with RolloutStore(path) as store:
        rollout_id = store.create(spec(broker_file=Path("/etc/edge-sdk/operator.yaml")), [TargetDevice("cam-1")])
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE rollouts DROP COLUMN broker_file")
    db.commit()
    db.close()

    # when it is opened again, the old rollout loads without a broker file and a new one keeps its own
    with RolloutStore(path) as store:
        assert store.load(rollout_id).spec.broker_file is None
        newer = store.create(spec(broker_file=Path("/srv/operator.yaml")), [TargetDevice("cam-1")], "newer")
        assert store.load(newer).spec.broker_file == Path("/srv/operator.yaml")
