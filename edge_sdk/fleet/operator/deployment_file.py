"""The operator's deployment file (`deployment.yaml`): read it as a `DeploymentManifest`, naming every problem.

`fleet sign` refuses a file with all its problems at once, each as `FILE:LINE: key 'a.b': what is wrong`
(the line of the key, or of the nearest enclosing key the file has), instead of the first one and a count.
Inline artifacts found beside the deployment file (or in `artifacts_dir`) are checked too: a file whose
size or SHA-256 is not the manifest's is a problem, since the deploy would fail on it later (`fleet
manifest` writes these fields). A missing file is not: a manifest may be signed where its artifacts are not.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.yaml_model import KeyPath, describe_error, key_lines, parse_yaml, read_yaml_text
from edge_sdk.fleet.wire.artifact_files import sha256_file
from edge_sdk.fleet.wire.manifest import DEFAULT_MAX_MANIFEST_BYTES, DeploymentManifest, InlineSource


def load_deployment(path: Path, artifacts_dir: Path | None = None, now: datetime | None = None) -> DeploymentManifest:
    """`path` as a manifest ready to sign; a ConfigError lists every problem found (one per line when several)."""
    source = str(path)
    data, node = parse_yaml(read_yaml_text(path), source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    lines = key_lines(node)
    try:
        manifest = DeploymentManifest.model_validate(data)
    except ValidationError as exc:
        raise_problems(source, [describe_error(error, source, lines) for error in exc.errors()])
    problems = _signing_problems(manifest, source, lines, now or datetime.now(timezone.utc))
    problems += artifact_file_problems(manifest, artifacts_dir or path.parent, source, lines)
    raise_problems(source, problems)
    return manifest


def raise_problems(source: str, problems: list[str]) -> None:
    """Nothing when `problems` is empty; one problem as the error's line, several under a count."""
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(f"{source}: {len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems))


def artifact_file_problems(
    manifest: DeploymentManifest,
    folder: Path,
    source: str,
    lines: dict[KeyPath, int] | None = None,
    require: bool = False,
) -> list[str]:
    """Inline artifacts whose file in `folder` differs from the manifest's size and SHA-256 (or, with
    `require`, is missing: `fleet deploy` sends them from there)."""
    problems = []
    for index, artifact in enumerate(manifest.artifacts):
        if not isinstance(artifact.source, InlineSource):
            continue
        line = (lines or {}).get(("artifacts", index))
        where = f"{source}:{line}" if line else source
        file = folder / artifact.name
        if not file.is_file():
            if require:
                problems.append(f"{where}: artifact '{artifact.name}': no file {file} to send (give --artifacts DIR)")
            continue  # signed where the artifacts are not: `fleet deploy` checks them
        digest, size = sha256_file(file)
        if (digest, size) != (artifact.sha256, artifact.size):
            problems.append(
                f"{where}: artifact '{artifact.name}': {file} has {size} bytes and SHA-256 {digest[:12]}…, the file "
                f"says {artifact.size} bytes and {artifact.sha256[:12]}… (run edge-sdk fleet manifest, then sign again)"
            )
    return problems


def _signing_problems(manifest: DeploymentManifest, source: str, lines: dict[KeyPath, int], now: datetime) -> list[str]:
    problems = []
    if manifest.is_expired(now):
        problems.append(
            f"{source}:{lines.get(('expires_at',), '?')}: key 'expires_at': expected a time in the future, "
            f"got {manifest.expires_at.isoformat()}"
        )
    size = len(manifest.canonical_json())
    if size > DEFAULT_MAX_MANIFEST_BYTES:
        problems.append(f"{source}: expected at most {DEFAULT_MAX_MANIFEST_BYTES} bytes of JSON, got {size}")
    return problems
