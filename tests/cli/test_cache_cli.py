"""`edge-sdk cache ls | rm | verify` on a cache folder that also holds things the SDK did not make, in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from edge_sdk.engines.cache import EngineCache, EngineKey

from ..engines.helpers import every_path, keys_sharing_a_prefix
from .conftest import Run

USER_ITEMS = ("notes.txt", ".hidden-config", "my-models", "foreign-manifest", "0123456789abcdef0123456789abcdef")
KEY = EngineKey(
    model_sha256="a" * 64,
    profile_name="x86-cpu",
    profile_sha256="b" * 64,
    backend="onnxruntime",
    backend_version="1.0.0",
    device_identity="arch=x86_64;cpu=Test CPU",
    precision="fp32",
    input_shapes="images: float32[?x3x8x8]",
)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "engines"


def build(edge_sdk: Run, cache: Path, model: Path) -> Path:
    code, out, err = edge_sdk("--cache-dir", cache, "build", model, "--profile", "x86-cpu")
    assert code == 0, f"the build of {model.name} must work: {out}{err}"
    return next(d for d in cache.iterdir() if d.is_dir() and _model_of(d) == str(model.resolve()))


def write_engine(out_dir: Path) -> dict[str, Any]:
    """A stand-in build: the CLI acts on the entry folders, whatever built them."""
    (out_dir / "engine.bin").write_bytes(b"artifact")
    return {}


def _model_of(entry: Path) -> str | None:
    manifest = entry / "manifest.json"
    return json.loads(manifest.read_text())["facts"]["model_path"] if manifest.is_file() else None


def plant_user_items(cache: Path, outside: Path) -> None:
    (cache / "notes.txt").write_text("my notes")
    (cache / ".hidden-config").write_text("setting=1")
    (cache / "my-models").mkdir()
    (cache / "my-models" / "keep.onnx").write_bytes(b"a model I keep here")
    (cache / "foreign-manifest").mkdir()
    (cache / "foreign-manifest" / "manifest.json").write_text('{"name": "another tool"}')
    (cache / USER_ITEMS[-1]).mkdir()
    (cache / USER_ITEMS[-1] / "readme.txt").write_text("named like a digest, no SDK manifest")
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"outside the cache")
    (cache / "linked").symlink_to(outside, target_is_directory=True)


def user_tree(cache: Path) -> dict[str, str]:
    names = {*USER_ITEMS, "linked"}
    return {path: value for path, value in every_path(cache).items() if path.split("/")[0] in names}


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code != 0, f"a refused command must exit non-zero; stdout: {out}"
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, f"expected exactly one 'error:' line, got stderr: {err!r}"
    assert "Traceback" not in err + out, "no traceback without --debug"
    for fragment in fragments:
        assert fragment in lines[0], f"the error should mention {fragment!r}: {lines[0]!r}"


@pytest.mark.parametrize("how", ["--stale", "--all", "digest"])
def test_cache_rm_when_the_cache_folder_holds_user_files_removes_only_engine_entries(
    how: str, tmp_path: Path, cache: Path, edge_sdk: Run, tiny_models: dict[str, Path]
) -> None:
    # Given two built engines (one of them truncated, so stale), and user files, folders and a link beside them
    healthy = build(edge_sdk, cache, tiny_models["uint8_mean_classifier"])
    corrupt = build(edge_sdk, cache, tiny_models["float_classifier"])
    artifact = corrupt / "model.optimized.onnx"
    artifact.write_bytes(artifact.read_bytes()[:40])
    plant_user_items(cache, tmp_path / "outside")
    user_before = user_tree(cache)
    outside_before = every_path(tmp_path / "outside")

    # When entries are removed
    args = [corrupt.name[:12]] if how == "digest" else [how]
    code, out, err = edge_sdk("--cache-dir", cache, "cache", "rm", *args)

    # Then it works, the engines asked for are gone, and every user item is byte for byte as it was
    assert code == 0, f"cache rm {how} must succeed: {out}{err}"
    assert not corrupt.exists(), "the corrupt entry must be removed"
    assert healthy.exists() == (how != "--all"), "the healthy entry goes only with --all"
    assert user_tree(cache) == user_before, "cache rm must never delete what the SDK did not make"
    assert every_path(tmp_path / "outside") == outside_before, "cache rm must never follow a link out of the cache"
    assert "Traceback" not in out + err, "no traceback"
    # And with --stale/--all, each thing left alone is named on its own line
    if how != "digest":
        left = [line for line in out.splitlines() if line.startswith("not an engine entry, left alone: ")]
        named = {Path(line.split(": ", 1)[1].split(" (", 1)[0]).name for line in left}
        assert named == {*USER_ITEMS, "linked"}, f"every user item must be listed as left alone: {out}"


@pytest.mark.parametrize("digest", ["", "ab", "not-hex", "ambiguous"])
def test_cache_rm_when_the_digest_is_empty_short_or_ambiguous_refuses_in_one_line_and_keeps_the_cache(
    digest: str, tmp_path: Path, cache: Path, edge_sdk: Run
) -> None:
    # Given entries whose digests share a 4-character prefix, user files, and the lock file of a killed build
    engine_cache = EngineCache(cache)
    one, other = keys_sharing_a_prefix(KEY, 4)
    for key in (one, other, KEY):
        engine_cache.get_or_build(key, write_engine)
    plant_user_items(cache, tmp_path / "outside")
    (cache / f".{'d' * 32}.lock").touch()
    before = every_path(cache)
    argument = one.digest()[:4] if digest == "ambiguous" else digest

    # When it is asked to remove that digest
    code, out, err = edge_sdk("--cache-dir", cache, "cache", "rm", argument)

    # Then it refuses with one line, a non-zero exit, and the whole cache folder is byte-identical
    expected = "matches 2 cache entries" if digest == "ambiguous" else "expected a digest prefix"
    assert_one_line_error(code, out, err, expected)
    assert out == "" and len(err.strip().splitlines()) == 1, f"a refusal must print its one line only: {out}{err}"
    assert every_path(cache) == before, "a refused cache rm must leave every file of the cache as it was"


def test_cache_rm_when_a_digest_matches_nothing_refuses_in_one_line(cache: Path, edge_sdk: Run) -> None:
    # Given an empty cache
    cache.mkdir()

    # When a digest that is not there is removed
    code, out, err = edge_sdk("--cache-dir", cache, "cache", "rm", "abcdef12")

    # Then one line says so, with a non-zero exit
    assert_one_line_error(code, out, err, "no cache entry starts with 'abcdef12'")


def test_cache_ls_and_verify_when_the_folder_holds_user_files_list_them_and_do_not_fail(
    tmp_path: Path, cache: Path, edge_sdk: Run, tiny_models: dict[str, Path]
) -> None:
    # Given one healthy engine and user files beside it
    healthy = build(edge_sdk, cache, tiny_models["uint8_mean_classifier"])
    plant_user_items(cache, tmp_path / "outside")

    # When the cache is listed (as a table and as JSON) and verified
    ls_code, ls_out, ls_err = edge_sdk("--cache-dir", cache, "cache", "ls")
    json_code, json_out, json_err = edge_sdk("--cache-dir", cache, "cache", "ls", "--json")
    verify_code, verify_out, verify_err = edge_sdk("--cache-dir", cache, "cache", "verify")

    # Then all three work and name every user item as not an engine entry
    for name, code, out, err in (("ls", ls_code, ls_out, ls_err), ("verify", verify_code, verify_out, verify_err)):
        assert code == (0 if name == "ls" else 1), f"cache {name} must not crash: {out}{err}"
        assert "Traceback" not in out + err, f"cache {name} must not print a traceback"
        for item in ("notes.txt", "my-models", "foreign-manifest", "linked"):
            assert f"not an engine entry, left alone: {cache / item}" in out, f"cache {name} must list {item}"
    assert "1 ok, 1 bad" in verify_out, "the digest-named user folder counts as a bad entry, the engine as ok"
    rows = {row["digest"]: row for row in json.loads(json_out)}
    assert json_code == 0 and rows[healthy.name]["problem"] is None, "the JSON listing must show the healthy engine"
    assert rows[healthy.name]["removable"], "an engine the SDK built must be marked removable"
    assert not rows[USER_ITEMS[-1]]["removable"], "a digest-named folder without an SDK manifest must not be"
    assert f"not an engine entry, left alone: {cache / 'notes.txt'}" in json_err, "--json lists others on stderr"


def test_build_when_the_model_fails_the_onnx_checker_exits_in_one_line_and_leaves_the_cache_byte_identical(
    tmp_path: Path, cache: Path, edge_sdk: Run, tiny_models: dict[str, Path]
) -> None:
    # Given a cache with a good engine, and a model that decodes but is invalid (checked inside the build)
    build(edge_sdk, cache, tiny_models["uint8_mean_classifier"])
    before = every_path(cache)
    proto = onnx.load(str(tiny_models["float_classifier"]))
    proto.graph.node[1].op_type = "NoSuchOperator"
    broken = tmp_path / "invalid_op.onnx"
    broken.write_bytes(proto.SerializeToString())

    # When it is built
    code, out, err = edge_sdk("--cache-dir", cache, "build", broken, "--profile", "x86-cpu")

    # Then one line names the model, and the cache holds no new entry, staging folder or lock file
    assert_one_line_error(code, out, err, "is not a valid ONNX model", "invalid_op.onnx")
    assert every_path(cache) == before, "a failed build must leave the cache byte-identical (no .DIGEST.lock)"
