"""The engine cache: one entry per key, built once, checked on every use, rebuilt when damaged, shared safely."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest

from edge_sdk.backends.onnxruntime.builder import OnnxRuntimeBuilder
from edge_sdk.core.errors import ConfigError, EdgeSDKError, EngineCacheError
from edge_sdk.core.host import HostFacts
from edge_sdk.engines.cache import EngineCache, EngineKey
from edge_sdk.engines.cache_lock import KeyLock
from edge_sdk.engines.engine import PreparedEngine, prepare_engine, verify_cache
from edge_sdk.graph.options import GraphOptions
from edge_sdk.profiles import DeviceProfile

from .helpers import every_path, keys_sharing_a_prefix, race_to_build, snapshot

ARTIFACT = "model.optimized.onnx"
MANIFEST = "manifest.json"
CACHE_LOGGER = "edge_sdk.engines.cache"

KEY = EngineKey(
    model_sha256="a" * 64,
    profile_name="x86-cpu",
    profile_sha256="b" * 64,
    backend="onnxruntime",
    backend_version="1.0.0",
    device_identity="arch=x86_64;cpu=Test CPU;cpu_flags=0123456789ab",
    precision="fp32",
    input_shapes="images: float32[?x3x8x8]",
)


def write_artifact(out_dir: Path) -> dict[str, Any]:
    """A stand-in build for cache-level tests: one artifact file and some facts."""
    (out_dir / "engine.bin").write_bytes(b"artifact")
    return {"builder": "write_artifact"}


def never_build(out_dir: Path) -> dict[str, Any]:
    raise AssertionError("the build must not run in this test")


def prepare(model: Path, profile: DeviceProfile, cache: EngineCache, facts: HostFacts) -> PreparedEngine:
    return prepare_engine(model, profile, cache=cache, facts=facts)


def run_classifier(prepared: PreparedEngine) -> np.ndarray:
    """Logits of the float classifier on a fixed input, through the cached engine."""
    images = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with prepared.open() as runner:
        return runner.infer({"images": images})["logits"]


def warnings_from_cache(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CACHE_LOGGER and r.levelno == logging.WARNING]


# --- Damage done to an entry on disk, and what verify_cache must call it --------------------------------------


def truncate_artifact(entry: Path) -> None:
    artifact = entry / ARTIFACT
    artifact.write_bytes(artifact.read_bytes()[: artifact.stat().st_size // 2])


def delete_artifact(entry: Path) -> None:
    (entry / ARTIFACT).unlink()


def garbage_manifest(entry: Path) -> None:
    (entry / MANIFEST).write_bytes(b"\x00\xffnot json {")


def manifest_not_an_object(entry: Path) -> None:
    (entry / MANIFEST).write_text("[1, 2, 3]")


def manifest_files_not_a_mapping(entry: Path) -> None:
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["files"] = sorted(manifest["files"])  # a list of names instead of {name: sha256}
    (entry / MANIFEST).write_text(json.dumps(manifest))


def delete_manifest(entry: Path) -> None:
    (entry / MANIFEST).unlink()


DAMAGE = [
    pytest.param(truncate_artifact, "does not match its hash", id="truncated-artifact"),
    pytest.param(delete_artifact, f"{ARTIFACT} is missing", id="missing-artifact"),
    pytest.param(garbage_manifest, "manifest.json is unreadable", id="garbage-manifest"),
    pytest.param(manifest_not_an_object, "manifest.json is unreadable", id="manifest-not-an-object"),
    pytest.param(manifest_files_not_a_mapping, "manifest.json is unreadable", id="manifest-files-not-a-mapping"),
    pytest.param(delete_manifest, "manifest.json is missing", id="missing-manifest"),
]


# --- Build once, then reuse -----------------------------------------------------------------------------------


def test_prepare_engine_when_called_twice_builds_once_and_reuses_the_entry(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given an empty cache and a model
    model = tiny_models["float_classifier"]

    # When the same engine is prepared twice
    first = prepare(model, cpu_profile, engine_cache, host_facts)
    second = prepare(model, cpu_profile, engine_cache, host_facts)

    # Then only the first call builds, and both get the same entry, which runs
    assert first.built, "the first prepare of a new key must build the engine"
    assert not second.built, "the second prepare of the same key must reuse the cached engine"
    assert second.entry.directory == first.entry.directory, "both calls must use the same cache entry"
    assert run_classifier(second).shape == (2, 4), "the cached engine must run and give one logit row per image"


def test_prepare_engine_when_no_cache_is_given_uses_the_cache_dir_from_the_environment(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, host_facts: HostFacts
) -> None:
    # Given EDGE_SDK_CACHE_DIR points at a private directory (set for every test by conftest)
    cache_dir = Path(os.environ["EDGE_SDK_CACHE_DIR"])

    # When an engine is prepared without naming a cache
    prepared = prepare_engine(tiny_models["float_classifier"], cpu_profile, facts=host_facts)

    # Then its entry lives in that directory
    assert prepared.entry.directory.parent == cache_dir, "the default cache must honour EDGE_SDK_CACHE_DIR"


def test_manifest_when_entry_is_built_records_the_key_the_files_and_the_build_facts(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given a model
    model = tiny_models["float_classifier"]

    # When its engine is built
    prepared = prepare(model, cpu_profile, engine_cache, host_facts)

    # Then manifest.json beside the artifact records everything that keys the engine
    entry = prepared.entry.directory
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["key"] == {
        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        "profile_name": "x86-cpu",
        "profile_sha256": cpu_profile.content_hash(),
        "backend": "onnxruntime",
        "backend_version": OnnxRuntimeBuilder().version(),
        "device_identity": host_facts.device_identity(),
        "precision": "fp32",
        "input_shapes": "images: float32[?x3x8x8]",
        "graph_sha256": GraphOptions().fingerprint(),
        "calibration_sha256": None,
    }, "the manifest key must name the model, profile, backend, device, precision and input shapes"
    assert manifest["digest"] == entry.name, "the entry directory must be named after the key's digest"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["built_at"]), "built_at must be a UTC timestamp"
    # And the hash of every artifact file
    assert ARTIFACT in manifest["files"], "the optimised model must be listed among the entry's files"
    assert manifest["files"] == {
        name: hashlib.sha256((entry / name).read_bytes()).hexdigest() for name in manifest["files"]
    }, "each listed file must carry the sha256 of its content"
    # And what the build learned
    assert manifest["facts"]["providers_used"] == ["CPUExecutionProvider"], "facts must say which providers ran"
    assert manifest["facts"]["model_path"] == str(model.resolve()), "facts must say which model file was built"


# --- What keys an engine --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model_sha256", "c" * 64),
        ("profile_name", "x86-nvidia"),
        ("profile_sha256", "d" * 64),
        ("backend", "tensorrt"),
        ("backend_version", "1.0.1"),
        ("device_identity", "arch=x86_64;cpu=Other CPU;cpu_flags=0123456789ab"),
        ("precision", "fp16"),
        ("input_shapes", "images: float32[1x3x8x8]"),
        ("graph_sha256", "f" * 64),
        ("calibration_sha256", "e" * 64),
    ],
)
def test_engine_key_when_one_field_changes_gets_another_digest(field: str, value: str) -> None:
    # Given a key and a copy of it with one field changed
    changed = replace(KEY, **{field: value})

    # When both are digested
    # Then the digests differ, while an equal key digests the same
    assert changed.digest() != KEY.digest(), f"a different {field} must give a different cache entry"
    assert EngineKey(**asdict(KEY)).digest() == KEY.digest(), "equal keys must give the same cache entry"


def test_get_or_build_when_precision_differs_builds_a_separate_entry(engine_cache: EngineCache) -> None:
    # Given an entry built for fp32
    fp32_entry, _ = engine_cache.get_or_build(KEY, write_artifact)

    # When the same model is asked for in fp16
    fp16_entry, built = engine_cache.get_or_build(replace(KEY, precision="fp16"), write_artifact)

    # Then a second entry is built and the fp32 one stays cached
    assert built, "another precision must build its own engine"
    assert fp16_entry.directory != fp32_entry.directory, "each precision must have its own entry"
    assert fp16_entry.key["precision"] == "fp16", "the new entry's manifest must record its precision"
    assert not engine_cache.get_or_build(KEY, never_build)[1], "the fp32 entry must still be served from the cache"


def _retrained_model(tmp_path: Path, model: Path) -> Path:
    proto = onnx.load(str(model))
    proto.doc_string = "retrained"  # same graph and inputs, different bytes
    changed = tmp_path / "retrained.onnx"
    onnx.save(proto, str(changed))
    return changed


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("model bytes", "model_sha256"),
        ("profile content", "profile_sha256"),
        ("device identity", "device_identity"),
    ],
)
def test_prepare_engine_when_key_input_changes_builds_a_new_entry_and_keeps_the_old(
    change: str,
    field: str,
    tmp_path: Path,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given an engine already built for a model, a profile and a host
    model = tiny_models["float_classifier"]
    original = prepare(model, cpu_profile, engine_cache, host_facts)
    original_files = snapshot(original.entry.directory)

    # When one of them changes
    changed_model, changed_profile, changed_facts = model, cpu_profile, host_facts
    if change == "model bytes":
        changed_model = _retrained_model(tmp_path, model)
    elif change == "profile content":
        engine = cpu_profile.engine.model_copy(update={"intra_op_threads": cpu_profile.engine.intra_op_threads + 2})
        changed_profile = cpu_profile.model_copy(update={"engine": engine})
    else:
        changed_facts = replace(host_facts, cpu_model="Another CPU @ 2.00GHz")
    changed = prepare(changed_model, changed_profile, engine_cache, changed_facts)

    # Then a new entry is built whose key differs in exactly that field
    assert changed.built, f"a change of {change} must build a new engine"
    assert changed.entry.directory != original.entry.directory, f"a change of {change} must use a new entry"
    differing = {name for name in original.entry.key if original.entry.key[name] != changed.entry.key[name]}
    assert differing == {field}, f"a change of {change} must change only {field} in the key"
    # And the original entry is untouched and still served from the cache
    assert snapshot(original.entry.directory) == original_files, "building another key must not touch this entry"
    assert not prepare(model, cpu_profile, engine_cache, host_facts).built, "the original engine must stay cached"


# --- Damaged entries ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("damage", "problem"), DAMAGE)
def test_prepare_engine_when_entry_is_damaged_rebuilds_it_and_the_engine_runs(
    damage: Callable[[Path], None],
    problem: str,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given a cached engine whose entry was damaged on disk
    model = tiny_models["float_classifier"]
    original = prepare(model, cpu_profile, engine_cache, host_facts)
    expected_logits = run_classifier(original)
    damage(original.entry.directory)

    # When the engine is prepared again
    rebuilt = prepare(model, cpu_profile, engine_cache, host_facts)

    # Then it is rebuilt in place and runs as before
    assert rebuilt.built, "a damaged entry must be rebuilt, not used"
    assert rebuilt.entry.directory == original.entry.directory, "the rebuilt engine must take the same entry"
    np.testing.assert_allclose(
        run_classifier(rebuilt), expected_logits, atol=1e-5, err_msg="the rebuilt engine must give the same logits"
    )
    assert [r.problem for r in verify_cache(engine_cache)] == [None], "the rebuilt entry must verify as healthy"


@pytest.mark.parametrize(
    "damage", [truncate_artifact, garbage_manifest, delete_manifest], ids=["truncated", "garbage", "missing"]
)
def test_prepare_engine_when_entry_is_damaged_logs_one_warning_naming_it(
    damage: Callable[[Path], None],
    caplog: pytest.LogCaptureFixture,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given a cached engine whose entry was damaged on disk
    model = tiny_models["float_classifier"]
    original = prepare(model, cpu_profile, engine_cache, host_facts)
    damage(original.entry.directory)

    # When the engine is prepared again
    with caplog.at_level(logging.WARNING, logger=CACHE_LOGGER):
        prepare(model, cpu_profile, engine_cache, host_facts)

    # Then exactly one warning says which entry was unusable and that it is being rebuilt
    warnings = warnings_from_cache(caplog)
    assert len(warnings) == 1, f"one damaged entry must log one warning, got {warnings}"
    assert original.entry.digest in warnings[0], "the warning must name the entry's digest"
    assert "rebuilding" in warnings[0], "the warning must say the entry is being rebuilt"


@pytest.mark.parametrize(("damage", "problem"), DAMAGE)
def test_verify_cache_when_entry_is_damaged_reports_what_is_wrong(
    damage: Callable[[Path], None],
    problem: str,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given a damaged entry and a healthy one
    damaged = prepare(tiny_models["float_classifier"], cpu_profile, engine_cache, host_facts)
    healthy = prepare(tiny_models["uint8_mean_classifier"], cpu_profile, engine_cache, host_facts)
    damage(damaged.entry.directory)

    # When the cache is verified
    problems = {report.digest: report.problem for report in verify_cache(engine_cache)}

    # Then the damaged entry's problem is named and the healthy one has none
    assert problems[healthy.entry.digest] is None, "a healthy entry must report no problem"
    assert problem in (problems[damaged.entry.digest] or ""), f"a damaged entry must be reported as '{problem}'"


def test_prepare_engine_when_rebuilding_a_damaged_entry_leaves_other_entries_untouched(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given two cached engines, one of them damaged
    damaged = prepare(tiny_models["float_classifier"], cpu_profile, engine_cache, host_facts)
    other = prepare(tiny_models["uint8_mean_classifier"], cpu_profile, engine_cache, host_facts)
    other_files = snapshot(other.entry.directory)
    truncate_artifact(damaged.entry.directory)

    # When the damaged one is rebuilt
    assert prepare(tiny_models["float_classifier"], cpu_profile, engine_cache, host_facts).built

    # Then the other entry's files are byte for byte the same and it is still served from the cache
    assert snapshot(other.entry.directory) == other_files, "a rebuild must not touch other entries"
    assert not prepare(tiny_models["uint8_mean_classifier"], cpu_profile, engine_cache, host_facts).built


# --- Failed builds, races, unwritable and stale caches --------------------------------------------------------


def test_get_or_build_when_the_build_fails_leaves_no_entry_and_no_staging_dir(engine_cache: EngineCache) -> None:
    # Given a cache with a good entry for another key
    good, _ = engine_cache.get_or_build(replace(KEY, model_sha256="f" * 64), write_artifact)
    good_files = snapshot(good.directory)

    def half_written_then_fails(out_dir: Path) -> dict[str, Any]:
        (out_dir / "engine.bin").write_bytes(b"half an engine")
        raise RuntimeError("builder crashed")

    # When a build writes part of its artifact and then fails
    with pytest.raises(RuntimeError, match="builder crashed"):
        engine_cache.get_or_build(KEY, half_written_then_fails)

    # Then neither an entry nor a staging directory is left for that key
    leftovers = [path.name for path in engine_cache.root.iterdir() if path.is_dir()]
    assert KEY.digest() not in leftovers, "a failed build must not leave an entry"
    assert not [name for name in leftovers if name.startswith(".tmp-")], "a failed build must remove its staging dir"
    # And the other entry is untouched
    assert snapshot(good.directory) == good_files, "a failed build must not touch other entries"
    # And the next attempt builds from scratch
    assert engine_cache.get_or_build(KEY, write_artifact)[1], "after a failed build the key must build again"


def test_get_or_build_when_processes_race_for_one_key_builds_it_once(tmp_path: Path) -> None:
    # Given three processes, each with its own EngineCache on one directory, and a slow build
    root, counter = tmp_path / "engines", tmp_path / "builds.log"
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(3), context.Queue()
    racers = [
        context.Process(target=race_to_build, args=(str(root), asdict(KEY), str(counter), barrier, results))
        for _ in range(3)
    ]

    # When they all ask for the same key at once
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(timeout=60)

    # Then the build ran exactly once and every process got the same entry
    assert [racer.exitcode for racer in racers] == [0, 0, 0], "every racing process must finish cleanly"
    assert len(counter.read_text().splitlines()) == 1, "concurrent builders of one key must build it once"
    assert {directory for directory, _ in outcomes} == {str(root / KEY.digest())}, "all must get the same entry"
    assert sorted(built for _, built in outcomes) == [False, False, True], "exactly one process must report a build"
    assert (root / KEY.digest() / "engine.bin").read_bytes() == b"engine built once", "the artifact must be complete"
    assert not list(root.glob(".*.lock")), "the builders must leave no lock file behind"


@pytest.mark.parametrize("layout", ["below a regular file", "is a regular file"])
def test_get_or_build_when_cache_dir_cannot_be_created_raises_cache_error_naming_it(
    layout: str, tmp_path: Path
) -> None:
    # Given a cache root that cannot be a directory (tests run as root, so permissions would not stop writes)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file")
    root = blocker / "engines" if layout == "below a regular file" else blocker

    # When an engine is requested
    with pytest.raises(EngineCacheError) as raised:
        EngineCache(root).get_or_build(KEY, never_build)

    # Then one SDK error line names the directory, and nothing was built or overwritten
    message = str(raised.value)
    assert str(root) in message, "the error must name the cache directory that cannot be used"
    assert "\n" not in message, "the error must be one line the CLI can print"
    assert blocker.read_text() == "a regular file", "the file in the way must not be touched"


def test_prepare_engine_when_cache_dir_is_unusable_raises_cache_error_not_a_traceback(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, host_facts: HostFacts
) -> None:
    # Given a cache root below a regular file
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file")
    cache = EngineCache(blocker / "engines")

    # When an engine is prepared into it
    with pytest.raises(EdgeSDKError) as raised:
        prepare(tiny_models["float_classifier"], cpu_profile, cache, host_facts)

    # Then the user gets the SDK's cache error naming the directory
    assert isinstance(raised.value, EngineCacheError), f"expected EngineCacheError, got {type(raised.value).__name__}"
    assert str(cache.root) in str(raised.value), "the error must name the cache directory"


def test_verify_cache_when_backend_version_changed_reports_stale_and_remove_drops_only_that_entry(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given two entries, one of which claims to be built by an older onnxruntime (manifest.json is not hashed)
    stale = prepare(tiny_models["float_classifier"], cpu_profile, engine_cache, host_facts).entry
    healthy = prepare(tiny_models["uint8_mean_classifier"], cpu_profile, engine_cache, host_facts).entry
    manifest = json.loads((stale.directory / MANIFEST).read_text())
    manifest["key"]["backend_version"] = "0.0.1"
    (stale.directory / MANIFEST).write_text(json.dumps(manifest))
    healthy_files = snapshot(healthy.directory)

    # When the cache is verified
    problems = {report.digest: report.problem for report in verify_cache(engine_cache)}

    # Then the old entry is reported stale, naming both versions, and the other is healthy
    assert problems[healthy.digest] is None, "an entry built by the installed backend must verify as healthy"
    stale_problem = problems[stale.digest] or ""
    assert "stale" in stale_problem, "an entry built by another backend version must be reported stale"
    assert "0.0.1" in stale_problem, "the report must name the version the entry was built with"
    assert onnxruntime.__version__ in stale_problem, "the report must name the installed version"

    # When the stale entry is removed by its digest
    removed = engine_cache.remove(stale.digest)

    # Then only that entry is gone
    assert removed.removed == (stale.digest,), "remove must report exactly the entry it removed"
    assert not stale.directory.exists(), "the removed entry's directory must be gone"
    assert snapshot(healthy.directory) == healthy_files, "remove must not touch other entries"
    assert [report.digest for report in verify_cache(engine_cache)] == [healthy.digest], "one entry must remain"


def test_prepare_engine_when_a_dead_builder_left_a_temp_dir_cleans_it_on_the_next_build(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given the staging dir of a builder that died mid-build for this key, and one of a builder for another key
    model = tiny_models["float_classifier"]
    digest = prepare(model, cpu_profile, engine_cache, host_facts).entry.digest
    engine_cache.remove(digest)
    dead = engine_cache.root / f".tmp-{digest}-dead1234"
    dead.mkdir()
    (dead / ARTIFACT).write_bytes(b"half an engine")
    other = engine_cache.root / f".tmp-{'0' * 32}-busy5678"
    other.mkdir()
    (other / ARTIFACT).write_bytes(b"another key being built")

    # When the key is built again
    assert prepare(model, cpu_profile, engine_cache, host_facts).built

    # Then the dead builder's leftovers are gone, the other key's staging dir is left alone, and neither is an entry
    assert not dead.exists(), "a stale staging dir of the key being built must be removed"
    assert (other / ARTIFACT).read_bytes() == b"another key being built", "another key's staging dir must be kept"
    assert [report.digest for report in verify_cache(engine_cache)] == [digest], "staging dirs are not entries"


# --- The cache deletes only what it made ----------------------------------------------------------------------

FOREIGN_DIGEST = "0123456789abcdef0123456789abcdef"  # named like an entry, but not made by the SDK
MISNAMED_DIGEST = "fedcba9876543210fedcba9876543210"  # its manifest records another digest
LINKED_DIGEST = "a" * 32  # a symbolic link named like an entry


def plant_user_files(root: Path, outside: Path) -> set[str]:
    """Things a user (or another tool) put in the cache folder; returns their names."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes.txt").write_text("my notes")
    (root / ".hidden-config").write_text("setting=1")
    (root / "my-models").mkdir()
    (root / "my-models" / "keep.onnx").write_bytes(b"a model I keep here")
    (root / "foreign-manifest").mkdir()
    (root / "foreign-manifest" / MANIFEST).write_text(json.dumps({"name": "another tool's manifest"}))
    (root / FOREIGN_DIGEST).mkdir()
    (root / FOREIGN_DIGEST / "readme.txt").write_text("a folder named like a digest, without an SDK manifest")
    (root / MISNAMED_DIGEST).mkdir()
    (root / MISNAMED_DIGEST / MANIFEST).write_text(
        json.dumps({"format": 1, "digest": "another", "key": {}, "built_at": "x", "facts": {}, "files": {}})
    )
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "precious.bin").write_bytes(b"outside the cache")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / LINKED_DIGEST).symlink_to(outside, target_is_directory=True)
    return {"notes.txt", ".hidden-config", "my-models", "foreign-manifest", FOREIGN_DIGEST, MISNAMED_DIGEST} | {
        "linked",
        LINKED_DIGEST,
    }


