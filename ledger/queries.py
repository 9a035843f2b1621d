"""Compliance queries: balances, a user's history, releases, denials, exports.

Each function runs in the caller's transaction and returns plain rows with
exact amounts (`fractions.Fraction`); `export` writes a table for auditors
with exact amounts as integer quanta in text columns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger import storage, wevent_budget
from ledger.accounting import Run, max_window
from ledger.amounts import UNITS_PER_EPSILON, from_units
from schemas.errors import ParameterError


def _dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The rows of an executed query as dicts."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def balances(con: duckdb.DuckDBPyConnection, domain: str | None) -> list[dict[str, Any]]:
    """Per account: user_id, domain, stream_id, notion, cap, spent, remaining, units, state."""
    out = _dicts(con.execute(
        "SELECT a.user_id, a.domain, a.stream_id, d.notion, a.cap, a.spent, "
        "d.units_label AS units FROM accounts a JOIN domains d ON d.domain = a.domain "
        "WHERE ? IS NULL OR a.domain = ? ORDER BY a.domain, a.user_id, a.stream_id",
        [domain, domain]))
    for r in out:
        cap, spent = int(r["cap"]), int(r["spent"])
        r["cap"], r["spent"], r["remaining"] = (from_units(cap), from_units(spent),
                                                from_units(cap - spent))
        r["state"] = account_state(cap, spent)
    return [{k: r[k] for k in ("user_id", "domain", "stream_id", "notion", "cap", "spent",
                               "remaining", "units", "state")} for r in out]


def account_state(cap: int, spent: int) -> str:
    """``above a lowered cap`` (admits nothing), ``near cap`` (>= 90% spent) or ``ok``."""
    if spent > cap:
        return "above a lowered cap"
    if cap == 0 or 10 * spent >= 9 * cap:
        return "near cap"
    return "ok"


def near_cap_users(con: duckdb.DuckDBPyConnection, release_id: str, domain: str) -> int:
    """How many users charged by `release_id` now have an account of `domain` near its cap.

    Near: the `account_state` rule (>= 90% spent, a zero cap included; above a
    lowered cap not counted). A count only: events and logs carry no user id.
    """
    row = con.execute(
        "SELECT count(DISTINCT a.user_id) FROM accounts a WHERE a.domain = ? "
        "AND a.spent <= a.cap AND (a.cap = 0 OR 10 * a.spent >= 9 * a.cap) "
        "AND a.user_id IN (SELECT user_id FROM entries WHERE release_id = ? AND domain = ? "
        "AND kind = 'reserve')", [domain, release_id, domain]).fetchone()
    return int(row[0]) if row else 0


def history(con: duckdb.DuckDBPyConnection, user_id: str, domain: str | None
            ) -> list[dict[str, Any]]:
    """Every entry of one user in seq order, amounts as exact Fractions."""
    out = _dicts(con.execute(
        "SELECT seq, entry_id, created_at, release_id, domain, step, stream_id, kind, "
        "notion, amount, balance_after, cap, mechanism, parameters, reason, actor "
        "FROM entries WHERE user_id = ? AND (? IS NULL OR domain = ?) ORDER BY seq",
        [user_id, domain, domain]))
    for r in out:
        for c in ("amount", "balance_after", "cap"):
            r[c] = None if r[c] is None else from_units(int(r[c]))
    return out


def releases(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every release: id, state, admitted/denied user counts, net spent, seq range."""
    out = _dicts(con.execute(
        "SELECT r.release_id, r.state, r.created_at, r.updated_at, "
        "count(DISTINCT e.user_id) FILTER (WHERE e.kind = 'reserve') AS users_admitted, "
        "count(DISTINCT e.user_id) FILTER (WHERE e.kind = 'deny') AS users_denied, "
        "CAST(coalesce(sum(CASE e.kind WHEN 'reserve' THEN e.amount WHEN 'refund' THEN "
        "-e.amount WHEN 'close' THEN -e.amount ELSE 0 END), 0) AS VARCHAR) AS net_quanta, "
        "min(e.seq) AS first_seq, max(e.seq) AS last_seq "
        "FROM releases r LEFT JOIN entries e ON e.release_id = r.release_id "
        "GROUP BY ALL ORDER BY r.created_at, r.release_id"))
    for r in out:
        r["net_spent"] = from_units(int(r.pop("net_quanta")))
    return out


