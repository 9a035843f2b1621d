"""The reserve and deny entries of a ledger, as tests compare them between runs."""

from __future__ import annotations

from pathlib import Path

import duckdb


def reserve_rows(ledger_path: Path) -> list[tuple]:
    """Every reserve/deny entry of the ledger, without its sequence number and time."""
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        return con.execute(
            "SELECT release_id, user_id, step, kind, CAST(amount AS VARCHAR), "
            "CAST(balance_after AS VARCHAR), reason FROM entries "
            "WHERE kind IN ('reserve', 'deny') ORDER BY seq").fetchall()
    finally:
        con.close()
