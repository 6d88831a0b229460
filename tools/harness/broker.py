"""A private Mosquitto for tests and benchmarks: generated config, free 127.0.0.1 port, optional TLS, passwords, ACL, persistence.

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
import hashlib
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from edge_sdk.mqtt import MqttSettings, ReconnectPolicy, TlsSettings
from edge_sdk.mqtt.certificates import CertificateAuthority

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


def find_mosquitto() -> str | None:
    return shutil.which("mosquitto") or next(
        (path for path in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(path, os.X_OK)), None
    )


# --- certificates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(folder: Path, client_name: str = "edge-client") -> Certificates:
    """A CA, a server certificate for localhost and 127.0.0.1, and a client certificate, all PEM (valid a day)."""
    ca = CertificateAuthority.create("edge-sdk test CA", days=1)
    certificates = Certificates(
        ca_file=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
    )
    ca.save(certificates.ca_file, folder / "ca.key")
    ca.issue_server(certificates.server_cert, certificates.server_key, ["localhost"], ["127.0.0.1"], days=1)
    ca.issue_client(client_name, certificates.client_cert, certificates.client_key, days=1)
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
        config: Callable[[MosquittoBroker], str] | None = None,
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
        if config is not None:  # a complete config from elsewhere (e.g. deploy/), given this broker's port and folder
            self.config_file.write_text(config(self) + extra_config)
            return
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
            # small packets (PUBACKs) at once, not behind the client's delayed ACK (as deploy/ configures)
            "set_tcp_nodelay true",
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
        process.send_signal(signal.SIGCONT)  # a paused broker cannot act on SIGTERM
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open, nothing is answered, like a stalled server."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

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


# --- the fleet broker of deploy/mosquitto ---------------------------------------------------------

DEPLOY_MOSQUITTO = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto"


def deployed_config(broker: MosquittoBroker, etc_dir: Path) -> str:
    """deploy/mosquitto/mosquitto.conf with only its port, folders and log destination changed.

    Raises ValueError when the shipped file no longer has a line this relies on, so the test cannot
    silently run a different config.
    """
    text = (DEPLOY_MOSQUITTO / "mosquitto.conf").read_text()
    data_dir = broker.folder / "data"
    data_dir.mkdir(exist_ok=True)
    replacements = [
        ("\nlistener 8883\n", f"\nlistener {broker.port} {broker.host}\n"),
        ("/etc/mosquitto/edge-sdk/", f"{etc_dir}/"),
        ("\npersistence_location /var/lib/mosquitto/\n", f"\npersistence_location {data_dir}/\n"),
        ("\nlog_dest syslog\n", f"\nlog_dest file {broker.log_file}\n"),
    ]
    for old, new in replacements:
        if old not in text:
            raise ValueError(
                f"deploy/mosquitto/mosquitto.conf no longer contains {old.strip()!r}; update tools/harness/broker.py"
            )
        text = text.replace(old, new)
    if os.geteuid() == 0:
        text += "user root\n"  # otherwise Mosquitto drops to 'mosquitto', who cannot read the test folder
    return text


@dataclass(frozen=True)
class FleetBroker:
    """A running broker with the deploy/mosquitto config, ACL and certificates made by its make_certs.py."""

    broker: MosquittoBroker
    etc_dir: Path

    def settings(self, identity: str | None, **overrides: Any) -> MqttSettings:
        """Client settings for a device or operator certificate; `identity=None` connects without one."""
        ca_file = self.etc_dir / "ca.pem"
        if identity is None:
            tls = TlsSettings(ca_file=ca_file)
        else:
            folders = ("devices", "operators", "claims")
            folder = next(
                (self.etc_dir / f for f in folders if (self.etc_dir / f / f"{identity}.pem").exists()),
                None,
            )
            if folder is None:
                raise KeyError(f"no certificate was made for {identity!r}")
            tls = TlsSettings(
                ca_file=ca_file, cert_file=folder / f"{identity}.pem", key_file=folder / f"{identity}.key"
            )
        return self.broker.settings(**{"tls": tls, **overrides})


def start_fleet_broker(
    factory: BrokerFactory, devices: list[str], operators: list[str], claims: list[str] | None = None
) -> FleetBroker:
    """deploy/mosquitto as shipped: certificates from its make_certs.py, its acl file, its mosquitto.conf.

    `claims` are claim identities (claim-<batch>); the acl gets make_certs' block for those it lacks."""
    folder = factory.folder / f"fleet-{len(factory.brokers)}"
    etc_dir = folder / "etc"
    make_certs = load_deploy_script("make_certs")
    args = [str(etc_dir), "--broker-host", "localhost", "--broker-ip", "127.0.0.1", "--days", "1"]
    args += [arg for name in devices for arg in ("--device", name)]
    args += [arg for name in operators for arg in ("--operator", name)]
    args += [arg for name in claims or [] for arg in ("--claim", name)]
    if make_certs.main(args) != 0:
        raise RuntimeError("deploy/mosquitto/make_certs.py failed")
    acl = (DEPLOY_MOSQUITTO / "acl").read_text()
    for name in claims or []:
        if f"\nuser {name}\n" not in acl:
            acl += "\n" + make_certs.claim_acl(name)
    (etc_dir / "acl").write_text(acl)
    broker = factory(folder=folder, config=lambda b: deployed_config(b, etc_dir))
    return FleetBroker(broker=broker, etc_dir=etc_dir)


def load_deploy_script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"deploy_mosquitto_{name}", DEPLOY_MOSQUITTO / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load deploy/mosquitto/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BrokerFactory:
    """Starts brokers in numbered sub-folders of `folder`; stops them all on close."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.brokers: list[MosquittoBroker] = []

    def __call__(self, folder: Path | None = None, **options: Any) -> MosquittoBroker:
        broker = MosquittoBroker(folder or self.folder / f"broker-{len(self.brokers)}", **options)
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
