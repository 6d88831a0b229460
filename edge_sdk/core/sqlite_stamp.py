"""Whether another process wrote a SQLite file in WAL mode, without opening it."""

from __future__ import annotations

from pathlib import Path

Stamp = tuple[object, ...]


def sqlite_stamp(path: Path) -> Stamp:
    """Size and modification time of the file and its WAL: any committed write changes one of them."""
    stamps: list[object] = []
    for each in (path, path.with_name(path.name + "-wal")):
        try:
            status = each.stat()
            stamps.append((status.st_mtime_ns, status.st_size))
        except FileNotFoundError:
            stamps.append(None)
    return tuple(stamps)