def user_tree(root: Path, names: set[str]) -> dict[str, str]:
    return {path: value for path, value in every_path(root).items() if path.split("/")[0] in names}


@pytest.mark.parametrize("how", ["all", "stale", "digest"])
def test_remove_when_the_cache_dir_holds_user_files_leaves_them_untouched(
    how: str, tmp_path: Path, engine_cache: EngineCache
) -> None:
    # Given two SDK entries (stale: "built" by backend version 1.0.0) and user files, folders and links beside them
    first, _ = engine_cache.get_or_build(KEY, write_artifact)
    second, _ = engine_cache.get_or_build(replace(KEY, model_sha256="c" * 64), write_artifact)
    outside = tmp_path / "outside"
    names = plant_user_files(engine_cache.root, outside)
    user_before = user_tree(engine_cache.root, names)
    outside_before = every_path(outside)

    # When entries are removed in that way
    if how == "all":
        removal = engine_cache.remove_all()
    elif how == "stale":
        removal = engine_cache.remove_entries([r for r in verify_cache(engine_cache) if r.problem])
    else:
        removal = engine_cache.remove(first.digest)

    # Then the SDK's entries are gone and every user item is byte for byte as it was
    expected = {first.digest, second.digest} if how != "digest" else {first.digest}
    assert set(removal.removed) == expected, f"remove ({how}) must delete exactly the SDK's entries it was asked for"
    assert not first.directory.exists(), "the removed entry's folder must be gone"
    assert second.directory.exists() == (how == "digest"), "only the named entry goes when a digest is given"
    assert user_tree(engine_cache.root, names) == user_before, "files the SDK did not make must never be deleted"
    assert every_path(outside) == outside_before, "a link out of the cache must never be followed"
    # And with --all/--stale, everything left alone is listed, one item per user file or folder
    if how != "digest":
        listed = {item.path.name for item in removal.left_alone}
        assert listed == set(names), f"every item that is not an SDK entry must be listed, got {sorted(listed)}"


