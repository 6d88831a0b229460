"""DiskSpool on its own: order, persistence across reopening, bounded with counted eviction, corrupt files
moved aside, one user per file (no broker needed)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from edge_sdk.mqtt import DiskSpool, QueueFullError, SpooledMessage, SpoolError, SpoolFullError


def message(index: int, size: int = 10, qos: int = 1) -> SpooledMessage:
    return SpooledMessage(topic=f"t/{index}", payload=str(index).encode().ljust(size, b"."), qos=qos)


def indices(rows: list[SpooledMessage]) -> list[int]:
    return [int(row.topic.split("/")[1]) for row in rows]


def test_disk_spool_when_messages_are_appended_reads_them_back_in_order_with_all_fields(tmp_path: Path) -> None:
    # given
    spool = DiskSpool(tmp_path / "spool.db")
    detailed = SpooledMessage(
        topic="edge/a/resp", payload=b"\x00\xff", qos=2, retain=True, response_topic="r", correlation_data=b"id"
    )

    # when
    ids = [spool.append(message(i)) for i in range(5)] + [spool.append(detailed)]
    rows = spool.read_after(0, 100)
    later = spool.read_after(ids[2], 2)
    spool.close()

    # then
    assert ids == sorted(ids) and len(set(ids)) == 6, "ids increase with every append"
    assert indices(rows[:5]) == [0, 1, 2, 3, 4], "messages come back oldest first"
    last = rows[5]
    assert (last.topic, last.payload, last.qos, last.retain, last.response_topic, last.correlation_data) == (
        "edge/a/resp",
        b"\x00\xff",
        2,
        True,
        "r",
        b"id",
    ), "every field of a message is kept"
    assert indices(later) == [3, 4], "read_after continues after a given id, up to the limit"


def test_disk_spool_when_reopened_keeps_messages_order_and_never_reuses_ids(tmp_path: Path) -> None:
    # given a spool whose newest messages were delivered and removed before the process ended
    path = tmp_path / "spool.db"
    with DiskSpool(path) as spool:
        ids = [spool.append(message(i)) for i in range(10)]
        spool.remove(ids[5:])

    # when the next process opens it and spools more
    with DiskSpool(path) as reopened:
        waiting = len(reopened)
        new_id = reopened.append(message(10))
        rows = reopened.read_after(0, 100)

    # then
    assert waiting == 5, "undelivered messages survive the restart"
    assert new_id > ids[-1], "ids are never reused, so order holds across restarts"
    assert indices(rows) == [0, 1, 2, 3, 4, 10], "old messages come first, then the new one"


def test_disk_spool_when_max_messages_is_reached_evicts_the_oldest_and_counts_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given
    path = tmp_path / "spool.db"
    spool = DiskSpool(path, max_messages=10)

    # when
    with caplog.at_level(logging.WARNING, logger="edge_sdk.mqtt.spool"):
        for i in range(25):
            spool.append(message(i))
    stats = spool.stats()
    rows = spool.read_after(0, 100)
    spool.close()
    reopened_evicted = DiskSpool(path).evicted

    # then
    assert indices(rows) == list(range(15, 25)), "the newest max_messages are kept"
    assert stats.messages == 10 and stats.evicted == 15, "every evicted message is counted"
    assert reopened_evicted == 15, "the eviction count is kept in the file across restarts"
    warnings = [r for r in caplog.records if "evicting the oldest" in r.getMessage()]
    assert len(warnings) == 1, "one warning per run of evictions, not one per message"


def test_disk_spool_when_max_bytes_is_reached_evicts_by_size(tmp_path: Path) -> None:
    # given 100-byte payloads (plus their topics) and room for about 5 of them
    spool = DiskSpool(tmp_path / "spool.db", max_bytes=550)

    # when
    for i in range(12):
        spool.append(message(i, size=100))
    stats = spool.stats()
    kept = indices(spool.read_after(0, 100))

    # then
    assert stats.bytes <= 550, "the byte bound holds"
    assert kept == list(range(12 - len(kept), 12)) and len(kept) == 5, "the newest messages that fit are kept"
    assert stats.evicted == 7, "evictions by size are counted too"


def test_disk_spool_when_one_message_is_larger_than_max_bytes_refuses_it_as_queue_full(tmp_path: Path) -> None:
    # given
    spool = DiskSpool(tmp_path / "spool.db", max_bytes=1024)
    spool.append(message(0))

    # when
    with pytest.raises(SpoolFullError) as caught:
        spool.append(message(1, size=2000))

    # then
    assert isinstance(caught.value, QueueFullError), "callers that handle a full queue handle this too"
    assert "max_bytes" in str(caught.value), "the message says which bound was hit"
    assert len(spool) == 1, "nothing was evicted for a message that could never fit"


def test_disk_spool_when_the_file_is_garbage_moves_it_aside_logs_an_error_and_starts_fresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a spool file overwritten with something that is not a database
    path = tmp_path / "spool.db"
    garbage = b"this is not a database " * 400
    path.write_bytes(garbage)

    # when
    with caplog.at_level(logging.ERROR, logger="edge_sdk.mqtt.spool"):
        spool = DiskSpool(path)
    spool.append(message(1))

    # then
    assert spool.quarantined is not None and spool.quarantined.read_bytes() == garbage, (
        "the bad file is moved aside intact, not deleted"
    )
    assert spool.quarantined.name.startswith("spool.db.corrupt-"), "its new name says what happened"
    assert spool.stats().quarantined == spool.quarantined, "the stats report where it went"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("corrupt" in text and str(spool.quarantined) in text for text in errors), (
        "one error line names the problem and where the file went"
    )
    assert indices(spool.read_after(0, 10)) == [1], "the fresh spool works"


def test_disk_spool_when_pages_are_damaged_moves_the_file_aside(tmp_path: Path) -> None:
    # given a real spool with many messages whose middle pages are overwritten
    path = tmp_path / "spool.db"
    with DiskSpool(path) as spool:
        for i in range(400):
            spool.append(message(i, size=400))
    checkpoint = sqlite3.connect(path)
    checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    checkpoint.close()
    data = bytearray(path.read_bytes())
    data[4096 * 4 : 4096 * 12] = b"\xa5" * (4096 * 8)
    path.write_bytes(bytes(data))

    # when
    spool = DiskSpool(path)

    # then
    assert spool.quarantined is not None and spool.quarantined.exists(), "the damaged file is kept for inspection"
    assert len(spool) == 0, "the client goes on with an empty spool"


def test_disk_spool_when_a_second_user_opens_the_same_file_refuses_with_spool_error(tmp_path: Path) -> None:
    # given
    path = tmp_path / "spool.db"
    first = DiskSpool(path)

    # when
    with pytest.raises(SpoolError) as caught:
        DiskSpool(path)
    first.close()
    again = DiskSpool(path)
    again.close()

    # then
    assert "in use by another process" in str(caught.value), "the message says why"


def test_disk_spool_when_everything_is_removed_gives_the_disk_space_back(tmp_path: Path) -> None:
    # given 2 MB waiting
    spool = DiskSpool(tmp_path / "spool.db")
    ids = [spool.append(message(i, size=1000)) for i in range(2000)]
    full = spool.stats().file_bytes

    # when
    for start in range(0, len(ids), 100):
        spool.remove(ids[start : start + 100])
    empty = spool.stats()

    # then
    assert full > 2_000_000, "the spool's file holds the messages"
    assert empty.messages == 0 and empty.bytes == 0, "nothing is waiting"
    assert empty.file_bytes < full / 4, "an empty spool shrinks on disk"
