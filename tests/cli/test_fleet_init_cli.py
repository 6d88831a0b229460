"""`edge-sdk fleet init | manifest` as a user runs them: the files an example fleet needs, and a deployment
file's sizes, hashes and chunk counts computed from its artifacts (the whole walk on a real broker is
tests/cli/test_fleet_guide.py)."""

from __future__ import annotations

import hashlib
import re
import stat
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from edge_sdk.fleet.device.agent_config import load_agent_config
from edge_sdk.fleet.operator.broker_config import DEVICE_ACL, WORKER_ACL
from edge_sdk.fleet.operator.deployment_file import load_deployment
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.fleet.wire.signing import load_private_key, load_public_key
from edge_sdk.pipeline.config import load_pipeline
from tests.cli.conftest import Run
from tests.cli.test_fleet_keys_cli import assert_one_line_error
from tools.harness import onnx_models

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"


def test_fleet_init_when_the_folder_is_new_writes_a_fleet_whose_files_the_sdk_and_mosquitto_accept(
    edge_sdk: Run, tmp_path: Path
) -> None:
    # when an example fleet is written
    folder = tmp_path / "fleet"
    code, out, err = edge_sdk("fleet", "init", folder, "--port", "18883")

    # then it says what it wrote and what to run next
    assert code == 0, err
    assert "broker/mosquitto.conf" in out and "release/deployment.yaml" in out
    assert "mosquitto -c broker/mosquitto.conf" in out and "edge-sdk agent --config cam-001/agent.yaml" in out
    assert "edge-sdk fleet sign release/deployment.yaml" in out and "docs/fleet.md" in out
    # and every private key is readable by its owner only
    keys = sorted(folder.rglob("*.key"))
    assert {k.relative_to(folder).as_posix() for k in keys} == {
        "ca/ca.key", "broker/broker.key", "operator/operator.key", "operator/signing.key", "cam-001/cam-001.key",
        "worker-1/worker-1.key",
    }  # fmt: skip
    assert all(stat.S_IMODE(k.stat().st_mode) == 0o600 for k in keys)
    # and the agent's and the operator's settings load, pointing at files that exist, on the chosen port
    agent = load_agent_config(folder / "cam-001" / "agent.yaml")
    assert agent.device_id == "cam-001" and agent.broker.port == 18883 and agent.broker.tls is not None
    assert agent.broker.tls.cert_file is not None and agent.broker.tls.cert_file.is_file()
    operator = load_broker_file(folder / "operator" / "operator.yaml")
    assert operator.port == 18883 and operator.tls is not None and operator.tls.key_file is not None
    assert operator.tls.key_file.is_file()
    # and the offload worker's broker file loads, with its own certificate, on the chosen port
    worker = load_broker_file(folder / "worker-1" / "worker.yaml")
    assert worker.port == 18883 and worker.client_id == "worker-1" and worker.tls is not None
    assert worker.tls.cert_file is not None and worker.tls.cert_file.is_file()
    worker_cert = x509.load_pem_x509_certificate(worker.tls.cert_file.read_bytes())
    assert worker_cert.subject.rfc4514_string() == "CN=worker-1"
    assert "edge-sdk offload worker --broker worker-1/worker.yaml" in out
    # and the device trusts the operator's signing key
    signing = load_private_key(folder / "operator" / "signing.key").public_key()
    trusted = load_public_key(agent.trusted_keys_dir / "signing.pub")
    assert signing.public_bytes_raw() == trusted.public_bytes_raw()
    # and the certificates carry the names the broker and its ACL go by
    device_cert = x509.load_pem_x509_certificate((folder / "cam-001" / "cam-001.pem").read_bytes())
    assert device_cert.subject.rfc4514_string() == "CN=cam-001"
    broker_cert = x509.load_pem_x509_certificate((folder / "broker" / "broker.pem").read_bytes())
    names = broker_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    config = (folder / "broker" / "mosquitto.conf").read_text()
    assert "listener 18883 127.0.0.1" in config and "require_certificate true" in config
    assert f"acl_file {(folder / 'broker' / 'acl').resolve()}" in config
    # and the deployment names the demo model with its real size and hash, and signs as it is
    manifest = load_deployment(folder / "release" / "deployment.yaml")
    model = manifest.artifact(MODEL.name)
    assert model.kind == "model" and model.size == MODEL.stat().st_size
    assert model.sha256 == hashlib.sha256(MODEL.read_bytes()).hexdigest()
    assert manifest.target.labels == agent.labels == {"site": "demo"}
    # and its pipeline loads, with the model found beside it as it will be on the device
    pipeline = load_pipeline(folder / "release" / "people.yaml")
    assert Path(pipeline.model.path).resolve() == (folder / "release" / MODEL.name).resolve()


