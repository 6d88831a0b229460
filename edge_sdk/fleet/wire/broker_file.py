"""Broker settings written in a file: relative paths in them start from that file's folder.

The `broker:` section of `agent.yaml` and the operator's `--broker operator.yaml` follow the same rule,
so a config folder (settings, CA, client certificate and key, password file, spool) can be moved as
a whole and used from any working directory.
"""

from __future__ import annotations

from pathlib import Path

from edge_sdk.core.yaml_model import load_yaml_model
from edge_sdk.mqtt import MqttSettings, SpoolSettings, TlsSettings


def resolve_broker_paths(settings: MqttSettings, base: Path) -> MqttSettings:
    """A copy of `settings` whose relative paths (TLS files, spool, password file) are made absolute against `base`."""

    def fix(path: Path | None) -> Path | None:
        return None if path is None or path.is_absolute() else (base / path).resolve()

    update: dict[str, object] = {}
    tls = settings.tls
    if tls is not None:
        tls_update = {
            name: fix(getattr(tls, name))
            for name in ("ca_file", "cert_file", "key_file")
            if fix(getattr(tls, name)) is not None
        }
        update["tls"] = TlsSettings.model_validate({**tls.model_dump(), **tls_update})
    spool = settings.spool
    if spool is not None and not spool.path.is_absolute():
        update["spool"] = SpoolSettings.model_validate({**spool.model_dump(), "path": fix(spool.path)})
    if settings.password_file is not None and not settings.password_file.is_absolute():
        update["password_file"] = fix(settings.password_file)
    return settings if not update else MqttSettings.model_validate({**settings.model_dump(), **update})


def load_broker_file(path: Path) -> MqttSettings:
    """Read and validate a broker settings file (MqttSettings); relative paths are taken from the file's folder."""
    return resolve_broker_paths(load_yaml_model(path, MqttSettings), path.resolve().parent)
