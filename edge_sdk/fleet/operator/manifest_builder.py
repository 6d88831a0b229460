"""`fleet manifest`: fill in a deployment file's artifact sizes, SHA-256 and chunk counts from the files.

The deployment file names its artifacts (`name`, and `kind` or a kind guessed from the extension);
each is read from the artifacts folder (the deployment file's own by default) and gets `size`,
`sha256` and, for an inline source (the default, in chunks of `chunk_size`), `chunk_count`. A URL
source keeps its URL; its size and hash still come from the local copy. `created_at` and
`expires_at` are written when missing, or when the version is changed. The file is written back as
plain YAML (comments are not kept).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.yaml_model import describe_error, key_lines, parse_yaml, read_yaml_text
from edge_sdk.fleet.operator.deployment_file import raise_problems
from edge_sdk.fleet.wire.artifact_files import sha256_file
from edge_sdk.fleet.wire.manifest import MAX_CHUNK_SIZE, DeploymentManifest, safe_artifact_name

DEFAULT_CHUNK_SIZE = 256 * 1024
DEFAULT_VALID_DAYS = 30.0
_KINDS = {".onnx": "model", ".yaml": "pipeline", ".yml": "pipeline"}


@dataclass(frozen=True)
class ArtifactFacts:
    name: str
    kind: str
    size: int
    sha256: str
    chunk_count: int | None


def guess_kind(name: str) -> str:
    """model for .onnx, pipeline for .yaml/.yml, file for anything else."""
    return _KINDS.get(Path(name).suffix.lower(), "file")


def update_deployment_file(
    path: Path,
    artifacts_dir: Path | None = None,
    *,
    version: int | None = None,
    chunk_size: int | None = None,
    valid_days: float = DEFAULT_VALID_DAYS,
    now: datetime | None = None,
) -> tuple[DeploymentManifest, list[ArtifactFacts]]:
    """Compute every artifact's size, SHA-256 and chunk count from its file and write `path` back.

    Every problem (a missing file, an entry without a name, a field the manifest refuses) is reported
    at once in a ConfigError, and the file is then left as it was.
    """
    if chunk_size is not None and not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ConfigError(f"--chunk-size: expected 1..{MAX_CHUNK_SIZE} bytes, got {chunk_size}")
    source = str(path)
    data, node = parse_yaml(read_yaml_text(path), source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    lines = key_lines(node)
    folder = artifacts_dir or path.parent
    now = now or datetime.now(timezone.utc)
    problems: list[str] = []
    entries = data.get("artifacts")
    if not isinstance(entries, list) or not entries:
        problems.append(
            f"{source}:{lines.get(('artifacts',), 1)}: key 'artifacts': expected a list of artifacts by name"
        )
        entries = []
    facts = []
    for index, entry in enumerate(entries):
        where = f"{source}:{lines.get(('artifacts', index), '?')}: artifacts.{index}"
        fact = _fill_entry(entry, folder, chunk_size, where, problems)
        if fact is not None:
            facts.append(fact)
    if version is not None:
        data["version"] = version
    if version is not None or "created_at" not in data:
        data["created_at"] = now
    if version is not None or "expires_at" not in data:
        data["expires_at"] = now + timedelta(days=valid_days)
    data = _plain(data)
    manifest: DeploymentManifest | None = None
    if not problems:
        try:
            manifest = DeploymentManifest.model_validate(data)
        except ValidationError as exc:
            problems = [describe_error(error, source, lines) for error in exc.errors()]
    raise_problems(source, problems)
    assert manifest is not None
    _write(path, data)
    return manifest, facts


def _fill_entry(
    entry: Any, folder: Path, chunk_size: int | None, where: str, problems: list[str]
) -> ArtifactFacts | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        problems.append(f"{where}: expected a mapping with the artifact's file name under 'name'")
        return None
    name = entry["name"]
    try:
        safe_artifact_name(name)
    except ValueError as exc:
        problems.append(f"{where}.name: '{name}' is not a plain file name: {exc}")
        return None
    file = folder / name
    if not file.is_file():
        problems.append(f"{where}: no file {file} for artifact '{name}'")
        return None
    digest, size = sha256_file(file)
    entry.setdefault("kind", guess_kind(name))
    entry["size"], entry["sha256"] = size, digest
    source = entry.get("source") or {}
    if isinstance(source, dict) and "type" not in source:  # a URL is downloaded, anything else sent inline
        source = {"type": "url" if "url" in source else "inline", **source}
    entry["source"] = source
    chunk_count = None
    if isinstance(source, dict) and source.get("type") == "inline":
        given = chunk_size or source.get("chunk_size") or DEFAULT_CHUNK_SIZE
        if not isinstance(given, int) or isinstance(given, bool) or not 1 <= given <= MAX_CHUNK_SIZE:
            problems.append(f"{where}.source.chunk_size: expected 1..{MAX_CHUNK_SIZE} bytes, got {given}")
            return None
        chunk_count = -(-size // given)
        entry["source"] = {"type": "inline", "chunk_size": given, "chunk_count": chunk_count}
    return ArtifactFacts(name, str(entry["kind"]), size, digest, chunk_count)


def _plain(value: Any) -> Any:
    """The document with dates as ISO 8601 strings (what the manifest and any YAML reader agree on)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return aware.astimezone(timezone.utc).isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    return value


def write_deployment_file(path: Path, data: dict[str, Any]) -> None:
    """Write a deployment document as YAML (keys in the given order), atomically."""
    _write(path, _plain(data))


def _write(path: Path, data: dict[str, Any]) -> None:
    text = "# edge-sdk deployment; sizes, hashes and chunk counts are written by `edge-sdk fleet manifest`.\n"
    text += yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write the deployment file ({exc.strerror})") from None
