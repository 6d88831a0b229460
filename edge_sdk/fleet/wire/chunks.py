"""Resumable chunked transfer of an inline artifact: the chunk message format, the sender and the receiver.

A chunk message is a fixed binary header followed by the chunk's bytes:

    magic b"EDGC" | format u8 (=1) | version u64 | index u32 | count u32 | sha256 32 bytes
    | name length u8 | artifact name (ASCII) | data

all integers big-endian. The per-chunk SHA-256 only catches transport damage; the whole-file SHA-256
from the signed manifest is what makes the assembled file trustworthy.

The receiver writes every chunk straight to its offset in a preallocated file and appends
(index, sha256) to a log, so memory stays bounded and a restart resumes where it stopped: on
reopening, logged chunks are re-hashed from disk and any that did not survive are missing again.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from edge_sdk.core.errors import ArtifactHashError, ArtifactPathError, ChunkCorruptError, ChunkError
from edge_sdk.fleet.wire.artifact_files import checked_name, sha256_file
from edge_sdk.fleet.wire.manifest import MAX_CHUNK_SIZE, MAX_NAME_LENGTH, Artifact, InlineSource, safe_artifact_name

CHUNK_MAGIC = b"EDGC"
CHUNK_FORMAT = 1
_HEADER = struct.Struct("!4sBQII32sB")
_RECORD = struct.Struct("!I32s")
MAX_CHUNK_MESSAGE_BYTES = _HEADER.size + MAX_NAME_LENGTH + MAX_CHUNK_SIZE
_HEX64 = re.compile(r"[0-9a-f]{64}")


# One chunk as the sender reads it from a file: (index, data, sha256 hex).
ChunkData = tuple[int, bytes, str]


@dataclass(frozen=True)
class Chunk:
    """A decoded chunk message."""

    version: int
    artifact: str
    index: int
    count: int
    sha256: str
    data: bytes


class ChunkOutcome(enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"


def iter_chunks(path: Path, chunk_size: int) -> Iterator[ChunkData]:
    """Read `path` in chunks of `chunk_size` bytes (the last may be shorter), one at a time."""
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(f"chunk_size must be within 1..{MAX_CHUNK_SIZE}, got {chunk_size}")
    with open(path, "rb") as file:
        index = 0
        while data := file.read(chunk_size):
            yield index, data, hashlib.sha256(data).hexdigest()
            index += 1


def inline_artifact(path: Path, kind: str, chunk_size: int, name: str | None = None) -> Artifact:
    """The manifest entry for sending `path` inline in chunks of `chunk_size` bytes."""
    digest, size = sha256_file(path)
    return Artifact.model_validate(
        {
            "name": name or path.name,
            "kind": kind,
            "size": size,
            "sha256": digest,
            "source": {"type": "inline", "chunk_size": chunk_size, "chunk_count": -(-size // chunk_size)},
        }
    )


def encode_chunk(version: int, artifact: str, index: int, count: int, data: bytes) -> bytes:
    """A chunk message (see the module docstring)."""
    name = safe_artifact_name(artifact).encode("ascii")
    digest = hashlib.sha256(data).digest()
    return _HEADER.pack(CHUNK_MAGIC, CHUNK_FORMAT, version, index, count, digest, len(name)) + name + data


def decode_chunk(payload: bytes, max_bytes: int = MAX_CHUNK_MESSAGE_BYTES) -> Chunk:
    """Parse a chunk message; anything malformed raises ChunkError. The data's hash is not checked here."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise ChunkError(f"chunk: expected bytes, got {type(payload).__name__}")
    payload = bytes(payload)
    if len(payload) > max_bytes:
        raise ChunkError(f"chunk: expected at most {max_bytes} bytes, got {len(payload)}")
    if len(payload) < _HEADER.size:
        raise ChunkError(f"chunk: expected a header of {_HEADER.size} bytes, got {len(payload)} bytes in all")
    magic, fmt, version, index, count, digest, name_length = _HEADER.unpack_from(payload)
    if magic != CHUNK_MAGIC:
        raise ChunkError(f"chunk: expected magic bytes {CHUNK_MAGIC.hex()}, got {magic.hex() or 'none'}")
    if fmt != CHUNK_FORMAT:
        raise ChunkError(f"chunk: expected format {CHUNK_FORMAT}, got {fmt}")
    if index >= count:
        raise ChunkError(f"chunk: index {index} is out of range for {count} chunks")
    end = _HEADER.size + name_length
    if len(payload) < end:
        raise ChunkError(f"chunk: artifact name of {name_length} bytes runs past the end of the message")
    raw_name = payload[_HEADER.size : end]
    try:
        name = safe_artifact_name(raw_name.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ChunkError(f"chunk: artifact name {raw_name!r:.140} refused ({exc})") from None
    return Chunk(version, name, index, count, digest.hex(), payload[end:])


class ChunkAssembler:
    """Receives the chunks of one inline artifact into `store_dir/<artifact name>/`, in any order.

    `accept` writes a chunk or ignores a duplicate; a chunk whose bytes do not match its hash (or its
    expected length) raises ChunkCorruptError and stays missing. `missing()` tells what to ask for;
    `finish()` checks the whole file against the manifest and returns its path.
    """

    def __init__(self, store_dir: Path, artifact: Artifact, verify_on_resume: bool = True):
        if not isinstance(artifact.source, InlineSource):
            raise ChunkError(f"artifact '{artifact.name}' is not sent inline (source: {artifact.source.type})")
        self.artifact = artifact
        self._source = artifact.source
        store_dir.mkdir(parents=True, exist_ok=True)
        self.folder = store_dir / checked_name(artifact.name)
        if self.folder.is_symlink():
            raise ArtifactPathError(f"{self.folder}: expected a folder inside {store_dir}, got a symlink")
        self._have = bytearray(self._source.chunk_count)
        self._received = 0
        self._open(verify_on_resume)

    # ---------------------------------------------------------------- state
    @property
    def total(self) -> int:
        return self._source.chunk_count

    @property
    def received(self) -> int:
        return self._received

    @property
    def complete(self) -> bool:
        return self._received == self.total

    def missing(self, limit: int | None = None) -> list[int]:
        """Indices still to receive, ascending (at most `limit` of them)."""
        result: list[int] = []
        start = 0
        while limit is None or len(result) < limit:
            index = self._have.find(0, start)
            if index < 0:
                break
            result.append(index)
            start = index + 1
        return result

    def missing_ranges(self, limit: int | None = None) -> list[tuple[int, int]]:
        """Missing indices as inclusive (first, last) ranges, for a compact resend request."""
        ranges: list[tuple[int, int]] = []
        start = 0
        while limit is None or len(ranges) < limit:
            first = self._have.find(0, start)
            if first < 0:
                break
            last = self._have.find(1, first)
            last = self.total if last < 0 else last
            ranges.append((first, last - 1))
            start = last
        return ranges

    # ---------------------------------------------------------------- receiving
    def accept_chunk(self, chunk: Chunk) -> ChunkOutcome:
        """`accept` for a decoded chunk message, checking it belongs to this artifact."""
        if chunk.artifact != self.artifact.name or chunk.count != self.total:
            raise ChunkError(
                f"chunk for '{chunk.artifact}' ({chunk.count} chunks) does not belong to artifact "
                f"'{self.artifact.name}' ({self.total} chunks)"
            )
        return self.accept(chunk.index, chunk.data, chunk.sha256)

    def accept(self, index: int, data: bytes, sha256: str) -> ChunkOutcome:
        if self._data_fd < 0:
            raise ChunkError(f"transfer of '{self.artifact.name}' is closed")
        if type(index) is not int or not 0 <= index < self.total:
            raise ChunkError(f"chunk index {index!r} is out of range: expected 0..{self.total - 1}")
        if self._have[index]:
            return ChunkOutcome.DUPLICATE
        if not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
            raise ChunkError(f"chunk {index}: expected sha256 as 64 lowercase hex digits, got {sha256!r:.80}")
        expected_length = self.artifact.chunk_length(index)
        if len(data) != expected_length:
            raise ChunkCorruptError(
                f"chunk {index} of '{self.artifact.name}': expected {expected_length} bytes, got {len(data)}", index
            )
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise ChunkCorruptError(
                f"chunk {index} of '{self.artifact.name}': expected sha256 {sha256}, got {got}; send it again", index
            )
        _pwrite_all(self._data_fd, data, index * self._source.chunk_size)
        os.write(self._log_fd, _RECORD.pack(index, bytes.fromhex(sha256)))
        self._have[index] = 1
        self._received += 1
        return ChunkOutcome.ACCEPTED

    def finish(self) -> Path:
        """Check the whole file's size and SHA-256; return its path (move it into a staging with add_file)."""
        if not self.complete:
            missing = self.missing(limit=10)
            raise ChunkError(
                f"transfer of '{self.artifact.name}' is incomplete: {self.total - self._received} of "
                f"{self.total} chunks missing (first: {', '.join(map(str, missing))})"
            )
        os.fsync(self._data_fd)
        got, size = sha256_file(self._data_path)
        if got == self.artifact.sha256 and size == self.artifact.size:
            self.close()
            return self._data_path
        dropped = self._drop_bad_chunks()
        if not dropped:  # every chunk matches the hash it came with: the sender sent the wrong file
            self._reset_progress()
        raise ArtifactHashError(
            f"artifact '{self.artifact.name}': expected sha256 {self.artifact.sha256}, assembled {got}; "
            f"{self.total - self._received} chunks are missing again"
        )

    def discard(self) -> None:
        """Stop and delete everything received."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        for name in ("_data_fd", "_log_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def __enter__(self) -> ChunkAssembler:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---------------------------------------------------------------- internals
    @property
    def _data_path(self) -> Path:
        return self.folder / "data"

    def _open(self, verify_on_resume: bool) -> None:
        self._data_fd = self._log_fd = -1
        meta = json.dumps(self.artifact.model_dump(mode="json"), sort_keys=True)
        meta_path = self.folder / "meta.json"
        files = [meta_path, self._data_path, self.folder / "chunks.log"]
        resumable = (
            self.folder.is_dir()
            and not any(f.is_symlink() for f in files)
            and all(f.is_file() for f in files)
            and meta_path.read_text(encoding="utf-8") == meta
        )
        if not resumable:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder.mkdir(mode=0o755)
            (self.folder / "chunks.log").touch()
            meta_path.write_text(meta, encoding="utf-8")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
        self._data_fd = os.open(self._data_path, flags, 0o644)
        os.ftruncate(self._data_fd, self.artifact.size)
        if resumable:
            self._load_log(verify_on_resume)
        self._log_fd = os.open(self.folder / "chunks.log", os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)

    def _load_log(self, verify: bool) -> None:
        """Replay the log; with `verify`, keep only chunks whose bytes on disk still match."""
        kept: list[tuple[int, bytes]] = []
        rewrite = False
        with open(self.folder / "chunks.log", "rb") as log:
            while record := log.read(_RECORD.size):
                if len(record) < _RECORD.size:  # a record cut short by a crash
                    rewrite = True
                    break
                index, digest = _RECORD.unpack(record)
                if index >= self.total or self._have[index]:
                    rewrite = True
                    continue
                if verify and not self._chunk_on_disk_matches(index, digest):
                    rewrite = True
                    continue
                self._have[index] = 1
                kept.append((index, digest))
        self._received = len(kept)
        if rewrite:
            self._rewrite_log(kept)

    def _chunk_on_disk_matches(self, index: int, digest: bytes) -> bool:
        length = self.artifact.chunk_length(index)
        data = os.pread(self._data_fd, length, index * self._source.chunk_size)
        return hashlib.sha256(data).digest() == digest

    def _drop_bad_chunks(self) -> int:
        kept: list[tuple[int, bytes]] = []
        with open(self.folder / "chunks.log", "rb") as log:
            while len(record := log.read(_RECORD.size)) == _RECORD.size:
                kept.append(_RECORD.unpack(record))
        good = [(i, d) for i, d in kept if self._chunk_on_disk_matches(i, d)]
        self._have = bytearray(self.total)
        for index, _ in good:
            self._have[index] = 1
        self._received = len(good)
        self._rewrite_log(good)
        return len(kept) - len(good)

    def _reset_progress(self) -> None:
        self._have = bytearray(self.total)
        self._received = 0
        self._rewrite_log([])

    def _rewrite_log(self, records: list[tuple[int, bytes]]) -> None:
        path = self.folder / "chunks.log"
        temp = self.folder / "chunks.log.tmp"
        with open(temp, "wb") as file:
            for index, digest in records:
                file.write(_RECORD.pack(index, digest))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        if self._log_fd >= 0:
            os.close(self._log_fd)
            self._log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
