"""The fleet topic tree, identities, and the CA behind deploy/mosquitto/make_certs.py (no broker needed)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from edge_sdk.core.errors import ConfigError
from edge_sdk.mqtt import MqttSettings
from edge_sdk.mqtt.certificates import CertificateAuthority
from edge_sdk.mqtt.topics import DeviceTopics, check_identity
from tools.harness.broker import DEPLOY_MOSQUITTO, load_deploy_script


def common_name(cert_file: Path) -> str:
    certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return str(certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def issuer_of(cert_file: Path) -> bytes:
    return x509.load_pem_x509_certificate(cert_file.read_bytes()).issuer.public_bytes()


def test_device_topics_when_built_for_a_device_follow_the_documented_tree() -> None:
    # given
    topics = DeviceTopics("cam-001")

    # when
    layout = [topics.state, topics.cmd, topics.resp, topics.desired, topics.reported]
    leaves = [topics.results("demo", "cam0"), topics.telemetry("health"), topics.artifacts("model.onnx", "3")]

    # then
    assert layout == [f"edge/cam-001/{name}" for name in ("state", "cmd", "resp", "desired", "reported")]
    assert leaves == [
        "edge/cam-001/results/demo/cam0",
        "edge/cam-001/telemetry/health",
        "edge/cam-001/artifacts/model.onnx/3",
    ], "results, telemetry and artifacts take sub-levels"
    assert DeviceTopics("+").state == "edge/+/state", "'+' gives an operator's filter over all devices"
    readme = (DEPLOY_MOSQUITTO / "README.md").read_text()
    assert all(f"edge/<device>/{name}" in readme for name in ("state", "cmd", "resp", "desired", "reported")), (
        "the README documents the same tree"
    )


@pytest.mark.parametrize("name", ["", "a/b", "a+", "a#", " cam", "x" * 129, "tab\there"])
def test_check_identity_when_the_name_cannot_be_one_topic_level_refuses_it(name: str) -> None:
    # given / when / then
    with pytest.raises(ConfigError, match="expected"):
        check_identity(name)


def test_certificate_authority_when_reloaded_signs_new_devices_of_the_same_fleet(tmp_path: Path) -> None:
    # given a CA saved by an earlier run
    CertificateAuthority.create().save(tmp_path / "ca.pem", tmp_path / "ca.key")

    # when a later run loads it and issues a device certificate
    ca = CertificateAuthority.load(tmp_path / "ca.pem", tmp_path / "ca.key")
    issued = ca.issue_client("cam-007", tmp_path / "cam-007.pem", tmp_path / "cam-007.key")

    # then
    assert common_name(issued.cert_file) == "cam-007", "the device id is the certificate's common name"
    assert issuer_of(issued.cert_file) == ca.certificate.subject.public_bytes(), "signed by the same CA"
    assert stat.S_IMODE(issued.key_file.stat().st_mode) == 0o600, "private keys are readable by the owner only"
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600, "the CA key too"


def test_make_certs_when_run_twice_keeps_the_ca_and_adds_devices(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # given
    make_certs = load_deploy_script("make_certs")
    out = tmp_path / "fleet"
    assert (
        make_certs.main([str(out), "--broker-host", "mqtt.example.com", "--device", "cam-1", "--operator", "ops"]) == 0
    )
    first_ca = (out / "ca.pem").read_bytes()

    # when
    code = make_certs.main([str(out), "--device", "cam-2", "--worker", "worker-1"])
    printed = capsys.readouterr().out

    # then
    assert code == 0
    assert (out / "ca.pem").read_bytes() == first_ca, "the CA is reused, so earlier certificates stay valid"
    assert common_name(out / "devices" / "cam-2.pem") == "cam-2", "the new device gets its certificate"
    assert issuer_of(out / "devices" / "cam-2.pem") == issuer_of(out / "devices" / "cam-1.pem"), "same issuer"
    assert common_name(out / "operators" / "ops.pem") == "ops" and (out / "broker.pem").exists()
    assert common_name(out / "workers" / "worker-1.pem") == "worker-1", "an offload worker gets its own identity"
    assert stat.S_IMODE((out / "workers" / "worker-1.key").stat().st_mode) == 0o600
    assert "kept" in printed and "existing CA" in printed, "the run says what it reused"


@pytest.mark.parametrize(
    "args",
    [
        ["--device", "site/cam"],
        ["--device", "x", "--operator", "x"],
        ["--device", "x", "--worker", "x"],
        ["--operator", "x", "--worker", "x"],
        ["--worker", "w+"],
    ],
)
def test_make_certs_when_a_name_is_unusable_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str]
) -> None:
    # given
    make_certs = load_deploy_script("make_certs")

    # when
    code = make_certs.main([str(tmp_path / "fleet"), *args])

    # then
    assert code == 2, "a bad name is a usage error"
    assert "error: expected" in capsys.readouterr().err, "one line says what was expected"
    assert not (tmp_path / "fleet").exists(), "nothing is written"


def test_deploy_readme_when_its_device_settings_are_loaded_they_are_valid_mqtt_settings() -> None:
    # given the YAML block of the README's "Client settings on a device"
    readme = (DEPLOY_MOSQUITTO / "README.md").read_text()
    block = readme.split("## Client settings on a device", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]

    # when
    settings = MqttSettings.model_validate(yaml.safe_load(block)["broker"])

    # then
    device = DeviceTopics("cam-001")
    assert settings.will is not None and settings.will.topic == device.state, "the will marks the device offline"
    assert settings.spool is not None and not settings.clean_start, "persistent session and a disk spool"
