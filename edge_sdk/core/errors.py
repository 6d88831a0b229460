"""One exception tree for the SDK. Messages say what was expected and what came."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """An exception's message as one line, or its type's name when it has none.

    Libraries' messages run to several lines, and the useful part is often below the first: ONNX's
    checker puts the node after a line break ("...input 'zz' of node: \nname: add1 OpType: Add\n is
    not output of any previous nodes.") or under "==> Context:". The lines are joined, blank ones
    dropped; a stack trace after the message, and anything past a few hundred characters, is left out.
    """
    parts: list[str] = []
    for raw in str(exc).splitlines():
        line = raw.strip()
        if line.startswith(("Stacktrace:", "Traceback (most recent call last)")):
            break
        if line.startswith("==>"):  # the checker's "==> Context: ..." (the node it failed on)
            if parts:
                parts[-1] += ";"
            line = line.lstrip("=> ")
            line = line[:1].lower() + line[1:]
        if line:
            parts.append(line)
    text = " ".join(parts)
    if len(text) > _ONE_LINE_LIMIT:
        text = text[: _ONE_LINE_LIMIT - 1].rstrip() + "…"
    return text or type(exc).__name__


_ONE_LINE_LIMIT = 600


class EdgeSDKError(Exception):
    """Root of every error the SDK raises on purpose; the CLI prints these as one line."""


class ConfigError(EdgeSDKError):
    """A profile, pipeline or option is malformed or names something unknown."""


class ModelError(EdgeSDKError):
    """A model file is missing, corrupt, or does not fit the pipeline that uses it."""


class BackendUnavailableError(EdgeSDKError):
    """A backend or execution provider is not installed or cannot run on this host."""


class EngineBuildError(EdgeSDKError):
    """Turning a model into an engine failed."""


class InferenceError(EdgeSDKError):
    """A built engine failed while it ran (e.g. out of device memory for that batch)."""


class EngineCacheError(EdgeSDKError):
    """The engine cache cannot be used (e.g. the directory is not writable)."""


class EngineMismatchError(EngineCacheError):
    """A built engine belongs to another library version or device than this host's (found before loading it)."""


class SourceError(EdgeSDKError):
    """A frame source cannot be opened or read.

    `retryable` says whether opening it again can help: True for causes that can go away (a camera
    unreachable, a stream that stalled, a device not plugged in yet), False for PermanentSourceError.
    """

    retryable: bool = True


class PermanentSourceError(SourceError):
    """A source failed for a cause no retry can fix (a missing file, an empty folder, a format
    OpenCV cannot read, a frame that cannot be decoded under `on_error: stop`), or its own reconnect
    policy already gave up: whoever runs it must not open it again."""

    retryable = False


class SourceConfigError(PermanentSourceError, ConfigError):
    """A source URI or its parameters are malformed: a config error, and a permanent source error."""


class SinkError(EdgeSDKError):
    """A result sink cannot be opened or written."""


class BrokerError(EdgeSDKError):
    """The MQTT broker refused or dropped the connection."""


# Fleet (edge_sdk/fleet). Every refusal of a deployment has its own class and a stable `reason`
# code, so a device can report why it refused without parsing the message.


class FleetError(EdgeSDKError):
    """A fleet manifest, key, artifact or transfer was refused or could not be handled."""

    reason: str = "fleet-error"


class ManifestError(FleetError):
    """A deployment manifest was refused before anything was staged or activated."""

    reason = "manifest-refused"


class ManifestFormatError(ManifestError):
    """The manifest (or its signed envelope) is not valid JSON of the expected shape."""

    reason = "malformed"


class ManifestTooLargeError(ManifestFormatError):
    """The manifest payload is larger than the receiver accepts."""

    reason = "oversized"


class ManifestUnsignedError(ManifestError):
    """A manifest arrived without a signature."""

    reason = "unsigned"


class ManifestUntrustedKeyError(ManifestError):
    """The manifest is signed by a key this device does not trust."""

    reason = "untrusted-key"


class ManifestSignatureError(ManifestError):
    """The signature does not match the manifest bytes: tampered with, or signed over other bytes."""

    reason = "bad-signature"


class ManifestExpiredError(ManifestError):
    """The manifest's expiry time has passed."""

    reason = "expired"


class ManifestTargetError(ManifestError):
    """The manifest's target selector does not select this device."""

    reason = "wrong-target"


class ManifestReplayError(ManifestError):
    """The manifest's version is already active or was superseded here (a replayed manifest)."""

    reason = "replay"


class ManifestDowngradeError(ManifestError):
    """The manifest's version is lower than the active one and it is not marked as a rollback."""

    reason = "downgrade"


class ManifestRollbackError(ManifestError):
    """A rollback manifest names a version this device cannot roll back to."""

    reason = "rollback-unavailable"


class SigningKeyError(FleetError):
    """A signing or trusted key file is missing, unreadable or not an Ed25519 key."""

    reason = "bad-key"


class ArtifactError(FleetError):
    """An artifact cannot be stored, verified, found or activated."""

    reason = "artifact-error"


class ArtifactPathError(ArtifactError):
    """An artifact name or a path in the store points outside the store."""

    reason = "artifact-path"


class ArtifactHashError(ArtifactError):
    """An artifact's size or SHA-256 differs from the manifest's."""

    reason = "artifact-hash"


class ChunkError(FleetError):
    """A chunk of an inline artifact transfer is malformed or does not belong to the transfer."""

    reason = "bad-chunk"


class ChunkCorruptError(ChunkError):
    """A chunk's bytes do not match its SHA-256; the chunk is still missing and must be sent again."""

    reason = "corrupt-chunk"

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


class CommandTimeoutError(FleetError):
    """A device did not answer a command in time (it may be offline, busy, or the answer was lost)."""

    reason = "timeout"


class ChunkSendError(FleetError):
    """The operator cannot send the chunks a device asked for (artifact file missing or not inline)."""

    reason = "chunks-unavailable"


class RolloutNotFoundError(FleetError):
    """No rollout with that id in the rollout state file."""

    reason = "unknown-rollout"
