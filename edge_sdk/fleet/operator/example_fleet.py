"""`fleet init DIR`: a working fleet of one broker, one operator, one device and a cloud offload worker, in one folder.

Each sub-folder is what one machine needs, and is self-contained (its own copy of the CA certificate;
relative paths in its YAML files start from the file's folder):

    ca/         ca.pem, ca.key                 the fleet CA (ca.key signs every identity: keep it offline)
    broker/     mosquitto.conf, acl, ca.pem, broker.pem, broker.key; data/ and mosquitto.log once it runs
    operator/   operator.yaml (broker settings), operator.pem/.key (TLS), signing.key/.pub (Ed25519)
    <device>/   agent.yaml, <device>.pem/.key, ca.pem, trusted-keys/signing.pub; store/ and engines/ later
    <worker>/   worker.yaml (broker settings of `edge-sdk offload worker`), <worker>.pem/.key, ca.pem; one per worker
    release/    deployment.yaml, the model, people.yaml (a pipeline on it)

Certificates and keys come from `edge_sdk.mqtt.certificates` (TLS) and `fleet.wire.signing` (the
deployment signing key); private keys are written with mode 0600.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.operator.broker_config import acl_text, mosquitto_config
from edge_sdk.fleet.operator.manifest_builder import DEFAULT_CHUNK_SIZE, DEFAULT_VALID_DAYS, write_deployment_file
from edge_sdk.fleet.wire.chunks import inline_artifact
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN
from edge_sdk.fleet.wire.signing import generate_signing_key
from edge_sdk.mqtt.certificates import CertificateAuthority
from edge_sdk.mqtt.topics import check_identity
from edge_sdk.pipeline.from_model import ModelGuess, detect_document, guess_model

DEMO_MODEL = Path(__file__).resolve().parents[3] / "models" / "ssdlite_mobilenet_v2_person.onnx"
DEMO_LABELS = ["person"]
"""The shipped detector's one class (its file carries no class names)."""
"""The shipped person detector, in a source checkout (the wheel does not carry models/)."""
DEFAULT_PORT = 8883
PIPELINE_NAME = "people"
DEFAULT_WORKERS = ("worker-1",)
FOLDERS = ("ca", "broker", "operator", "release")
"""The sub-folders whose names are taken; a device's and each worker's folder is named after it."""


@dataclass
class ExampleFleet:
    folder: Path
    device: str
    written: list[tuple[Path, str]] = field(default_factory=list)

    def add(self, path: Path, what: str) -> Path:
        self.written.append((path, what))
        return path


def write_example_fleet(
    folder: Path,
    *,
    device: str = "cam-001",
    operator: str = "operator",
    workers: Sequence[str] = DEFAULT_WORKERS,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    model: Path | None = None,
    force: bool = False,
) -> ExampleFleet:
    """Write the example fleet into `folder` (refused when it holds anything, unless `force`)."""
    _check_names(device, operator, workers)
    model = model or DEMO_MODEL
    if not model.is_file():
        raise ConfigError(f"{model}: no model file here (give --model PATH to an ONNX model)")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise ConfigError(
            f"{folder}: the folder is not empty; choose a new one, or give --force to overwrite its files"
        )
    # How to feed the model and read its outputs, as `edge-sdk detect` guesses them (an SSD, a YOLO
    # head, a classifier): a model it cannot read is refused before anything is written.
    guess = guess_model(model, labels=DEMO_LABELS if model.resolve() == DEMO_MODEL else None)
    fleet = ExampleFleet(folder, device)
    ca = CertificateAuthority.create("edge-sdk example fleet CA")
    ca.save(
        fleet.add(folder / "ca" / "ca.pem", "the fleet CA certificate"),
        fleet.add(folder / "ca" / "ca.key", "the CA key (signs every identity; keep it offline)"),
    )
    _broker(fleet, ca, host, port, operator, workers)
    _operator(fleet, ca, host, port, operator)
    _device(fleet, ca, host, port)
    for worker in workers:
        _worker(fleet, ca, host, port, worker)
    _release(fleet, model, guess)
    return fleet