def test_remove_when_the_manifest_names_another_digest_refuses_it(engine_cache: EngineCache) -> None:
    # Given a folder that copies an SDK entry under another digest-like name (its manifest names the original)
    entry, _ = engine_cache.get_or_build(KEY, write_artifact)
    copy = engine_cache.root / ("e" * 32)
    shutil.copytree(entry.directory, copy)
    before = every_path(copy)

    # When that folder is removed by its name
    with pytest.raises(ConfigError) as raised:
        engine_cache.remove("e" * 32)

    # Then it is refused: only a manifest recording the folder's own digest proves the SDK wrote the folder
    assert "not an engine entry" in str(raised.value), "the refusal must say the folder is not an engine entry"
    assert every_path(copy) == before, "a refused removal must not touch the folder"


def test_remove_when_the_entry_holds_a_file_its_manifest_does_not_list_keeps_that_file(
    engine_cache: EngineCache,
) -> None:
    # Given an entry in which a user saved a file of their own
    entry, _ = engine_cache.get_or_build(KEY, write_artifact)
    (entry.directory / "my-notes.txt").write_text("keep me")

    # When the entry is removed
    removal = engine_cache.remove(entry.digest)

    # Then the SDK's files are gone, the user's file stays, and the folder is reported as left alone
    assert removal.removed == (entry.digest,), "the entry itself must count as removed"
    assert sorted(p.name for p in entry.directory.iterdir()) == ["my-notes.txt"], "only the user's file must remain"
    assert (entry.directory / "my-notes.txt").read_text() == "keep me", "the user's file must be untouched"
    assert [item.path for item in removal.left_alone] == [entry.directory], "the folder kept must be reported"
    assert "my-notes.txt" in removal.left_alone[0].reason, "the report must name the file that was kept"


