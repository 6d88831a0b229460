"""ArtifactStore: versions on disk, an atomic `current`, rollback, pruning, and no way out of the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_sdk.core.errors import ArtifactError, ArtifactHashError, ArtifactPathError
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.wire.manifest import Artifact, DeploymentManifest

from .conftest import install, make_manifest, payload_for


def installed(store: ArtifactStore, *versions: int) -> ArtifactStore:
    for version in versions:
        install(store, make_manifest(version))
    return store


def current_bytes(store: ArtifactStore) -> bytes:
    """What a pipeline reading through the stable `current` path sees."""
    return (store.root / "current" / "artifacts" / "detector.onnx").read_bytes()


def test_store_when_a_version_is_activated_current_points_at_its_files(store: ArtifactStore) -> None:
    installed(store, 1)
    assert store.current_version() == 1
    assert os.readlink(store.root / "current") == "versions/1", "a relative link, so the store can move"
    assert current_bytes(store) == payload_for(1)
    assert store.manifest() == make_manifest(1), "the manifest is kept beside the artifacts"


def test_store_when_a_newer_version_is_activated_the_previous_stays_on_disk(store: ArtifactStore) -> None:
    installed(store, 1, 2)
    assert store.current_version() == 2 and current_bytes(store) == payload_for(2)
    assert store.versions() == [1, 2]
    assert store.artifact_path("detector.onnx", 1).read_bytes() == payload_for(1)


def test_store_rollback_when_called_switches_back_to_the_version_active_before(store: ArtifactStore) -> None:
    installed(store, 1, 2)
    assert store.rollback() == 1
    assert store.current_version() == 1 and current_bytes(store) == payload_for(1)
    assert store.versions() == [1, 2], "rolling back deletes nothing"


def test_store_rollback_when_nothing_came_before_refuses(store: ArtifactStore) -> None:
    installed(store, 1)
    with pytest.raises(ArtifactError, match=r"no previous version to roll back to \(current: 1\)"):
        store.rollback()
    assert store.current_version() == 1


def test_store_when_more_versions_than_keep_removes_the_oldest(store: ArtifactStore) -> None:
    installed(store, 1, 2, 3, 4, 5)
    assert store.versions() == [3, 4, 5], "keep=3 keeps the three newest"
    assert store.rollback() == 4 and store.rollback() == 3
    with pytest.raises(ArtifactError):
        store.rollback()


def test_store_when_rolled_back_then_pruned_keeps_the_rollback_target(store: ArtifactStore) -> None:
    # given: 1 -> 2, then an explicit rollback to 1 (history 1, 2, 1)
    installed(store, 1, 2)
    store.activate(1)
    # when: three newer versions arrive
    installed(store, 3, 4, 5)
    # then: current and previous are always kept
    assert store.versions() == [3, 4, 5]
    assert store.previous_version() == 4


def test_store_when_reopened_remembers_history_and_high_water_marks(store: ArtifactStore) -> None:
    installed(store, 1, 2)
    store.rollback()
    reopened = ArtifactStore(store.root)
    state = reopened.version_state()
    assert (state.current, state.highest, state.kept) == (1, 2, frozenset({1, 2}))
    assert state.newest_created_at == make_manifest(2).created_at


def test_store_version_state_when_the_link_moved_but_state_was_not_written_still_counts_current(
    store: ArtifactStore,
) -> None:
    installed(store, 1, 2)
    (store.root / "state.json").unlink()  # a crash between the link switch and the state write
    state = store.version_state()
    assert state.current == 2 and state.highest == 2


# ---------------------------------------------------------------- staging never touches current


def test_staging_when_an_artifact_hash_differs_refuses_it_and_current_is_unchanged(store: ArtifactStore) -> None:
    installed(store, 1)
    with store.stage(make_manifest(2)) as staging:
        with pytest.raises(ArtifactHashError, match="expected 3200 bytes with sha256"):
            staging.add_bytes("detector.onnx", payload_for(2)[:-1] + b"x")
        assert staging.missing == ["detector.onnx"]
        with pytest.raises(ArtifactError, match=r"artifacts not written yet: detector.onnx$"):
            staging.commit()
    assert store.current_version() == 1 and store.versions() == [1]
    assert list((store.root / "staging").iterdir()) == [], "an abandoned staging is removed"


def test_staging_when_more_bytes_than_the_manifest_says_arrive_stops_writing(store: ArtifactStore) -> None:
    with store.stage(make_manifest(1)) as staging:
        writer = staging.writer("detector.onnx")
        writer.write(payload_for(1))
        with pytest.raises(ArtifactHashError, match="got more than that"):
            writer.write(b"x")
    assert store.versions() == []


def test_staging_when_the_agent_fails_midway_leaves_current_alone(store: ArtifactStore) -> None:
    installed(store, 1)
    with pytest.raises(RuntimeError), store.stage(make_manifest(2)) as staging:
        staging.add_bytes("detector.onnx", payload_for(2))
        raise RuntimeError("health check crashed")
    assert store.current_version() == 1 and store.versions() == [1]


def test_staging_when_committed_but_not_activated_leaves_current_alone(store: ArtifactStore) -> None:
    installed(store, 1)
    with store.stage(make_manifest(2)) as staging:
        staging.add_bytes("detector.onnx", payload_for(2))
        staging.commit()
    assert store.current_version() == 1 and store.versions() == [1, 2]


def test_staging_when_an_artifact_is_not_in_the_manifest_refuses_it(store: ArtifactStore) -> None:
    with store.stage(make_manifest(1)) as staging, pytest.raises(ArtifactError, match="not in the manifest"):
        staging.add_bytes("other.onnx", b"x")


def test_staging_add_file_when_moving_an_assembled_file_verifies_and_moves_it(
    store: ArtifactStore, tmp_path: Path
) -> None:
    source = tmp_path / "assembled"
    source.write_bytes(payload_for(1))
    with store.stage(make_manifest(1)) as staging:
        staging.add_file("detector.onnx", source, move=True)
        staging.commit()
    assert not source.exists(), "the file was moved, not copied"
    store.activate(1)
    assert current_bytes(store) == payload_for(1)


def test_store_discard_version_when_a_staged_version_failed_removes_it_but_never_current(
    store: ArtifactStore,
) -> None:
    installed(store, 1)
    with store.stage(make_manifest(2)) as staging:
        staging.add_bytes("detector.onnx", payload_for(2))
        staging.commit()
    store.discard_version(2)
    assert store.versions() == [1] and 2 not in store.version_state().kept
    with pytest.raises(ArtifactError, match="version 1 is active"):
        store.discard_version(1)


def test_store_activate_when_the_version_was_never_committed_refuses(store: ArtifactStore) -> None:
    installed(store, 1)
    with pytest.raises(ArtifactError, match=r"version 7 is not in the store; expected one of 1$"):
        store.activate(7)
    assert store.current_version() == 1


def test_store_verify_version_when_a_file_was_corrupted_on_disk_raises_hash_error(store: ArtifactStore) -> None:
    installed(store, 1)
    path = store.artifact_path("detector.onnx")
    path.write_bytes(b"y" + path.read_bytes()[1:])
    with pytest.raises(ArtifactHashError, match=r"version 1 artifact 'detector\.onnx'"):
        store.verify_version(1)


def test_store_remove_stale_when_a_crash_left_staging_behind_removes_it(store: ArtifactStore) -> None:
    installed(store, 1)
    staging = store.stage(make_manifest(2))
    staging.add_bytes("detector.onnx", payload_for(2))  # ... and the agent dies here
    (store.transfer_dir(1) / "leftover").mkdir()
    store.remove_stale()
    assert list((store.root / "staging").iterdir()) == []
    assert not (store.root / "transfers" / "1").exists(), "transfers of versions at or below current go"
    assert store.current_version() == 1


# ---------------------------------------------------------------- no way out of the store


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../b", "..", "", "x\x00y"])
def test_store_artifact_path_when_the_name_escapes_refuses_it(store: ArtifactStore, name: str) -> None:
    installed(store, 1)
    with pytest.raises(ArtifactPathError, match="refused: expected"):
        store.artifact_path(name)


def test_store_stage_when_a_manifest_was_built_without_validation_refuses_escaping_names(
    store: ArtifactStore,
) -> None:
    good = make_manifest(1)
    evil_artifact = Artifact.model_construct(**{**dict(good.artifacts[0]), "name": "../../evil"})
    evil = DeploymentManifest.model_construct(**{**dict(good), "artifacts": [evil_artifact]})
    with pytest.raises(
        ArtifactPathError, match=r"artifact name '\.\./\.\./evil' refused: expected a file name without path separators"
    ):
        store.stage(evil)
    assert not (store.root.parent / "evil").exists()


def test_store_when_an_artifact_is_a_planted_symlink_refuses_to_follow_it(store: ArtifactStore, tmp_path: Path) -> None:
    installed(store, 1)
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    path = store.root / "versions" / "1" / "artifacts" / "detector.onnx"
    path.unlink()
    path.symlink_to(secret)
    with pytest.raises(ArtifactPathError, match="got a symlink"):
        store.artifact_path("detector.onnx")
    with pytest.raises(ArtifactPathError):
        store.verify_version(1)


def test_store_when_a_version_folder_is_a_symlink_ignores_it_and_refuses_to_activate_it(
    store: ArtifactStore, tmp_path: Path
) -> None:
    installed(store, 1)
    outside = tmp_path / "outside"
    (outside / "artifacts").mkdir(parents=True)
    (store.root / "versions" / "9").symlink_to(outside)
    assert store.versions() == [1], "a symlinked version folder is not a version"
    with pytest.raises(ArtifactPathError, match="got a symlink"):
        store.activate(9)
    assert store.current_version() == 1


def test_store_when_current_points_outside_the_store_refuses_it(store: ArtifactStore, tmp_path: Path) -> None:
    installed(store, 1)
    link = store.root / "current"
    link.unlink()
    link.symlink_to(tmp_path)
    with pytest.raises(ArtifactPathError, match="expected a link to versions/<version>"):
        store.current_version()


def test_store_when_the_artifacts_folder_is_a_symlink_out_refuses_it(store: ArtifactStore, tmp_path: Path) -> None:
    installed(store, 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "detector.onnx").write_bytes(payload_for(1))
    folder = store.root / "versions" / "1" / "artifacts"
    (folder / "detector.onnx").unlink()
    folder.rmdir()
    folder.symlink_to(outside)
    with pytest.raises(ArtifactPathError, match="outside the store"):
        store.artifact_path("detector.onnx")


def test_store_when_keep_is_below_two_refuses(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep must be at least 2"):
        ArtifactStore(tmp_path / "store", keep=1)