def _check_names(device: str, operator: str, workers: Sequence[str]) -> None:
    """Each identity a valid device id, and no two alike: the ACL tells them apart by name alone."""
    named = [("--device", device), ("--operator", operator), *(("--worker", worker) for worker in workers)]
    for role, name in named:
        check_identity(name)
        if not re.match(IDENTIFIER_PATTERN, name):
            raise ConfigError(f"{role}: expected letters, digits, '.', '_' and '-' (a device id), got '{name}'")
    if device == operator:
        raise ConfigError(f"expected the device and the operator to have different names, got '{device}' for both")
    for role, name in named:
        if role != "--operator" and name in FOLDERS:
            raise ConfigError(f"{role}: '{name}' is the name of another folder of the fleet ({', '.join(FOLDERS)})")
    seen: dict[str, str] = {}
    for role, name in named:
        if name in seen:
            raise ConfigError(
                f"{role}: '{name}' is the {seen[name].removeprefix('--')}'s name already; give each its own"
            )
        seen[name] = role


def _broker(
    fleet: ExampleFleet, ca: CertificateAuthority, host: str, port: int, operator: str, workers: Sequence[str]
) -> None:
    folder = fleet.folder / "broker"
    ips = [host] if _is_ip(host) else ["127.0.0.1"] if host == "localhost" else []
    names = ["localhost"] if host in ("127.0.0.1", "localhost") else [] if _is_ip(host) else [host]
    ca.issue_server(folder / "broker.pem", folder / "broker.key", names, ips)
    fleet.add(folder / "broker.pem", f"the broker's certificate for {', '.join([*names, *ips])}")
    fleet.add(folder / "broker.key", "its key")
    _copy_ca(fleet, folder)
    rules = f"each device only below edge/<device>/, {operator} all" + (
        ", workers the offload topics" if workers else ""
    )
    _text(fleet, folder / "acl", acl_text([operator], workers), f"the ACL: {rules}")
    (folder / "data").mkdir(exist_ok=True)
    _text(fleet, folder / "mosquitto.conf", mosquitto_config(folder, host, port), f"Mosquitto: TLS on port {port}")


def _operator(fleet: ExampleFleet, ca: CertificateAuthority, host: str, port: int, operator: str) -> None:
    folder = fleet.folder / "operator"
    settings = {
        "host": host,
        "port": port,
        "client_id": operator,
        "connect_timeout_s": 10,
        "tls": _identity(fleet, ca, folder, operator, "the operator's"),
    }
    _yaml(fleet, folder / "operator.yaml", settings, "broker settings for the fleet commands (--broker)")
    keys = generate_signing_key(folder, "signing", overwrite=True)
    fleet.add(keys.private_key, "the Ed25519 key that signs deployments (--key)")
    fleet.add(keys.public_key, f"its public key, id {keys.key_id[:16]}…")


def _device(fleet: ExampleFleet, ca: CertificateAuthority, host: str, port: int) -> None:
    device = fleet.device
    folder = fleet.folder / device
    tls = _identity(fleet, ca, folder, device, "the device's")
    trusted = folder / "trusted-keys"
    trusted.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(fleet.folder / "operator" / "signing.pub", trusted / "signing.pub")
    fleet.add(trusted / "signing.pub", "the operator's public key, which the device trusts")
    config = {
        "device_id": device,
        "profile": None,
        "labels": {"site": "demo"},
        "store_dir": "store",
        "trusted_keys_dir": "trusted-keys",
        "engine_cache_dir": "engines",
        "keep_versions": 3,
        "broker": {
            "host": host,
            "port": port,
            "client_id": device,
            "clean_start": False,
            "session_expiry_s": 604800,
            "keepalive_s": 30,
            "tls": tls,
            "reconnect": {"min_delay_s": 0.5, "max_delay_s": 10},
            "spool": {"path": "spool.db", "max_messages": 100000},
        },
    }
    _yaml(fleet, folder / "agent.yaml", config, "the agent's config (profile: null detects the host)")


