"""Release rows: state (reserved | settled | closed | failed) and manifest, with keyed MACs.

A release row is created by the first reservation of a release id (or by
`record_release`), moves to ``settled`` when its last reservation is settled
or closed, and to ``closed`` by `Ledger.close`. Every change recomputes the
row's MAC (`schema.seal_release`), so an edit with plain SQL is detected.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from ledger import schema
from ledger.schema import first_row
from schemas.errors import ParameterError


def state(con: duckdb.DuckDBPyConnection, release_id: str) -> str | None:
    """The release's state, or None for an unknown release id."""
    row = first_row(con.execute("SELECT state FROM releases WHERE release_id = ?", [release_id]))
    return None if row is None else str(row[0])


def touch(con: duckdb.DuckDBPyConnection, key: bytes, release_id: str, now: str) -> str | None:
    """The release's state before this call; creates it as ``reserved`` if unknown."""
    before = state(con, release_id)
    if before is None:
        con.execute(
            "INSERT INTO releases VALUES (?, 'reserved', NULL, CAST(? AS TIMESTAMP), "
            "CAST(? AS TIMESTAMP), NULL)",
            [release_id, now, now],
        )
        schema.seal_release(con, key, release_id)
    return before


def mark_settled_if_done(con: duckdb.DuckDBPyConnection, key: bytes, release_id: str,
                         now: str) -> None:
    """Move a ``reserved`` release to ``settled`` once every reservation is settled or closed."""
    row = first_row(con.execute(
        "SELECT count(*) FILTER (WHERE r.kind = 'reserve'), "
        "count(*) FILTER (WHERE r.kind = 'reserve' AND d.seq IS NULL) "
        "FROM entries r LEFT JOIN (SELECT DISTINCT user_id, step, stream_id, 1 AS seq "
        "FROM entries WHERE release_id = ? AND kind IN ('settle', 'close')) d "
        "ON d.user_id = r.user_id AND d.step = r.step AND d.stream_id = r.stream_id "
        "WHERE r.release_id = ?",
        [release_id, release_id],
    ))
    if row and row[0] and row[1] == 0:
        con.execute(
            "UPDATE releases SET state = 'settled', updated_at = CAST(? AS TIMESTAMP) "
            "WHERE release_id = ? AND state = 'reserved'",
            [now, release_id],
        )
        schema.seal_release(con, key, release_id)


def set_state(con: duckdb.DuckDBPyConnection, key: bytes, release_id: str, new_state: str,
              now: str, manifest: str | None = None, with_manifest: bool = False) -> None:
    """Set a release's state (and manifest text if `with_manifest`), resealing the row."""
    if with_manifest:
        con.execute(
            "UPDATE releases SET state = ?, manifest = ?, updated_at = CAST(? AS TIMESTAMP) "
            "WHERE release_id = ?",
            [new_state, manifest, now, release_id],
        )
    else:
        con.execute(
            "UPDATE releases SET state = ?, updated_at = CAST(? AS TIMESTAMP) "
            "WHERE release_id = ?",
            [new_state, now, release_id],
        )
    schema.seal_release(con, key, release_id)


def record(con: duckdb.DuckDBPyConnection, key: bytes, release_id: str, manifest: str,
           new_state: str, now: str) -> None:
    """Store a release's manifest text and state (one of `RELEASE_STATES`), creating the row.

    Raises:
        ParameterError: reopening a closed release.
    """
    before = state(con, release_id)
    if before is None:
        con.execute(
            "INSERT INTO releases VALUES (?, ?, ?, CAST(? AS TIMESTAMP), "
            "CAST(? AS TIMESTAMP), NULL)",
            [release_id, new_state, manifest, now, now],
        )
        schema.seal_release(con, key, release_id)
        return
    if before == "closed" and new_state != "closed":
        raise ParameterError(f"release {release_id!r} is closed and cannot be reopened")
    set_state(con, key, release_id, new_state, now, manifest, with_manifest=True)


def lookup(con: duckdb.DuckDBPyConnection, release_id: str) -> dict[str, Any] | None:
    """A release's record (state, manifest as a dict, timestamps) or None if unknown."""
    row = first_row(con.execute(
        "SELECT release_id, state, manifest, created_at, updated_at FROM releases "
        "WHERE release_id = ?",
        [release_id],
    ))
    if row is None:
        return None
    return {"release_id": row[0], "state": row[1],
            "manifest": json.loads(row[2]) if row[2] else None,
            "created_at": row[3], "updated_at": row[4]}


def entry_range(con: duckdb.DuckDBPyConnection, release_id: str) -> tuple[int, int] | None:
    """(first_seq, last_seq) of a release's entries, or None if it has none."""
    row = first_row(con.execute(
        "SELECT min(seq), max(seq) FROM entries WHERE release_id = ?", [release_id]))
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))
