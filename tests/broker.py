"""A private Mosquitto for tests: generated config, free 127.0.0.1 port, optional TLS, passwords, ACL, persistence.

    with BrokerFactory(tmp_path) as start_broker:
        broker = start_broker(tls=True, passwords={"alice": "secret"}, acl="user alice\\ntopic readwrite a/#\\n")
        settings = broker.settings(username="alice", password_env="ALICE_PASSWORD")
        broker.restart()  # same port: clients reconnect

Every broker a factory started is stopped when the factory closes. Certificates are a throwaway CA
with a server certificate for localhost/127.0.0.1 and a client certificate, made with `cryptography`.
The system Mosquitto (port 1883) is never touched.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edge_sdk.mqtt import Message, MqttSettings, ReconnectPolicy, TlsSettings

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


def find_mosquitto() -> str | None:
    return shutil.which("mosquitto") or next(
        (path for path in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(path, os.X_OK)), None
    )


def unique_topic_prefix(test_name: str) -> str:
    """A topic prefix no other test (or earlier run) uses."""
    return f"edge-sdk-test/{re.sub(r'[^A-Za-z0-9_-]', '_', test_name)}/{uuid.uuid4().hex[:8]}"


# --- certificates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(folder: Path, client_name: str = "edge-client") -> Certificates:
    """A CA, a server certificate for localhost and 127.0.0.1, and a client certificate, all PEM."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge-sdk test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common_name: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    server = leaf(
        "localhost",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client = leaf(client_name, ExtendedKeyUsageOID.CLIENT_AUTH, [])
    certificates = Certificates(
        ca_file=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
    )
    certificates.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    certificates.server_cert.write_bytes(server[0])
    certificates.server_key.write_bytes(server[1])
    certificates.client_cert.write_bytes(client[0])
    certificates.client_key.write_bytes(client[1])
    for key_file in (certificates.server_key, certificates.client_key):
        key_file.chmod(0o600)
    return certificates


# --- password file ---------------------------------------------------------------------------------


def write_password_file(path: Path, passwords: Mapping[str, str]) -> None:
    """Mosquitto's hashed password file, through mosquitto_passwd when it is installed."""
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        path.write_text("".join(f"{user}:{_mosquitto_hash(password)}\n" for user, password in passwords.items()))
    else:
        path.write_text("")
        for user, password in passwords.items():
            subprocess.run([tool, "-b", str(path), user, password], check=True, capture_output=True, timeout=10)
    path.chmod(0o600)