@pytest.mark.parametrize("prefix", ["", "   ", "abc", "zzzz", "../..", "*"], ids=repr)
def test_remove_when_the_prefix_is_empty_short_or_not_hex_refuses_and_leaves_the_cache_byte_identical(
    prefix: str, tmp_path: Path, engine_cache: EngineCache
) -> None:
    # Given a cache with entries, user files, and the lock file of a killed build
    engine_cache.get_or_build(KEY, write_artifact)
    engine_cache.get_or_build(replace(KEY, model_sha256="c" * 64), write_artifact)
    plant_user_files(engine_cache.root, tmp_path / "outside")
    (engine_cache.root / f".{'d' * 32}.lock").touch()
    before = every_path(engine_cache.root)

    # When a removal is asked for with that prefix
    with pytest.raises(ConfigError) as raised:
        engine_cache.remove(prefix)

    # Then it is refused with one line saying what a digest prefix is, and nothing at all changed
    assert "expected a digest prefix" in str(raised.value), "the refusal must say what was expected"
    assert "\n" not in str(raised.value), "the refusal must be one line"
    assert every_path(engine_cache.root) == before, "a refused removal must leave the cache byte-identical"


def test_remove_when_the_prefix_matches_two_entries_refuses_naming_both(engine_cache: EngineCache) -> None:
    # Given two entries whose digests share their first four characters
    one, other = keys_sharing_a_prefix(KEY, 4)
    first, _ = engine_cache.get_or_build(one, write_artifact)
    second, _ = engine_cache.get_or_build(other, write_artifact)
    before = every_path(engine_cache.root)

    # When removal is asked for with that shared prefix
    with pytest.raises(ConfigError) as raised:
        engine_cache.remove(first.digest[:4])

    # Then it is refused, naming both, and both entries stay
    message = str(raised.value)
    assert "matches 2 cache entries" in message, f"an ambiguous prefix must be refused, got: {message}"
    assert first.digest[:12] in message and second.digest[:12] in message, "the refusal must name both candidates"
    assert every_path(engine_cache.root) == before, "a refused removal must leave the cache byte-identical"
    # And a longer prefix picks one of them
    assert engine_cache.remove(first.digest[:12]).removed == (first.digest,), "a unique prefix must remove one"


