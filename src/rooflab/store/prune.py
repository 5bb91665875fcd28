"""`rooflab store prune --keep-runs N` (docs/compare.md): the raw samples of old runs leave the
store; their summaries stay. Per machine, backend, kind and sweep (a sweep, workload, scenario
or the ceilings), the samples of the N newest runs are kept and the older runs' are deleted.
Every run keeps its rows in every other table, so the `latest_*` views, `history` (a point's
median and quartiles) and the stored `comparisons` read as before; `rooflab compare` against a
pruned run judges from the summaries (method `summary`). The run folders under results/ are not
touched: `rooflab store rebuild` brings every sample back."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rooflab.store.connection import DEFAULT_DB, StoreError, _open


@dataclass(frozen=True)
class Pruned:
    runs: int  # runs whose samples were deleted
    samples: int  # sample rows deleted
    bytes_before: int  # the database file, before and after (compacted)
    bytes_after: int


def prune_samples(db_path: str | Path = DEFAULT_DB, keep_runs: int = 2) -> Pruned:
    """Delete the samples of all but the `keep_runs` newest runs of each series (>= 2, so each
    key's newest run and the one before it keep theirs for `rooflab compare`)."""
    if isinstance(keep_runs, bool) or not isinstance(keep_runs, int) or keep_runs < 2:
        raise StoreError(f"--keep-runs must be an integer >= 2, got {keep_runs!r}")
    db_path = Path(db_path)
    if not db_path.is_file():
        raise StoreError(f"no store at {db_path}")
    before = db_path.stat().st_size
    compact = db_path.with_name(f".{db_path.name}.prune-{os.getpid()}")
    connection = _open(db_path, read_only=False, lock_timeout_s=10.0, action="prune")
    try:
        old = (
            "SELECT run_id FROM runs QUALIFY row_number() OVER (PARTITION BY machine_id, "
            "backend, kind, coalesce(sweep, '') ORDER BY started_at DESC, run_id DESC) > ?"
        )
        connection.execute("BEGIN TRANSACTION")
        try:
            runs, samples = connection.execute(
                f"SELECT count(DISTINCT run_id), count(*) FROM samples WHERE run_id IN ({old})",
                [keep_runs],
            ).fetchone()
            connection.execute(f"DELETE FROM samples WHERE run_id IN ({old})", [keep_runs])
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("CHECKPOINT")
        # DuckDB reuses freed blocks but never shrinks its file: copy the store into a new file
        # (tables, views) and put it in place of the old one, as `rebuild` does
        compact.unlink(missing_ok=True)
        name = connection.execute("SELECT current_database()").fetchone()[0]
        connection.execute(f"ATTACH '{compact}' AS rooflab_compact")
        connection.execute(f'COPY FROM DATABASE "{name}" TO rooflab_compact')
        connection.execute("DETACH rooflab_compact")
    except BaseException:
        connection.close()
        compact.unlink(missing_ok=True)
        raise
    connection.close()
    os.replace(compact, db_path)
    return Pruned(int(runs), int(samples), before, db_path.stat().st_size)