def denials(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every denial: seq, time, release, user, domain, step, stream, requested, reason."""
    out = _dicts(con.execute(
        "SELECT seq, created_at, release_id, user_id, domain, step, stream_id, notion, "
        "amount, reason FROM entries WHERE kind = 'deny' ORDER BY seq"))
    for r in out:
        r["requested"] = from_units(int(r.pop("amount")))
    return out


def release_charges(con: duckdb.DuckDBPyConnection, release_id: str) -> list[dict[str, Any]]:
    """What one release charged each account: its net amount, exact.

    One row per (user_id, domain, stream_id) the release reserved for: notion,
    ``items`` (curves or streams reserved), ``net`` = reserved - refunded -
    closed (ε, ρ, or for w-event the sum over all steps), and for w-event
    ``window`` = the release's largest net sum over w consecutive steps of the
    stream, and in a per-user domain (`ledger.wevent_budget`) ``user_window`` =
    the same over all of the user's streams (what the user was charged per
    window; None elsewhere). Denied requests charge nothing and are not listed.
    """
    rows = _dicts(con.execute(
        "SELECT e.user_id, e.domain, e.stream_id, any_value(e.notion) AS notion, "
        "count(*) FILTER (WHERE e.kind = 'reserve') AS items, "
        "CAST(sum(CASE e.kind WHEN 'reserve' THEN 1 ELSE -1 END * e.amount) AS VARCHAR) "
        "AS net_quanta, any_value(d.w) AS w "
        "FROM entries e JOIN domains d ON d.domain = e.domain "
        "WHERE e.release_id = ? AND e.kind IN ('reserve', 'refund', 'close') "
        "AND e.user_id <> '' GROUP BY ALL ORDER BY e.domain, e.user_id, e.stream_id",
        [release_id]))
    runs: dict[tuple[str, str, str], list[Run]] = {}
    if any(r["notion"] == "wevent" for r in rows):
        for user, dom, stream, start, stop, q in con.execute(
                "SELECT e.user_id, e.domain, e.stream_id, s.run_start, s.run_stop, "
                "CAST(CASE e.kind WHEN 'reserve' THEN 1 ELSE -1 END * s.amount AS VARCHAR) "
                "FROM entries e JOIN step_runs s ON s.seq = e.seq WHERE e.release_id = ? "
                "AND e.kind IN ('reserve', 'refund', 'close')", [release_id]).fetchall():
            runs.setdefault((user, dom, stream), []).append((int(start), int(stop), int(q)))
    per_user = wevent_budget.per_user_domains(storage.load_domains(con)) if runs else frozenset()
    user_runs: dict[tuple[str, str], list[Run]] = {}
    for (user, dom, _), rs in runs.items():
        if dom in per_user:
            user_runs.setdefault((user, dom), []).extend(rs)
    for r in rows:
        r["net"] = from_units(int(r.pop("net_quanta")))
        w = r.pop("w")
        r["window"] = r["user_window"] = None
        if r["notion"] == "wevent" and w:
            acc = runs.get((r["user_id"], r["domain"], r["stream_id"]), [])
            r["window"] = from_units(max_window(acc, int(w))[0])
            if r["domain"] in per_user:  # the user's windows cover all of its streams
                mine = user_runs[(r["user_id"], r["domain"])]
                r["user_window"] = from_units(max_window(mine, int(w))[0])
    return rows


EXPORTS = {
    "entries": (
        "SELECT e.seq, e.entry_id, e.prev_hash, e.hash, e.created_at, e.actor, "  # noqa: S608
        "e.release_id, e.user_id, e.domain, e.step, e.stream_id, e.kind, e.notion, "
        "CAST(e.amount AS VARCHAR) AS amount_quanta, "
        f"CAST(e.amount AS DOUBLE) / {float(UNITS_PER_EPSILON)!r} AS amount, "
        "CAST(e.cap AS VARCHAR) AS cap_quanta, "
        "CAST(e.balance_after AS VARCHAR) AS balance_after_quanta, "
        "e.mechanism, e.parameters, e.detail, e.reason, e.flow_run_id, "
        "e.input_fingerprint, (SELECT string_agg(r.run_start || ':' || r.run_stop || ':' "
        "|| CAST(r.amount AS VARCHAR), ';' ORDER BY r.run_start) FROM step_runs r "
        "WHERE r.seq = e.seq) AS step_runs FROM entries e ORDER BY e.seq"
    ),
    "balances": (
        "SELECT user_id, domain, stream_id, notion, cap, spent, remaining, units, "
        "CAST(cap_quanta AS VARCHAR) AS cap_quanta, "
        "CAST(spent_quanta AS VARCHAR) AS spent_quanta FROM balances "
        "ORDER BY domain, user_id, stream_id"
    ),
    "releases": "SELECT * FROM release_summary ORDER BY first_seq",
    "denials": "SELECT * FROM denials ORDER BY seq",
}
"""The tables `export` writes, by name."""


def check_export(fmt: str, what: str) -> None:
    """Refuse an unknown export format or table.

    Raises:
        ParameterError: naming the allowed values.
    """
    if fmt not in ("csv", "parquet", "json"):
        raise ParameterError("export format must be csv, parquet or json")
    if what not in EXPORTS:
        raise ParameterError(f"export table must be one of {', '.join(EXPORTS)}")


def export_table(con: duckdb.DuckDBPyConnection, what: str) -> pa.Table:
    """One export table as Arrow."""
    return con.sql(EXPORTS[what]).to_arrow_table()


def write_table(tbl: pa.Table, path: str | os.PathLike[str], fmt: str) -> int:
    """Write an export table as csv, parquet or json (a JSON array); return the row count."""
    out = Path(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(tbl, out)
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(tbl, out)
    else:
        out.write_text(json.dumps(tbl.to_pylist(), default=str, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    return tbl.num_rows
