"""The operator's answer to a device's `need_chunks`: reading the missing chunks and publishing them.

A device that lacks chunks of a manifest's inline artifacts answers `deploy` with `need_chunks` and
a `missing` map of artifact name -> [first, last] index ranges; `missing_chunks` reads that map off the
response and `send_chunks` publishes those chunks, read from the local artifacts folder, to
edge/<device>/artifacts/<version>/<artifact>. `FleetOperator.deploy` (client.py) runs the rounds.
"""

from __future__ import annotations

import logging
from pathlib import Path

from edge_sdk.core.errors import ChunkSendError
from edge_sdk.fleet.wire.chunks import encode_chunk
from edge_sdk.fleet.wire.manifest import DeploymentManifest, InlineSource
from edge_sdk.fleet.wire.protocol import ProtocolError, Response
from edge_sdk.mqtt import AckTimeoutError, MqttClient
from edge_sdk.mqtt.topics import DeviceTopics

log = logging.getLogger(__name__)


def send_chunks(
    client: MqttClient,
    device: str,
    manifest: DeploymentManifest,
    missing: dict[str, list[tuple[int, int]]],
    artifacts_dir: Path,
) -> int:
    """Publish the missing chunks (QoS 1) to edge/<d>/artifacts/<version>/<artifact>; returns how many."""
    topics = DeviceTopics(device)
    sent = 0
    last: tuple[str, bytes] | None = None
    for name, ranges in missing.items():
        try:
            artifact = manifest.artifact(name)
        except KeyError:
            raise ChunkSendError(f"device '{device}' asked for chunks of '{name}', not in the manifest") from None
        source = artifact.source
        if not isinstance(source, InlineSource):
            raise ChunkSendError(f"device '{device}' asked for chunks of '{name}', which is not sent inline")
        path = artifacts_dir / artifact.name
        topic = topics.artifacts(str(manifest.version), artifact.name)
        try:
            with open(path, "rb") as file:
                for first, last_index in ranges:
                    for index in range(max(0, first), min(last_index, source.chunk_count - 1) + 1):
                        file.seek(index * source.chunk_size)
                        data = file.read(source.chunk_size)
                        payload = encode_chunk(manifest.version, artifact.name, index, source.chunk_count, data)
                        if last is not None:
                            client.publish(*last, qos=1, wait=False)
                        last = (topic, payload)
                        sent += 1
        except OSError as exc:
            raise ChunkSendError(f"{path}: cannot read artifact '{name}' ({exc.strerror})") from None
    if last is not None:  # the broker acknowledges in order: once the last is acknowledged, all are
        try:
            client.publish(*last, qos=1, wait=True)
        except AckTimeoutError:
            log.warning("chunks for %s not acknowledged in time; the device will ask again for what it lacks", device)
    return sent


def missing_chunks(response: Response) -> dict[str, list[tuple[int, int]]] | None:
    """The `missing` map of a need_chunks result, or None for any other response."""
    if not response.ok or response.result is None or response.result.get("status") != "need_chunks":
        return None
    raw = response.result.get("missing")
    if not isinstance(raw, dict):
        raise ProtocolError(f"need_chunks from '{response.device}': expected 'missing' as a mapping")
    missing: dict[str, list[tuple[int, int]]] = {}
    for name, ranges in raw.items():
        if not isinstance(ranges, list):
            raise ProtocolError(f"need_chunks from '{response.device}': expected a list of ranges for '{name}'")
        pairs: list[tuple[int, int]] = []
        for entry in ranges:
            if not (isinstance(entry, list) and len(entry) == 2 and all(type(v) is int for v in entry)):
                raise ProtocolError(f"need_chunks from '{response.device}': expected [first, last] ranges")
            pairs.append((entry[0], entry[1]))
        missing[str(name)] = pairs
    return missing
