"""MqttSettings validation, and reading the secrets and certificates it names (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from edge_sdk.core.errors import ConfigError
from edge_sdk.mqtt import MqttClient, MqttSettings, ReconnectPolicy, TlsSettings
from edge_sdk.mqtt.credentials import read_password
from edge_sdk.mqtt.tls import ssl_context_from


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"username": "u", "password_env": "A", "password_file": "/p"},
            "at most one of password_env and password_file",
        ),
        ({"password_env": "A"}, "expected a username"),
        ({"clean_start": False}, "expected a client_id"),
        ({"reconnect": {"min_delay_s": 5, "max_delay_s": 1}}, "min_delay_s <= max_delay_s"),
        ({"tls": {"cert_file": "/c.pem"}}, "both tls.cert_file and tls.key_file"),
        ({"will": {"topic": "a/#"}}, "without wildcards"),
        ({"password": "inline"}, "Extra inputs are not permitted"),
    ],
)
def test_mqtt_settings_when_inconsistent_are_rejected_saying_what_was_expected(
    values: dict[str, object], expected: str
) -> None:
    # given / when
    with pytest.raises(ValidationError) as caught:
        MqttSettings.model_validate(values)

    # then
    assert expected in str(caught.value), f"the error explains the problem ({expected})"


def test_mqtt_settings_when_port_is_not_given_uses_1883_or_8883_with_tls() -> None:
    # given / when / then
    assert MqttSettings(host="b").address == "b:1883", "plain MQTT defaults to 1883"
    assert MqttSettings(host="b", tls=TlsSettings()).address == "b:8883", "MQTT over TLS defaults to 8883"
    assert MqttSettings().reconnect == ReconnectPolicy(), "a default reconnect policy is always there"


def test_read_password_when_the_environment_variable_is_unset_raises_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given
    monkeypatch.delenv("EDGE_TEST_UNSET_PASSWORD", raising=False)
    settings = MqttSettings(username="u", password_env="EDGE_TEST_UNSET_PASSWORD")

    # when
    with pytest.raises(ConfigError) as caught:
        read_password(settings)

    # then
    assert "EDGE_TEST_UNSET_PASSWORD" in str(caught.value), "the error names the variable to set"


def test_read_password_when_the_file_is_missing_raises_config_error_naming_it(tmp_path: Path) -> None:
    # given
    missing = tmp_path / "nope"

    # when
    with pytest.raises(ConfigError) as caught:
        read_password(MqttSettings(username="u", password_file=missing))

    # then
    assert str(missing) in str(caught.value), "the error names the file"


def test_read_password_when_the_file_ends_with_a_newline_returns_the_first_line_only(tmp_path: Path) -> None:
    # given
    path = tmp_path / "password"
    path.write_text("  s3cret \n")

    # when / then
    assert read_password(MqttSettings(username="u", password_file=path)) == "s3cret", "whitespace is not the password"


def test_ssl_context_from_when_the_ca_file_is_missing_raises_config_error_naming_it(tmp_path: Path) -> None:
    # given
    tls = TlsSettings(ca_file=tmp_path / "ca.pem")

    # when
    with pytest.raises(ConfigError) as caught:
        ssl_context_from(tls)

    # then
    assert str(tmp_path / "ca.pem") in str(caught.value), "the error names the CA file"


def test_mqtt_client_when_secrets_cannot_be_read_connect_raises_config_error_before_any_network_io(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a host that does not resolve: reaching the network would give a BrokerError instead
    monkeypatch.delenv("EDGE_TEST_UNSET_PASSWORD", raising=False)
    client = MqttClient(MqttSettings(host="broker.invalid", username="u", password_env="EDGE_TEST_UNSET_PASSWORD"))

    # when / then
    with pytest.raises(ConfigError, match="EDGE_TEST_UNSET_PASSWORD"):
        client.connect()


def test_mqtt_settings_when_no_spool_is_configured_have_none_and_a_spool_entry_validates() -> None:
    # given / when
    default = MqttSettings()
    configured = MqttSettings.model_validate({"spool": {"path": "/var/lib/edge-sdk/spool.db", "max_messages": 500}})

    # then
    assert default.spool is None, "the spool is off unless configured"
    assert configured.spool is not None and configured.spool.max_messages == 500, "limits come from the file"
    assert configured.spool.max_bytes == 64 * 2**20 and not configured.spool.durable, "with sensible defaults"
    with pytest.raises(ValidationError, match="max_bytes"):
        MqttSettings.model_validate({"spool": {"path": "s.db", "max_bytes": 10}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        MqttSettings.model_validate({"spool": {"path": "s.db", "size": 10}})
