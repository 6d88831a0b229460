"""`edge-sdk fleet keygen | sign`, run through the CLI's `main` as a user runs it (output, exit code)."""

from __future__ import annotations

import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

from edge_sdk.fleet.wire.manifest import DeviceIdentity
from edge_sdk.fleet.wire.signing import load_public_key, verify_manifest
from edge_sdk.fleet.wire.versions import VersionState
from tests.cli.conftest import Run

ARTIFACT_SHA = "0" * 64


def write_manifest_yaml(path: Path, name: str = "detector.onnx", expires_in: timedelta = timedelta(days=1)) -> Path:
    now = datetime.now(timezone.utc)
    created = now - timedelta(hours=1)
    path.write_text(
        f"""\
deployment_id: lobby-cameras-7
version: 7
created_at: {created.isoformat()}
expires_at: {(now + expires_in).isoformat()}
target:
  profiles: [x86-cpu]
artifacts:
  - name: {name}
    kind: model
    size: 2048
    sha256: "{ARTIFACT_SHA}"
    source: {{type: inline, chunk_size: 1024, chunk_count: 2}}
""",
        encoding="utf-8",
    )
    return path


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code != 0, "a refused input must exit non-zero"
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, f"expected exactly one 'error:' line, got {err!r}"
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], f"the error should mention {fragment!r}: {lines[0]!r}"


def test_fleet_keygen_when_run_writes_a_key_pair_and_prints_the_key_id(edge_sdk: Run, tmp_path: Path) -> None:
    code, out, err = edge_sdk("fleet", "keygen", "--out", tmp_path / "keys")
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "keys" / "fleet-signing.key").stat().st_mode) == 0o600
    assert (tmp_path / "keys" / "fleet-signing.pub").is_file()
    assert "key id:" in out


def test_fleet_keygen_when_the_key_exists_refuses_in_one_line(edge_sdk: Run, tmp_path: Path) -> None:
    edge_sdk("fleet", "keygen", "--out", tmp_path)
    code, _, err = edge_sdk("fleet", "keygen", "--out", tmp_path)
    assert_one_line_error(code, err, "fleet-signing.key", "already exists")


def test_fleet_sign_when_given_a_manifest_writes_one_a_device_accepts(edge_sdk: Run, tmp_path: Path) -> None:
    # given
    edge_sdk("fleet", "keygen", "--out", tmp_path / "keys")
    manifest = write_manifest_yaml(tmp_path / "deploy.yaml")
    # when
    code, out, err = edge_sdk(
        "fleet", "sign", manifest, "--key", tmp_path / "keys" / "fleet-signing.key", "--out", tmp_path / "deploy.signed"
    )
    # then
    assert code == 0, err
    assert "signed deployment 'lobby-cameras-7' version 7" in out
    accepted = verify_manifest(
        (tmp_path / "deploy.signed").read_bytes(),
        [load_public_key(tmp_path / "keys" / "fleet-signing.pub")],
        DeviceIdentity("box-1", "x86-cpu"),
        datetime.now(timezone.utc),
        VersionState(current=6),
    )
    assert accepted.version == 7 and accepted.artifacts[0].sha256 == ARTIFACT_SHA


def test_fleet_sign_when_an_artifact_name_escapes_names_the_file_line_and_key(edge_sdk: Run, tmp_path: Path) -> None:
    edge_sdk("fleet", "keygen", "--out", tmp_path / "keys")
    manifest = write_manifest_yaml(tmp_path / "deploy.yaml", name="../../etc/cron.d/x")
    code, _, err = edge_sdk(
        "fleet", "sign", manifest, "--key", tmp_path / "keys" / "fleet-signing.key", "--out", tmp_path / "out"
    )
    assert_one_line_error(code, err, "deploy.yaml:8", "artifacts.0.name", "path separators")
    assert not (tmp_path / "out").exists()


def test_fleet_sign_when_the_manifest_has_already_expired_refuses(edge_sdk: Run, tmp_path: Path) -> None:
    edge_sdk("fleet", "keygen", "--out", tmp_path / "keys")
    manifest = write_manifest_yaml(tmp_path / "deploy.yaml", expires_in=timedelta(seconds=-5))
    code, _, err = edge_sdk(
        "fleet", "sign", manifest, "--key", tmp_path / "keys" / "fleet-signing.key", "--out", tmp_path / "out"
    )
    assert_one_line_error(code, err, "expires_at", "expected a time in the future")


def test_fleet_sign_when_the_key_file_is_missing_refuses_in_one_line(edge_sdk: Run, tmp_path: Path) -> None:
    manifest = write_manifest_yaml(tmp_path / "deploy.yaml")
    code, _, err = edge_sdk("fleet", "sign", manifest, "--key", tmp_path / "nope.key", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "nope.key", "key file not found")


def test_fleet_sign_when_the_file_has_several_problems_lists_each_with_its_line(edge_sdk: Run, tmp_path: Path) -> None:
    # given a deployment file with four problems on lines 2, 3, 6 and 8
    key = tmp_path / "keys" / "fleet-signing.key"
    edge_sdk("fleet", "keygen", "--out", tmp_path / "keys")
    (tmp_path / "deploy.yaml").write_text(
        """\
deployment_id: lobby/7
version: 0
created_at: 2026-11-01T00:00:00+00:00
expires_at: 2027-11-01T00:00:00+00:00
artifacts:
  - name: ../detector.onnx
    kind: model
    size: many
    sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    source: {type: inline, chunk_size: 1024, chunk_count: 2}
""",
        encoding="utf-8",
    )

    # when it is signed
    code, _, err = edge_sdk("fleet", "sign", tmp_path / "deploy.yaml", "--key", key, "--out", tmp_path / "v7.signed")

    # then all four are listed under one error line, each with its line and key, and nothing is written
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == f"error: {tmp_path / 'deploy.yaml'}: 4 problems:", err
    problems = [line.strip() for line in lines[1:]]
    where = str(tmp_path / "deploy.yaml")
    assert [p.split(": key ")[0] for p in problems] == [f"{where}:{n}" for n in (1, 2, 6, 8)], err
    assert "'deployment_id'" in problems[0] and "'lobby/7'" in problems[0]
    assert "'version'" in problems[1] and "greater than or equal to 1, got 0" in problems[1]
    assert "'artifacts.0.name'" in problems[2] and "path separators" in problems[2]
    assert "'artifacts.0.size'" in problems[3] and "'many'" in problems[3]
    assert "more problem" not in err
    assert not (tmp_path / "v7.signed").exists()


def test_fleet_sign_when_an_artifact_beside_the_file_changed_since_the_manifest_says_so(
    edge_sdk: Run, tmp_path: Path
) -> None:
    # given a manifest whose artifact file beside it is not what the manifest says
    edge_sdk("fleet", "keygen", "--out", tmp_path / "keys")
    manifest = write_manifest_yaml(tmp_path / "deploy.yaml")
    (tmp_path / "detector.onnx").write_bytes(b"a newer model")

    # when it is signed
    code, _, err = edge_sdk(
        "fleet", "sign", manifest, "--key", tmp_path / "keys" / "fleet-signing.key", "--out", tmp_path / "v.signed"
    )

    # then it is refused with the file's real size and the command that fixes it
    assert_one_line_error(
        code, err, "deploy.yaml:8", "artifact 'detector.onnx'", "has 13 bytes", "edge-sdk fleet manifest"
    )
    assert not (tmp_path / "v.signed").exists()