def test_fleet_init_acl_grants_devices_and_workers_what_the_shipped_acl_grants(edge_sdk: Run, tmp_path: Path) -> None:
    code, _, err = edge_sdk("fleet", "init", tmp_path / "fleet")
    assert code == 0, err
    shipped = [line for line in (REPO / "deploy" / "mosquitto" / "acl").read_text().splitlines() if line[:1].isalpha()]
    written = [line for line in (tmp_path / "fleet" / "broker" / "acl").read_text().splitlines() if line[:1].isalpha()]
    assert written == shipped
    assert [line for line in shipped if line.startswith("pattern")] == DEVICE_ACL.splitlines()
    worker = shipped.index("user worker-1")
    assert shipped[worker + 1 : worker + 4] == WORKER_ACL.format(worker="worker-1").splitlines()


def test_fleet_init_with_several_workers_writes_an_identity_and_acl_block_for_each(
    edge_sdk: Run, tmp_path: Path
) -> None:
    folder = tmp_path / "fleet"
    code, _, err = edge_sdk("fleet", "init", folder, "--worker", "gpu-a", "--worker", "gpu-b")
    assert code == 0, err
    acl = (folder / "broker" / "acl").read_text()
    for name in ("gpu-a", "gpu-b"):
        assert load_broker_file(folder / name / "worker.yaml").client_id == name
        assert stat.S_IMODE((folder / name / f"{name}.key").stat().st_mode) == 0o600
        assert f"user {name}\n{WORKER_ACL.format(worker=name)}" in acl
    assert not (folder / "worker-1").exists(), "--worker replaces the default worker"


@pytest.mark.parametrize(
    "args",
    [["--worker", "cam-001"], ["--worker", "operator"], ["--worker", "release"], ["--worker", "gpu/1"]],
)
def test_fleet_init_when_a_worker_name_clashes_or_is_not_a_topic_level_refuses(
    edge_sdk: Run, tmp_path: Path, args: list[str]
) -> None:
    code, _, err = edge_sdk("fleet", "init", tmp_path / "fleet", *args)
    assert_one_line_error(code, err, args[1])
    assert not (tmp_path / "fleet").exists()


def test_fleet_init_when_the_folder_holds_files_refuses_unless_force(edge_sdk: Run, tmp_path: Path) -> None:
    # given a folder with a file in it
    folder = tmp_path / "fleet"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")

    # when init is pointed at it, it refuses in one line and writes nothing
    code, _, err = edge_sdk("fleet", "init", folder)
    assert_one_line_error(code, err, str(folder), "not empty", "--force")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]

    # and with --force it writes the fleet beside the file
    code, _, err = edge_sdk("fleet", "init", folder, "--force")
    assert code == 0, err
    assert (folder / "broker" / "mosquitto.conf").is_file() and (folder / "notes.txt").read_text() == "mine"


def test_fleet_init_when_the_device_name_cannot_be_a_topic_level_refuses(edge_sdk: Run, tmp_path: Path) -> None:
    code, _, err = edge_sdk("fleet", "init", tmp_path / "fleet", "--device", "cams/1")
    assert_one_line_error(code, err, "cams/1")
    assert not (tmp_path / "fleet").exists()


# ---------------------------------------------------------------- fleet manifest


