"""Chunked transfer: any order, duplicates, restarts and corrupted chunks, and a fuzzed chunk decoder."""

from __future__ import annotations

import contextlib
import hashlib
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.core.errors import ArtifactHashError, ArtifactPathError, ChunkCorruptError, ChunkError
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.wire.chunks import (
    MAX_CHUNK_MESSAGE_BYTES,
    ChunkAssembler,
    ChunkData,
    ChunkOutcome,
    decode_chunk,
    encode_chunk,
    inline_artifact,
    iter_chunks,
)
from edge_sdk.fleet.wire.manifest import Artifact, DeploymentManifest

from .conftest import NOW, write_random_file

CHUNK = 1000


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    (tmp_path / "sender").mkdir()
    return write_random_file(tmp_path / "sender" / "detector.onnx", 10 * CHUNK + 123)


@pytest.fixture
def artifact(model_file: Path) -> Artifact:
    return inline_artifact(model_file, "model", CHUNK)


@pytest.fixture
def chunks(model_file: Path) -> list[ChunkData]:
    return list(iter_chunks(model_file, CHUNK))


@pytest.fixture
def transfer(tmp_path: Path) -> Path:
    return tmp_path / "receiver"


def test_iter_chunks_when_reading_a_file_yields_numbered_chunks_that_rebuild_it(
    model_file: Path, chunks: list[ChunkData]
) -> None:
    assert [index for index, _, _ in chunks] == list(range(11))
    assert [len(data) for _, data, _ in chunks] == [CHUNK] * 10 + [123], "only the last chunk is short"
    assert b"".join(data for _, data, _ in chunks) == model_file.read_bytes()


def test_inline_artifact_when_describing_a_file_counts_its_chunks(artifact: Artifact, model_file: Path) -> None:
    assert (artifact.name, artifact.size) == ("detector.onnx", model_file.stat().st_size)
    assert artifact.source.type == "inline" and artifact.source.chunk_count == 11


def test_assembler_when_chunks_arrive_out_of_order_assembles_the_file(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData], model_file: Path
) -> None:
    shuffled = chunks[:]
    random.Random(7).shuffle(shuffled)
    with ChunkAssembler(transfer, artifact) as assembler:
        for index, data, digest in shuffled:
            assert assembler.accept(index, data, digest) is ChunkOutcome.ACCEPTED
        assert assembler.complete and assembler.missing() == []
        path = assembler.finish()
    assert path.read_bytes() == model_file.read_bytes()


def test_assembler_when_a_chunk_comes_twice_ignores_the_duplicate(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData]
) -> None:
    with ChunkAssembler(transfer, artifact) as assembler:
        assembler.accept(*chunks[3])
        assert assembler.accept(*chunks[3]) is ChunkOutcome.DUPLICATE
        assert assembler.received == 1


def test_assembler_when_interrupted_resumes_and_reports_what_is_missing(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData], model_file: Path
) -> None:
    # given: a device that got every other chunk, then restarted
    with ChunkAssembler(transfer, artifact) as first_run:
        for chunk in chunks[::2]:
            first_run.accept(*chunk)
    # when
    with ChunkAssembler(transfer, artifact) as second_run:
        # then
        assert second_run.missing() == [1, 3, 5, 7, 9]
        assert second_run.missing_ranges() == [(1, 1), (3, 3), (5, 5), (7, 7), (9, 9)]
        for index in second_run.missing():
            second_run.accept(*chunks[index])
        assert second_run.finish().read_bytes() == model_file.read_bytes()


def test_assembler_when_a_logged_chunk_did_not_reach_the_disk_asks_for_it_again(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData]
) -> None:
    with ChunkAssembler(transfer, artifact) as first_run:
        for chunk in chunks[:4]:
            first_run.accept(*chunk)
    data_file = transfer / "detector.onnx" / "data"
    with open(data_file, "r+b") as file:  # power loss: chunk 2's bytes never hit the disk
        file.seek(2 * CHUNK)
        file.write(bytes(CHUNK))
    with ChunkAssembler(transfer, artifact) as second_run:
        assert second_run.missing(limit=3) == [2, 4, 5]