def test_remove_when_a_build_of_the_key_holds_its_lock_leaves_the_entry(engine_cache: EngineCache) -> None:
    # Given an entry whose key is being (re)built by another builder right now
    entry, _ = engine_cache.get_or_build(KEY, write_artifact)
    before = every_path(entry.directory)
    with KeyLock(engine_cache.root / f".{entry.digest}.lock") as held:
        assert held, "the test must hold the build lock"

        # When it is removed by digest, and with all entries
        with pytest.raises(EngineCacheError, match="being built"):
            engine_cache.remove(entry.digest)
        removal = engine_cache.remove_all()

        # Then neither touches the entry, and the second reports it as busy
        assert removal.busy == (entry.digest,), "an entry being built must be reported busy"
        assert removal.removed == (), "an entry being built must not be removed"
        assert every_path(entry.directory) == before, "an entry being built must be left as it is"
        assert (engine_cache.root / f".{entry.digest}.lock").exists(), "the builder's lock file must stay"


def test_entries_when_the_cache_dir_holds_user_files_lists_them_apart(
    tmp_path: Path, engine_cache: EngineCache
) -> None:
    # Given an SDK entry, user files, and the SDK's own leftovers of a killed build
    entry, _ = engine_cache.get_or_build(KEY, write_artifact)
    names = plant_user_files(engine_cache.root, tmp_path / "outside")
    (engine_cache.root / f".{'d' * 32}.lock").touch()
    (engine_cache.root / f".tmp-{'d' * 32}-dead").mkdir()

    # When the cache is listed
    entries = {report.digest: report for report in verify_cache(engine_cache)}
    others = {item.path.name: item.reason for item in engine_cache.not_entries()}

    # Then folders named like digests are entries (removable only with the SDK's manifest), the rest is apart
    assert set(entries) == {entry.digest, FOREIGN_DIGEST, MISNAMED_DIGEST}, "digest-named folders are entries"
    assert entries[entry.digest].removable, "an entry the SDK built must be removable"
    assert not entries[FOREIGN_DIGEST].removable, "a digest-named folder without a manifest must not be removable"
    assert set(others) == names - set(entries), "every other user item must be listed apart"
    assert others["linked"] == "a symbolic link", "a link must be listed as one (and never followed)"
    assert others["notes.txt"] == "a file", "a file must be listed as one"


