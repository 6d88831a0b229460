"""Broker settings files (`--broker operator.yaml`, the `broker:` of agent.yaml): relative paths start from the
file's folder, whatever the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet import load_broker_file
from edge_sdk.fleet.device.agent_config import load_agent_config

BROKER = {
    "host": "mqtt.example.com",
    "username": "operator",
    "password_file": "secrets/password",
    "tls": {"ca_file": "pki/ca.pem", "cert_file": "pki/operator.pem", "key_file": "/etc/edge/operator.key"},
    "spool": {"path": "spool/operator.sqlite"},
}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory that is not the config folder (`tmp_path/work`)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_load_broker_file_when_run_from_another_folder_then_relative_paths_start_from_the_file(
    tmp_path: Path, elsewhere: Path
) -> None:
    # given an operator broker file in a sub-folder, with relative certificate, password and spool paths
    config = tmp_path / "fleet" / "conf"
    config.mkdir(parents=True)
    config = config.resolve()
    (config / "operator.yaml").write_text(yaml.safe_dump(BROKER), encoding="utf-8")

    # when it is loaded by a relative path from another working directory
    settings = load_broker_file(Path("../fleet/conf/operator.yaml"))

    # then every relative path starts from the file's folder, and absolute ones are kept
    assert settings.tls is not None
    assert settings.tls.ca_file == config / "pki" / "ca.pem"
    assert settings.tls.cert_file == config / "pki" / "operator.pem"
    assert settings.tls.key_file == Path("/etc/edge/operator.key"), "an absolute path is left as written"
    assert settings.password_file == config / "secrets" / "password"
    assert settings.spool is not None and settings.spool.path == config / "spool" / "operator.sqlite"
    assert settings.host == "mqtt.example.com" and settings.username == "operator"


def test_load_broker_file_when_beside_an_agent_yaml_then_both_resolve_the_broker_alike(
    tmp_path: Path, elsewhere: Path
) -> None:
    # given the same broker settings as an operator file and as the broker section of an agent.yaml
    config = tmp_path / "conf"
    config.mkdir()
    (config / "operator.yaml").write_text(yaml.safe_dump(BROKER), encoding="utf-8")
    agent_yaml = {"device_id": "cam-1", "broker": BROKER, "store_dir": "store"}
    (config / "agent.yaml").write_text(yaml.safe_dump(agent_yaml), encoding="utf-8")

    # when both are loaded from another working directory, then they agree
    assert load_broker_file(config / "operator.yaml") == load_agent_config(config / "agent.yaml").broker


def test_load_broker_file_when_missing_then_one_line_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_broker_file(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(raised.value) and "\n" not in str(raised.value)