def test_assembler_when_the_log_ends_in_a_half_written_record_resumes(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData]
) -> None:
    with ChunkAssembler(transfer, artifact) as first_run:
        for chunk in chunks[:3]:
            first_run.accept(*chunk)
    log = transfer / "detector.onnx" / "chunks.log"
    log.write_bytes(log.read_bytes()[:-10])
    with ChunkAssembler(transfer, artifact) as second_run:
        assert second_run.received == 2 and second_run.missing(limit=1) == [2]
        second_run.accept(*chunks[2])
    with ChunkAssembler(transfer, artifact) as third_run:
        assert third_run.received == 3


def test_assembler_when_a_chunk_is_corrupted_refuses_it_and_asks_for_it_again(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData], model_file: Path
) -> None:
    with ChunkAssembler(transfer, artifact) as assembler:
        index, data, digest = chunks[4]
        with pytest.raises(ChunkCorruptError, match=r"chunk 4 of 'detector\.onnx': expected sha256") as caught:
            assembler.accept(index, data[:-1] + bytes([data[-1] ^ 1]), digest)
        assert caught.value.index == 4, "the error says which chunk to ask for again"
        assert 4 in assembler.missing()
        for chunk in chunks:
            assembler.accept(*chunk)
        assert assembler.finish().read_bytes() == model_file.read_bytes()


def test_assembler_when_a_chunk_is_truncated_refuses_it(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData]
) -> None:
    with ChunkAssembler(transfer, artifact) as assembler:
        index, data, _ = chunks[0]
        short = data[:10]
        with pytest.raises(ChunkCorruptError, match="expected 1000 bytes, got 10"):
            assembler.accept(index, short, hashlib.sha256(short).hexdigest())
        assert assembler.missing(limit=1) == [0]


@pytest.mark.parametrize("index", [-1, 11, 2**40])
def test_assembler_when_the_index_is_out_of_range_refuses(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData], index: int
) -> None:
    with ChunkAssembler(transfer, artifact) as assembler, pytest.raises(ChunkError, match=r"expected 0\.\.10"):
        assembler.accept(index, chunks[0][1], chunks[0][2])


def test_assembler_when_the_sender_sends_a_wrong_file_with_matching_chunk_hashes_refuses_and_starts_over(
    transfer: Path, artifact: Artifact, tmp_path: Path
) -> None:
    impostor = write_random_file(tmp_path / "impostor", artifact.size)
    with ChunkAssembler(transfer, artifact) as assembler:
        for chunk in iter_chunks(impostor, CHUNK):
            assembler.accept(*chunk)
        with pytest.raises(ArtifactHashError, match=f"expected sha256 {artifact.sha256}"):
            assembler.finish()
        assert assembler.received == 0, "no chunk can be trusted: all are asked for again"


def test_assembler_when_finished_early_says_how_many_chunks_are_missing(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData]
) -> None:
    with ChunkAssembler(transfer, artifact) as assembler:
        assembler.accept(*chunks[0])
        with pytest.raises(ChunkError, match=r"incomplete: 10 of 11 chunks missing \(first: 1, 2, 3"):
            assembler.finish()


def test_assembler_when_the_artifact_changed_under_the_same_name_starts_over(
    transfer: Path, artifact: Artifact, chunks: list[ChunkData], tmp_path: Path
) -> None:
    with ChunkAssembler(transfer, artifact) as first:
        first.accept(*chunks[0])
    other = inline_artifact(write_random_file(tmp_path / "detector.onnx", 5000), "model", CHUNK)
    with ChunkAssembler(transfer, other) as second:
        assert second.received == 0 and second.total == 5


def test_assembler_when_the_artifact_is_empty_is_complete_at_once(transfer: Path, tmp_path: Path) -> None:
    empty = inline_artifact(write_random_file(tmp_path / "empty.txt", 0), "file", CHUNK)
    assert list(iter_chunks(tmp_path / "empty.txt", CHUNK)) == []
    with ChunkAssembler(transfer, empty) as assembler:
        assert assembler.complete
        assert assembler.finish().read_bytes() == b""


def test_assembler_when_the_artifact_is_downloaded_from_a_url_refuses(transfer: Path, artifact: Artifact) -> None:
    url_artifact = Artifact.model_validate(
        {**artifact.model_dump(), "source": {"type": "url", "url": "https://example.com/x"}}
    )
    with pytest.raises(ChunkError, match="is not sent inline"):
        ChunkAssembler(transfer, url_artifact)


