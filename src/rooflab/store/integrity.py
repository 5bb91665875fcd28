"""Whether the store can be read back whole, and how a write of it fails in one line.

`ingest` and `rebuild` say they succeeded only after `read_back` has read every column of every
table of the file they wrote: DuckDB checks each block's checksum as it reads the block, so a
damaged block (a disk that flipped bits, a copy cut short) is found here, named with its table,
rather than by the next query. `store_failures` turns what can stop a write of the store into one
line naming the file: no space left on the device (records.DiskFull, the same words as every other
writer's), or a block that cannot be read back (StoreDamaged, naming the table and the repair).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rooflab.records import disk_full, out_of_space
from rooflab.store.connection import StoreError, _one_line, _open

# DuckDB's words when a block read from the file does not match its checksum.
DAMAGED_BLOCK = "Corrupt database file"
REPAIR = (
    "the kept run folders are not damaged: `rooflab store rebuild` recreates the store from them"
)


class StoreDamaged(StoreError):
    """A table of the store that cannot be read back in full; the message names the file, the
    table and the repair (`rooflab store rebuild`)."""


def quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def read_back(db_path: str | Path, *, lock_timeout_s: float = 10.0) -> int:
    """Read every column of every table of the store in full (a hash of each row, so no column
    is skipped and nothing is kept in memory), on a connection of its own; StoreDamaged naming the
    file and the first table that cannot be read. The number of tables read."""
    import duckdb

    def reads(names: list[str]) -> str:
        return " UNION ALL ".join(
            f"SELECT count(*), bit_xor(hash(*COLUMNS(*))) FROM {quoted(name)}" for name in names
        )

    db_path = Path(db_path)
    connection = _open(
        db_path, read_only=True, lock_timeout_s=lock_timeout_s, action="the check", locked=True
    )
    what = "its list of tables"
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT table_name FROM duckdb_tables() "
                "WHERE database_name = current_database() AND schema_name = 'main' ORDER BY 1"
            ).fetchall()
        ]
        what = "its tables"
        try:  # every table in one query: one round trip, not one per table
            if tables:
                connection.execute(reads(tables)).fetchall()
        except duckdb.Error:
            for name in tables:  # one at a time, to name the table that cannot be read
                what = f"table {name}"
                connection.execute(reads([name])).fetchall()
            what = "its tables"
            raise
    except duckdb.Error as error:
        raise StoreDamaged(
            f"{db_path}: {what} cannot be read back ({_one_line(error)}); {REPAIR}"
        ) from None
    finally:
        connection.close()
    return len(tables)


@contextlib.contextmanager
def store_failures(
    db_path: str | Path, writing: str, kept: str, *, lock_timeout_s: float = 10.0
) -> Iterator[None]:
    """Around a write of the store (its connection closed inside): a failure for lack of space
    becomes DiskFull naming `db_path` (`writing`, `kept`: what was being written and what stays);
    a block that cannot be read becomes StoreDamaged naming its table (read_back finds it)."""
    import duckdb

    try:
        yield
    except StoreDamaged:
        raise
    except (duckdb.Error, StoreError) as error:
        if out_of_space(error):
            _tidy_after_no_space(Path(db_path))
            raise disk_full(db_path, writing, kept) from None
        if DAMAGED_BLOCK not in str(error):
            raise
        read_back(db_path, lock_timeout_s=lock_timeout_s)  # names the table
        raise StoreDamaged(f"{db_path}: cannot be read ({_one_line(error)}); {REPAIR}") from None


def _tidy_after_no_space(db_path: Path) -> None:
    """What a write of the store that ran out of space leaves beside it, removed where it holds
    nothing: an empty file that was to be a new store (with its empty WAL), or the empty WAL that
    a failed commit leaves (DuckDB removes it itself when the store is opened and closed once
    more). A WAL with rows in it stays: its rows are committed."""
    wal = db_path.with_name(db_path.name + ".wal")
    if db_path.is_file() and db_path.stat().st_size == 0:
        db_path.unlink()
        if wal.is_file() and wal.stat().st_size == 0:
            wal.unlink()
    elif wal.is_file() and wal.stat().st_size == 0:
        with contextlib.suppress(StoreError):
            _open(db_path, read_only=False, lock_timeout_s=0, action="the cleanup").close()