# --- Lock files -----------------------------------------------------------------------------------------------


def lock_files(root: Path) -> list[str]:
    return sorted(path.name for path in root.glob(".*.lock"))


def test_get_or_build_when_the_build_succeeds_or_fails_leaves_no_lock_file(engine_cache: EngineCache) -> None:
    # Given a build that works and one that fails
    def fails(out_dir: Path) -> dict[str, Any]:
        raise RuntimeError("builder crashed")

    # When both are run
    engine_cache.get_or_build(KEY, write_artifact)
    with pytest.raises(RuntimeError):
        engine_cache.get_or_build(replace(KEY, model_sha256="c" * 64), fails)

    # Then no lock file is left behind by either
    assert lock_files(engine_cache.root) == [], "a build must remove its lock file, whether it worked or failed"


def invalid_onnx_model(tmp_path: Path, model: Path) -> Path:
    """A model that decodes but fails the ONNX checker, which runs inside the build (under the key's lock)."""
    proto = onnx.load(str(model))
    proto.graph.node[1].op_type = "NoSuchOperator"
    broken = tmp_path / "invalid_op.onnx"
    broken.write_bytes(proto.SerializeToString())
    return broken


@pytest.mark.parametrize("corruption", ["undecodable", "fails-the-checker"])
def test_prepare_engine_when_the_model_is_corrupt_leaves_the_cache_byte_identical(
    corruption: str,
    tmp_path: Path,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given a cache with a good engine, and a corrupt model file
    prepare(tiny_models["uint8_mean_classifier"], cpu_profile, engine_cache, host_facts)
    before = every_path(engine_cache.root)
    if corruption == "undecodable":
        model = tmp_path / "garbage.onnx"
        model.write_bytes(b"\x08\x07not an onnx model" * 50)
    else:
        model = invalid_onnx_model(tmp_path, tiny_models["float_classifier"])

    # When its engine is prepared
    with pytest.raises(EdgeSDKError) as raised:
        prepare(model, cpu_profile, engine_cache, host_facts)

    # Then the user gets the SDK's model error, and the cache is exactly as it was: no entry, lock or staging dir
    assert "is not a valid ONNX model" in str(raised.value), f"expected a model error, got {raised.value}"
    assert every_path(engine_cache.root) == before, "a failed build must leave the cache byte-identical"


def test_remove_when_killed_builds_left_lock_files_cleans_them_but_not_a_held_one(engine_cache: EngineCache) -> None:
    # Given an entry, the lock file and staging dir of a killed build, and a build holding another key's lock
    entry, _ = engine_cache.get_or_build(KEY, write_artifact)
    dead, busy = "d" * 32, "b" * 32
    (engine_cache.root / f".{dead}.lock").touch()
    (engine_cache.root / f".tmp-{dead}-killed").mkdir()
    (engine_cache.root / f".tmp-{busy}-running").mkdir()
    with KeyLock(engine_cache.root / f".{busy}.lock"):
        # When an entry is removed
        removal = engine_cache.remove(entry.digest)

        # Then the killed build's leftovers are gone, the running build's are kept
        names = sorted(path.name for path in engine_cache.root.iterdir())
        assert removal.leftovers == 2, "the killed build's lock file and staging dir must be counted as cleaned"
        assert names == [f".{busy}.lock", f".tmp-{busy}-running"], "only the running build's files must stay"


def test_key_lock_when_the_holder_removes_the_file_a_waiter_is_on_never_gives_it_to_two(tmp_path: Path) -> None:
    # Given a holder of the lock and a waiter blocked on its file
    path = tmp_path / ".key.lock"
    holder = KeyLock(path)
    assert holder.acquire(), "the first taker must get the lock"
    waiter_has_it = threading.Event()
    waiter = KeyLock(path)

    def wait_for_it() -> None:
        waiter.acquire()
        waiter_has_it.set()

    thread = threading.Thread(target=wait_for_it, daemon=True)
    thread.start()
    time.sleep(0.2)  # let the waiter block on the holder's file

    # When the holder releases (removing the file) and a newcomer takes the lock at once on a new file
    holder.release()
    newcomer = KeyLock(path, wait=False)
    newcomer_has_it = newcomer.acquire()
    try:
        # Then at most one of them holds it at any time
        if newcomer_has_it:
            assert not waiter_has_it.wait(0.3), "the waiter must not hold the lock while the newcomer does"
    finally:
        newcomer.release()
    assert waiter_has_it.wait(10), "the waiter must get the lock once the others let go"
    waiter.release()
    thread.join(10)
    assert not path.exists(), "the last holder must remove the lock file"