def test_assembler_when_its_folder_is_a_planted_symlink_refuses(
    transfer: Path, artifact: Artifact, tmp_path: Path
) -> None:
    transfer.mkdir()
    (transfer / "detector.onnx").symlink_to(tmp_path)
    with pytest.raises(ArtifactPathError, match="got a symlink"):
        ChunkAssembler(transfer, artifact)


def test_assembled_file_when_staged_and_activated_becomes_the_current_version(
    tmp_path: Path, artifact: Artifact, chunks: list[ChunkData], model_file: Path
) -> None:
    store = ArtifactStore(tmp_path / "store")
    manifest = DeploymentManifest(
        deployment_id="d", version=1, created_at=NOW, expires_at=NOW.replace(year=2027), artifacts=[artifact]
    )
    with ChunkAssembler(store.transfer_dir(1), artifact) as assembler:
        for chunk in reversed(chunks):
            assembler.accept_chunk(decode_chunk(encode_chunk(1, artifact.name, chunk[0], len(chunks), chunk[1])))
        assembled = assembler.finish()
    with store.stage(manifest) as staging:
        staging.add_file(artifact.name, assembled, move=True)
        staging.commit()
    store.activate(1)
    assert store.artifact_path("detector.onnx").read_bytes() == model_file.read_bytes()
    assert not (store.root / "transfers" / "1").exists(), "the transfer folder goes once the version is active"


# ---------------------------------------------------------------- the chunk message


def test_decode_chunk_when_encoded_gives_the_same_chunk_back() -> None:
    chunk = decode_chunk(encode_chunk(42, "detector.onnx", 3, 11, b"payload"))
    assert (chunk.version, chunk.artifact, chunk.index, chunk.count, chunk.data) == (
        42,
        "detector.onnx",
        3,
        11,
        b"payload",
    )
    assert chunk.sha256 == hashlib.sha256(b"payload").hexdigest()


def test_assembler_accept_chunk_when_the_chunk_belongs_to_another_artifact_refuses(
    transfer: Path, artifact: Artifact
) -> None:
    chunk = decode_chunk(encode_chunk(1, "other.onnx", 0, 11, b"x"))
    with ChunkAssembler(transfer, artifact) as assembler, pytest.raises(ChunkError, match="does not belong"):
        assembler.accept_chunk(chunk)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "expected a header of 54 bytes"),
        (b"XXXX" + encode_chunk(1, "a", 0, 1, b"")[4:], "expected magic"),
        (encode_chunk(1, "a", 0, 1, b"")[:4] + b"\x02" + encode_chunk(1, "a", 0, 1, b"")[5:], "expected format 1"),
        (encode_chunk(1, "a", 5, 5, b""), "index 5 is out of range for 5 chunks"),
        (encode_chunk(1, "abc", 0, 1, b"")[:-1], "runs past the end"),
        (encode_chunk(1, "abc", 0, 1, b"").replace(b"abc", b"../"), "refused"),
        (encode_chunk(1, "abc", 0, 1, b"").replace(b"abc", b"\xff\xfe\xfd"), "refused"),
        (encode_chunk(1, "a", 0, 1, b"x" * 100), "expected at most 80 bytes"),
    ],
)
def test_decode_chunk_when_the_message_is_malformed_raises_chunk_error(payload: bytes, fragment: str) -> None:
    with pytest.raises(ChunkError) as caught:
        decode_chunk(payload, max_bytes=80 if b"x" * 100 in payload else MAX_CHUNK_MESSAGE_BYTES)
    assert fragment in str(caught.value), caught.value


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_decode_chunk_when_given_random_bytes_raises_only_chunk_errors(payload: bytes) -> None:
    with contextlib.suppress(ChunkError):
        decode_chunk(payload)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_decode_chunk_when_a_valid_header_is_mutated_raises_only_chunk_errors(data: st.DataObject) -> None:
    payload = bytearray(encode_chunk(7, "detector.onnx", 2, 11, b"some bytes"))
    for _ in range(data.draw(st.integers(1, 3))):
        payload[data.draw(st.integers(0, 70))] = data.draw(st.integers(0, 255))
    try:
        chunk = decode_chunk(bytes(payload))
    except ChunkError:
        return
    assert 0 <= chunk.index < chunk.count and "/" not in chunk.artifact