def _worker(fleet: ExampleFleet, ca: CertificateAuthority, host: str, port: int, worker: str) -> None:
    folder = fleet.folder / worker
    settings = {
        "host": host,
        "port": port,
        "client_id": worker,
        "connect_timeout_s": 10,
        "keepalive_s": 30,
        "tls": _identity(fleet, ca, folder, worker, "a cloud offload worker's"),
        "reconnect": {"min_delay_s": 0.5, "max_delay_s": 10},
    }
    _yaml(fleet, folder / "worker.yaml", settings, "broker settings for `edge-sdk offload worker --broker`")


def _identity(fleet: ExampleFleet, ca: CertificateAuthority, folder: Path, name: str, whose: str) -> dict[str, str]:
    """A client certificate for `name` (its MQTT user) in `folder`, with the CA; its broker file's `tls:`."""
    ca.issue_client(name, folder / f"{name}.pem", folder / f"{name}.key")
    fleet.add(folder / f"{name}.pem", f"{whose} TLS certificate (MQTT user '{name}')")
    fleet.add(folder / f"{name}.key", "its key")
    _copy_ca(fleet, folder)
    return {"ca_file": "ca.pem", "cert_file": f"{name}.pem", "key_file": f"{name}.key"}


def _release(fleet: ExampleFleet, model: Path, guess: ModelGuess) -> None:
    folder = fleet.folder / "release"
    folder.mkdir(parents=True, exist_ok=True)
    model_copy = folder / model.name
    shutil.copyfile(model, model_copy)
    fleet.add(model_copy, "the model (the shipped person detector unless --model)")
    pipeline = detect_document(guess, "synthetic://", folder, folder, score_threshold=0.5)
    pipeline.update(
        name=PIPELINE_NAME,
        model={"path": model_copy.name},
        sources=[
            {
                "uri": "synthetic://",
                "name": "cam",
                "options": {"frames": 100000, "size": "640x480", "fps": 5, "realtime": True},
            }
        ],
        sinks=[{"type": "agent"}],
    )
    _yaml(
        fleet, folder / f"{PIPELINE_NAME}.yaml", pipeline, "a pipeline on the model; results go out through the agent"
    )
    now = datetime.now(timezone.utc)
    document = {
        "deployment_id": "demo",
        "version": 1,
        "created_at": now,
        "expires_at": now + timedelta(days=DEFAULT_VALID_DAYS),
        "description": "the example fleet's person detector",
        "target": {"labels": {"site": "demo"}},
        "artifacts": [
            inline_artifact(path, kind, DEFAULT_CHUNK_SIZE).model_dump(mode="json")
            for path, kind in ((model_copy, "model"), (folder / f"{PIPELINE_NAME}.yaml", "pipeline"))
        ],
    }
    write_deployment_file(folder / "deployment.yaml", document)
    fleet.add(folder / "deployment.yaml", "the deployment: version 1 of the model and the pipeline")


def _copy_ca(fleet: ExampleFleet, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(fleet.folder / "ca" / "ca.pem", folder / "ca.pem")
    fleet.add(folder / "ca.pem", "the CA certificate, to check the other side")


def _text(fleet: ExampleFleet, path: Path, text: str, what: str) -> None:
    path.write_text(text, encoding="utf-8")
    fleet.add(path, what)


def _yaml(fleet: ExampleFleet, path: Path, data: Mapping[str, object], what: str) -> None:
    header = "# written by edge-sdk fleet init; relative paths start from this file's folder\n"
    _text(fleet, path, header + yaml.safe_dump(data, sort_keys=False, width=100), what)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
