"""How to reach a broker: address, session, credentials, TLS, last will, reconnect policy.

Pure configuration (frozen pydantic models, usable inside pipeline and fleet YAML). Nothing here
reads files or the environment: secrets are *named* here and read at connect time
(see `edge_sdk.mqtt.credentials` and `edge_sdk.mqtt.tls`).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MqttProtocol(str, Enum):
    V5 = "v5"
    V311 = "v311"


class TlsSettings(BaseModel):
    """TLS towards the broker. The server certificate is always verified; only the host name check can be relaxed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_file: Path | None = Field(
        None, description="PEM file of the CA(s) that signed the broker's certificate; the system CAs when null."
    )
    cert_file: Path | None = Field(None, description="PEM client certificate, for brokers that require one.")
    key_file: Path | None = Field(None, description="PEM private key of the client certificate (unencrypted).")
    verify_hostname: bool = Field(True, description="Check that the broker's certificate names the host connected to.")

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(
                f"expected both tls.cert_file and tls.key_file or neither, got cert_file={self.cert_file} "
                f"and key_file={self.key_file}"
            )
        return self


class Will(BaseModel):
    """The message the broker publishes for this client when it vanishes without a clean disconnect."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1, description="Topic of the last-will message (no wildcards).")
    payload: str = Field("", description="Payload of the last-will message, e.g. 'offline'.")
    qos: int = Field(1, ge=0, le=2, description="QoS of the last-will message.")
    retain: bool = Field(True, description="Whether the broker retains the last-will message.")

    @model_validator(mode="after")
    def _no_wildcards(self) -> Will:
        if "+" in self.topic or "#" in self.topic:
            raise ValueError(f"expected a will topic without wildcards, got {self.topic!r}")
        return self


class ReconnectPolicy(BaseModel):
    """Exponential back-off between connection attempts once a connection is lost (paho doubles the delay)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_delay_s: float = Field(1.0, gt=0, description="First wait after a lost connection, in seconds.")
    max_delay_s: float = Field(30.0, gt=0, description="Longest wait between attempts, in seconds.")

    @model_validator(mode="after")
    def _min_not_above_max(self) -> ReconnectPolicy:
        if self.min_delay_s > self.max_delay_s:
            raise ValueError(
                f"expected reconnect.min_delay_s <= max_delay_s, got {self.min_delay_s} > {self.max_delay_s}"
            )
        return self


class SpoolSettings(BaseModel):
    """A disk spool for messages published while the broker is unreachable, replayed in order on reconnect."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(
        description="SQLite file of the spool (its folder is created); one client per file. "
        "Keep it on persistent storage, not /tmp, so spooled messages survive a restart."
    )
    max_messages: int = Field(
        100_000, ge=1, description="Most messages kept; beyond it the oldest are evicted (and counted)."
    )
    max_bytes: int = Field(
        64 * 2**20,
        ge=1024,
        description="Most bytes kept (topic + payload of every message); beyond it the oldest are evicted "
        "(and counted). The file on disk is somewhat larger.",
    )
    durable: bool = Field(
        False,
        description="Flush every spooled message to the storage device (survives a power cut, slower); "
        "otherwise spooled messages survive a crash of the process and a power cut may lose the newest.",
    )


class MqttSettings(BaseModel):
    """One broker connection. Passwords are never written here: name an environment variable or a file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field("localhost", min_length=1, description="Broker host name or IP address.")
    port: int | None = Field(None, ge=1, le=65535, description="Broker port; 1883, or 8883 with tls, when null.")
    client_id: str = Field(
        "", description="MQTT client id; empty lets the broker/paho pick one (not allowed with a persistent session)."
    )
    protocol: MqttProtocol = Field(MqttProtocol.V5, description="MQTT protocol version: v5 or v311.")
    keepalive_s: int = Field(60, ge=5, le=65535, description="Seconds between keep-alive pings.")
    clean_start: bool = Field(
        True,
        description="Start a fresh session on every connect; false keeps subscriptions and queued QoS>0 messages "
        "on the broker while this client is away (a persistent session).",
    )
    session_expiry_s: int = Field(
        3600, ge=0, description="MQTT v5 persistent sessions: how long the broker keeps the session after a disconnect."
    )
    username: str | None = Field(None, description="User name for the broker's password check.")
    password_env: str | None = Field(None, description="Name of the environment variable holding the password.")
    password_file: Path | None = Field(
        None, description="File holding the password (first line, surrounding whitespace ignored)."
    )
    tls: TlsSettings | None = Field(None, description="Connect over TLS with these settings; plain TCP when null.")
    will: Will | None = Field(None, description="Last-will message the broker publishes if this client vanishes.")
    reconnect: ReconnectPolicy = Field(
        default_factory=ReconnectPolicy, description="Back-off between attempts after the connection is lost."
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="How long connect() waits for the TCP/TLS handshake and the broker's CONNACK."
    )
    publish_timeout_s: float = Field(
        10.0, gt=0, description="How long publish(wait=True) and subscribe() wait for the broker's acknowledgement."
    )
    spool: SpoolSettings | None = Field(
        None,
        description="Keep messages published while the broker is unreachable in this disk spool and replay them "
        "in order on reconnect; without it only QoS>0 messages wait, in memory (max_queued).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> MqttSettings:
        if self.password_env is not None and self.password_file is not None:
            raise ValueError("expected at most one of password_env and password_file, got both")
        if (self.password_env is not None or self.password_file is not None) and self.username is None:
            raise ValueError("expected a username with password_env/password_file, got none")
        if not self.clean_start and not self.client_id:
            raise ValueError("expected a client_id with clean_start: false (a persistent session), got none")
        return self

    @property
    def effective_port(self) -> int:
        if self.port is not None:
            return self.port
        return 8883 if self.tls is not None else 1883

    @property
    def address(self) -> str:
        return f"{self.host}:{self.effective_port}"