def _mosquitto_hash(password: str, iterations: int = 101) -> str:
    """Mosquitto 2.0's "$7$" format: PBKDF2-HMAC-SHA512, 12-byte salt, 64-byte hash, base64."""
    salt = secrets.token_bytes(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, dklen=64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


# --- the broker ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MosquittoBroker:
    """One private Mosquitto process; start/stop/restart keep the port, folder, certificates and files."""

    host = "127.0.0.1"

    def __init__(
        self,
        folder: Path,
        *,
        tls: bool = False,
        require_client_cert: bool = True,
        passwords: Mapping[str, str] | None = None,
        acl: str | None = None,
        persistence: bool = False,
        extra_config: str = "",
        binary: str | None = None,
    ):
        binary = binary or find_mosquitto()
        if binary is None:
            raise FileNotFoundError("the mosquitto binary is not installed (apt-get install mosquitto)")
        self.binary = binary
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls = tls
        self.certificates = make_certificates(folder / "certs") if tls else None
        self.passwords = dict(passwords or {})
        self.log_file = folder / "mosquitto.log"
        self.config_file = folder / "mosquitto.conf"
        self._process: subprocess.Popen[bytes] | None = None
        self.config_file.write_text(
            self._config(require_client_cert=require_client_cert, acl=acl, persistence=persistence) + extra_config
        )

    def _config(self, *, require_client_cert: bool, acl: str | None, persistence: bool) -> str:
        lines = ["per_listener_settings false", f"allow_anonymous {'false' if self.passwords else 'true'}"]
        if os.geteuid() == 0:
            lines.append("user root")  # otherwise Mosquitto drops to 'mosquitto', who cannot read the test folder
        if self.passwords:
            password_file = self.folder / "passwords"
            write_password_file(password_file, self.passwords)
            lines.append(f"password_file {password_file}")
        if acl is not None:
            acl_file = self.folder / "acl"
            acl_file.write_text(acl)
            lines.append(f"acl_file {acl_file}")
        if persistence:
            data = self.folder / "data"
            data.mkdir(exist_ok=True)
            lines += ["persistence true", f"persistence_location {data}/", "autosave_interval 1"]
        else:
            lines.append("persistence false")
        lines += [
            f"log_dest file {self.log_file}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            f"listener {self.port} {self.host}",
        ]
        if self.certificates is not None:
            lines += [
                f"cafile {self.certificates.ca_file}",
                f"certfile {self.certificates.server_cert}",
                f"keyfile {self.certificates.server_key}",
                f"require_certificate {'true' if require_client_cert else 'false'}",
            ]
        return "\n".join(lines) + "\n"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> MosquittoBroker:
        if self.running:
            return self
        output = (self.folder / "mosquitto.out").open("ab")
        self._process = subprocess.Popen(
            [self.binary, "-c", str(self.config_file)],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        output.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self._process.returncode} on start:\n{self.logs()}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"mosquitto did not accept connections on {self.port} within {START_TIMEOUT_S} s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)

    def restart(self) -> MosquittoBroker:
        self.stop()
        return self.start()

    def logs(self) -> str:
        parts = [path.read_text(errors="replace") for path in (self.folder / "mosquitto.out", self.log_file)]
        return "".join(part for part in parts if part)

    def settings(self, *, client_cert: bool = True, **overrides: Any) -> MqttSettings:
        """Client settings for this broker: quick reconnects and short timeouts so tests stay bounded."""
        values: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "reconnect": ReconnectPolicy(min_delay_s=0.1, max_delay_s=0.5),
            "connect_timeout_s": 5.0,
            "publish_timeout_s": 5.0,
        }
        if self.certificates is not None:
            certs = self.certificates
            values["tls"] = TlsSettings(
                ca_file=certs.ca_file,
                cert_file=certs.client_cert if client_cert else None,
                key_file=certs.client_key if client_cert else None,
            )
        values.update(overrides)
        return MqttSettings(**values)

    def __enter__(self) -> MosquittoBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class BrokerFactory:
    """Starts brokers in numbered sub-folders of `folder`; stops them all on close."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.brokers: list[MosquittoBroker] = []

    def __call__(self, **options: Any) -> MosquittoBroker:
        broker = MosquittoBroker(self.folder / f"broker-{len(self.brokers)}", **options)
        self.brokers.append(broker)
        return broker.start()

    def close(self) -> None:
        for broker in self.brokers:
            broker.stop()

    def __enter__(self) -> BrokerFactory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


StartBroker = Callable[..., MosquittoBroker]


def broker_factory_fixture(folder: Path) -> Iterator[BrokerFactory]:
    """Body of a `start_broker` fixture: skips without the binary, stops every broker afterwards."""
    if find_mosquitto() is None:
        pytest.skip("needs the mosquitto binary (apt-get install mosquitto)")
    with BrokerFactory(folder) as factory:
        yield factory


class Inbox:
    """A subscription handler that keeps what arrives and lets the test wait for it (bounded)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        with self._condition:
            self.messages.append(message)
            self._condition.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Message]:
        """The first `count` messages, or all that came within `timeout` seconds if fewer did."""
        with self._condition:
            self._condition.wait_for(lambda: len(self.messages) >= count, timeout)
            return list(self.messages[:count])

    def settle(self, quiet_s: float = 0.3) -> list[Message]:
        """Everything received once nothing new has come for `quiet_s` seconds."""
        with self._condition:
            seen = -1
            while seen != len(self.messages):
                seen = len(self.messages)
                self._condition.wait(quiet_s)
            return list(self.messages)