def write_deployment(folder: Path, artifacts: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "deployment.yaml"
    path.write_text(f"deployment_id: lobby\nversion: 3\nartifacts:\n{artifacts}", encoding="utf-8")
    return path


def test_fleet_manifest_when_artifacts_are_named_fills_in_size_hash_and_chunks_that_sign_accepts(
    edge_sdk: Run, tmp_path: Path
) -> None:
    # given a deployment naming two files by name only, and the files beside it
    release = tmp_path / "release"
    path = write_deployment(release, "  - name: detector.onnx\n  - name: labels.txt\n    source: {chunk_size: 1000}\n")
    (release / "detector.onnx").write_bytes(b"m" * 2500)
    (release / "labels.txt").write_bytes(b"person\n")

    # when the manifest is computed
    code, out, err = edge_sdk("fleet", "manifest", path, "--chunk-size", "1024")

    # then each artifact has its real size, SHA-256, kind and chunk count, and the times are filled in
    assert code == 0, err
    assert "detector.onnx (model): 2500 bytes" in out and "3 chunk(s)" in out
    assert "updated" in out and "version 3, 2 artifact(s)" in out
    data = yaml.safe_load(path.read_text())
    model, labels = data["artifacts"]
    assert model["size"] == 2500 and model["sha256"] == hashlib.sha256(b"m" * 2500).hexdigest()
    assert model["kind"] == "model" and model["source"] == {"type": "inline", "chunk_size": 1024, "chunk_count": 3}
    assert labels["kind"] == "file" and labels["size"] == 7 and labels["source"]["chunk_count"] == 1
    assert datetime.fromisoformat(data["expires_at"]) > datetime.fromisoformat(data["created_at"])
    # and the result signs as it is
    assert load_deployment(path).version == 3

    # when the model changes and the version is raised, the facts and the version follow
    (release / "detector.onnx").write_bytes(b"n" * 5000)
    code, out, err = edge_sdk("fleet", "manifest", path, "--version", "4")
    assert code == 0, err
    data = yaml.safe_load(path.read_text())
    assert data["version"] == 4 and data["artifacts"][0]["size"] == 5000
    assert data["artifacts"][0]["source"]["chunk_count"] == 5  # the chunk size written the first time is kept


def test_fleet_manifest_when_files_are_missing_names_each_and_leaves_the_file_alone(
    edge_sdk: Run, tmp_path: Path
) -> None:
    # given a deployment naming two files that are not there and one entry without a name
    path = write_deployment(tmp_path, "  - name: detector.onnx\n  - kind: model\n  - name: people.yaml\n")
    before = path.read_text()

    # when the manifest is computed
    code, _, err = edge_sdk("fleet", "manifest", path)

    # then all three problems are listed with their lines, and the file is unchanged
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == f"error: {path}: 3 problems:", err
    assert f"{path}:4: artifacts.0: no file {tmp_path / 'detector.onnx'}" in lines[1]
    assert f"{path}:5: artifacts.1: expected a mapping with the artifact's file name under 'name'" in lines[2]
    assert f"{path}:6: artifacts.2: no file {tmp_path / 'people.yaml'}" in lines[3]
    assert path.read_text() == before


def test_fleet_manifest_when_the_rest_of_the_file_is_wrong_says_so_with_lines(edge_sdk: Run, tmp_path: Path) -> None:
    path = write_deployment(tmp_path, "  - name: model.onnx\n")
    path.write_text(path.read_text().replace("version: 3", "version: three"))
    (tmp_path / "model.onnx").write_bytes(b"x")
    code, _, err = edge_sdk("fleet", "manifest", path)
    assert_one_line_error(code, err, f"{path}:2: key 'version'", "'three'")


def test_fleet_deploy_when_an_artifact_is_missing_says_which_before_it_contacts_any_device(
    edge_sdk: Run, tmp_path: Path
) -> None:
    # given the example's version 1, signed, whose model file was then removed
    folder = tmp_path / "fleet"
    assert edge_sdk("fleet", "init", folder)[0] == 0
    release = folder / "release"
    signed = release / "v1.signed"
    code, _, err = edge_sdk(
        "fleet", "sign", release / "deployment.yaml", "--key", folder / "operator" / "signing.key", "--out", signed
    )
    assert code == 0, err
    (release / MODEL.name).unlink()

    # when it is deployed (no broker runs: the check comes first)
    code, _, err = edge_sdk(
        "fleet", "deploy", signed, "--broker", folder / "operator" / "operator.yaml", "--state", tmp_path / "r.db"
    )

    # then the error names the artifact and where it was looked for
    assert_one_line_error(code, err, str(signed), f"artifact '{MODEL.name}'", f"no file {release / MODEL.name}")
    assert not (tmp_path / "r.db").exists()


def test_the_sign_error_docs_fleet_md_shows_is_what_sign_prints(
    edge_sdk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the guide's example: the example deployment with version 0 and a model named '../x.onnx'
    shown = re.search(r"```\n(error: release/deployment.yaml: .*?)```", (REPO / "docs" / "fleet.md").read_text(), re.S)
    assert shown is not None, "docs/fleet.md shows what a refused deployment file looks like"
    folder = tmp_path / "fleet-demo"
    assert edge_sdk("fleet", "init", folder)[0] == 0
    deployment = folder / "release" / "deployment.yaml"
    text = (
        deployment.read_text()
        .replace("version: 1\n", "version: 0\n")
        .replace(f"- name: {MODEL.name}", "- name: ../x.onnx")
    )
    deployment.write_text(text)

    # when it is signed from the fleet's folder, the guide's lines are what the user sees
    monkeypatch.chdir(folder)
    code, _, err = edge_sdk(
        "fleet", "sign", "release/deployment.yaml", "--key", "operator/signing.key", "--out", "v.signed"
    )
    assert code == 2
    assert err.strip() == shown.group(1).strip()


def test_fleet_init_with_a_yolo_model_writes_the_pipeline_that_reads_it(edge_sdk: Run, tmp_path: Path) -> None:
    # given a YOLOv8-shaped detector with its class names in its metadata, as Ultralytics exports them
    model = onnx_models.colour_yolov8(tmp_path / "colour_yolov8.onnx")
    # when the example fleet is written for it
    code, _out, err = edge_sdk("fleet", "init", tmp_path / "fleet", "--model", model)
    # then its pipeline feeds and reads that model, not the shipped SSD's way
    assert code == 0, err
    pipeline = load_pipeline(tmp_path / "fleet" / "release" / "people.yaml")
    assert pipeline.model.path == tmp_path / "fleet" / "release" / "colour_yolov8.onnx", "the release's own copy"
    assert pipeline.postprocess.type == "yolo" and pipeline.postprocess.labels == ["red", "green", "blue"]
    assert pipeline.preprocess.layout == "nchw" and pipeline.preprocess.dtype == "float32"


def test_fleet_init_with_a_model_it_cannot_read_says_so_in_one_line(edge_sdk: Run, tmp_path: Path) -> None:
    model = onnx_models.float_classifier(tmp_path / "features.onnx", classes=1)
    code, _out, err = edge_sdk("fleet", "init", tmp_path / "fleet", "--model", model)
    assert code == 2 and "cannot tell how to read this model's outputs" in err and len(err.strip().splitlines()) == 1, (
        err
    )
    assert not (tmp_path / "fleet").exists(), "nothing is written for a model the fleet could not run"
