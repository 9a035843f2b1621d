"""Compliance queries: balances, a user's history, releases, denials, exports.

Each function runs in the caller's transaction and returns plain rows with
exact amounts (`fractions.Fraction`); `export` writes a table for auditors
with exact amounts as integer quanta in text columns.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger import storage, wevent_budget
from ledger.accounting import Run, max_window
from ledger.admission import ABOVE_CAP, DENIED_EARLIER, TOGETHER
from ledger.amounts import UNITS_PER_EPSILON, format_fraction, from_units
from ledger.filters import Filter
from schemas.errors import ParameterError


def _dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The rows of an executed query as dicts."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def unit_of(notion: str, w: int | None) -> str:
    """The unit of a domain's amounts: ``ε``, ``ρ`` or ``ε per window of w steps``."""
    if notion == "wevent":
        return f"ε per window of {w} steps"
    return "ρ" if notion == "cgp" else "ε"


#: An entry of the account `a` (a per-user w-event account has stream_id '' and
#: covers the entries of every stream of its user).
_OF_ACCOUNT = ("e.user_id = a.user_id AND e.domain = a.domain AND (a.stream_id = '' OR "
               "e.stream_id = a.stream_id) AND e.kind <> 'policy'")


def balances(con: duckdb.DuckDBPyConnection, flt: Filter | None = None
             ) -> list[dict[str, Any]]:
    """Per account: user_id, domain, stream_id, notion, cap, spent, remaining, unit, units, state.

    `flt` narrows the accounts: user and domain select them; release and
    since select those with an entry of that release / created at or after
    since; until gives each account's balance as it stood then (its
    ``balance_after`` and ``cap`` at its last entry before until; accounts
    with no entry before it are left out).
    """
    flt = flt or Filter()
    cond, params = flt.where("a", release=False, time=False)
    sub, sub_params = Filter(release=flt.release, since=flt.since, until=flt.until).where("e")
    spent, cap = "a.spent", "a.cap"
    if flt.release is not None or flt.since is not None:
        cond += f" AND EXISTS (SELECT 1 FROM entries e WHERE {_OF_ACCOUNT} AND {sub})"  # noqa: S608
        params += sub_params
    head: list[Any] = []
    if flt.until is not None:
        last = (f"(SELECT e.{{}} FROM entries e WHERE {_OF_ACCOUNT} AND "  # noqa: S608
                "e.balance_after IS "
                "NOT NULL AND e.created_at < CAST(? AS TIMESTAMP) ORDER BY e.seq DESC LIMIT 1)")
        spent, cap = last.format("balance_after"), last.format("cap")
        head = [flt.until, flt.until]
    out = _dicts(con.execute(
        f"SELECT * FROM (SELECT a.user_id, a.domain, a.stream_id, d.notion, d.w, "  # noqa: S608
        f"{cap} AS cap, {spent} AS spent, d.units_label AS units FROM accounts a "
        f"JOIN domains d ON d.domain = a.domain WHERE {cond}) WHERE spent IS NOT NULL "
        "ORDER BY domain, user_id, stream_id", head + params))
    for r in out:
        cap_q, spent_q = int(r["cap"]), int(r["spent"])
        r["cap"], r["spent"], r["remaining"] = (from_units(cap_q), from_units(spent_q),
                                                from_units(cap_q - spent_q))
        r["state"] = account_state(cap_q, spent_q)
        r["unit"] = unit_of(r["notion"], r["w"])
    return [{k: r[k] for k in ("user_id", "domain", "stream_id", "notion", "cap", "spent",
                               "remaining", "unit", "units", "state")} for r in out]


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


def _windows(con: duckdb.DuckDBPyConnection, cond: str, params: list[Any]
             ) -> dict[int, list[Run]]:
    """The step runs (start, stop, quanta per step) of the w-event entries matching `cond`."""
    runs: dict[int, list[Run]] = {}
    for seq, start, stop, q in con.execute(
            "SELECT s.seq, s.run_start, s.run_stop, CAST(s.amount AS VARCHAR) "  # noqa: S608
            f"FROM step_runs s JOIN entries e ON e.seq = s.seq WHERE e.notion = 'wevent' "
            f"AND {cond} ORDER BY s.seq, s.run_start", params).fetchall():
        runs.setdefault(int(seq), []).append((int(start), int(stop), int(q)))
    return runs


def _per_window(r: dict[str, Any], runs: dict[int, list[Run]]) -> None:
    """Put a w-event entry's amount per window (its largest sum over w steps) in ``amount``.

    The sum over all of its steps moves to ``amount_all_steps`` and its steps
    to ``steps`` (``START:STOP`` runs); other notions keep their amount.
    """
    total = r["amount"]
    r["amount_all_steps"], r["steps"] = None, ""
    mine = runs.get(int(r["seq"]))
    if r["notion"] == "wevent" and r["w"] and mine:
        r["amount"] = from_units(max_window(mine, int(r["w"]))[0])
        r["amount_all_steps"] = total
        r["steps"] = ";".join(f"{a}:{b}" for a, b, _ in mine)


def history(con: duckdb.DuckDBPyConnection, flt: Filter) -> list[dict[str, Any]]:
    """Every account entry `flt` selects, in seq order, amounts as exact Fractions.

    Amounts, balances and caps are in the cap's unit (`unit_of`): for a
    w-event entry ``amount`` is its charge per window (the largest sum of its
    steps over any w consecutive steps), ``amount_all_steps`` the sum over
    all of its steps, and ``balance_after`` the account's largest window sum
    after it (what the cap bounds).
    """
    cond, params = flt.where("e")
    if flt.user is None:  # all accounts' entries; user '' selects the markers and policy
        cond += " AND e.user_id <> '' AND e.kind <> 'policy'"
    out = _dicts(con.execute(
        "SELECT e.seq, e.entry_id, e.created_at, e.user_id, e.release_id, e.domain, e.step, "  # noqa: S608
        "e.stream_id, e.kind, e.notion, d.w, CAST(e.amount AS VARCHAR) AS amount, "
        "CAST(e.balance_after AS VARCHAR) AS balance_after, CAST(e.cap AS VARCHAR) AS cap, "
        "e.mechanism, e.parameters, e.reason, e.actor FROM entries e LEFT JOIN domains d "
        f"ON d.domain = e.domain WHERE {cond} ORDER BY e.seq", params))
    runs = _windows(con, cond, params) if any(r["notion"] == "wevent" for r in out) else {}
    for r in out:
        for c in ("amount", "balance_after", "cap"):
            r[c] = None if r[c] is None else from_units(int(r[c]))
        _per_window(r, runs)
        r["unit"] = unit_of(r["notion"], r.pop("w"))
    return out


def _account_charges(con: duckdb.DuckDBPyConnection, release_id: str, domain: str,
                     user: str | None) -> list[Fraction]:
    """What one release charged each account of `domain`, in the cap's unit.

    ε or ρ for gp/cgp accounts; for w-event the charge per window, per user
    over all of its streams in a per-user domain, else per stream.
    """
    per: dict[tuple[str, str], Fraction] = {}
    for c in release_charges(con, release_id):
        if c["domain"] != domain or (user is not None and c["user_id"] != user):
            continue
        if c["user_window"] is not None:
            per[(c["user_id"], "")] = c["user_window"]
        else:
            per[(c["user_id"], c["stream_id"])] = (c["window"] if c["window"] is not None
                                                   else c["net"])
    return list(per.values())


def releases(con: duckdb.DuckDBPyConnection, flt: Filter | None = None
             ) -> list[dict[str, Any]]:
    """One row per release and domain it charged, with per-account figures in the cap's unit.

    Never a sum over users: ``accounts`` charged, ``spent_max`` and
    ``spent_mean`` (exact) of what the release charged one account, the
    ``cap`` its requests were checked against and the ``unit``. `flt`: user
    and domain narrow the entries (the figures become that user's), release
    and since/until select releases by id and by when they were created.
    """
    flt = flt or Filter()
    ent, ent_params = Filter(user=flt.user, domain=flt.domain).where("e")
    rel, rel_params = Filter(since=flt.since, until=flt.until).where("r")
    if flt.release is not None:
        rel += " AND r.release_id = ?"
        rel_params.append(flt.release)
    out = _dicts(con.execute(
        "SELECT r.release_id, r.state, r.created_at, r.updated_at, e.domain, "  # noqa: S608
        "any_value(d.notion) AS notion, any_value(d.w) AS w, "
        "CAST(max(e.cap) FILTER (WHERE e.kind IN ('reserve', 'deny')) AS VARCHAR) AS cap, "
        "count(DISTINCT e.user_id) FILTER (WHERE e.kind = 'reserve') AS users_admitted, "
        "count(DISTINCT e.user_id) FILTER (WHERE e.kind = 'deny') AS users_denied, "
        "min(e.seq) AS first_seq, max(e.seq) AS last_seq FROM releases r "
        "LEFT JOIN entries e ON e.release_id = r.release_id AND e.user_id <> '' AND "
        f"e.kind <> 'policy' AND {ent} LEFT JOIN domains d ON d.domain = e.domain "
        f"WHERE {rel} GROUP BY r.release_id, r.state, r.created_at, r.updated_at, e.domain "
        "ORDER BY r.created_at, r.release_id, e.domain", ent_params + rel_params))
    if flt.user is not None or flt.domain is not None:
        out = [r for r in out if r["domain"] is not None]
    for r in out:
        spent = (_account_charges(con, r["release_id"], r["domain"], flt.user)
                 if r["domain"] is not None else [])
        r["domain"] = r["domain"] or ""
        r["cap"] = None if r["cap"] is None else from_units(int(r["cap"]))
        r["accounts"] = len(spent)
        r["spent_max"] = max(spent) if spent else None
        r["spent_mean"] = sum(spent, Fraction(0)) / len(spent) if spent else None
        r["unit"] = unit_of(r["notion"], r.pop("w")) if r["notion"] else ""
    return out


#: Why a request was denied, by the start of its recorded reason (`ledger.admission`).
DENIAL_CAUSES = {
    "over_cap": "spent + requested would exceed the cap",
    "window_over_cap": "a w-event window would exceed the cap",
    "above_lowered_cap": "the account is above a lowered cap and admits nothing",
    "denied_earlier_in_release": "the user was denied earlier in the same release",
    "other": "any other recorded reason",
}


def denial_cause(reason: str | None) -> str:
    """The cause (a key of `DENIAL_CAUSES`) of a denial's recorded reason.

    A request denied together with the user's other requests (all or nothing
    per user) has the cause of the request that failed.
    """
    text = (reason or "").removeprefix(TOGETHER)
    if text.startswith(ABOVE_CAP):
        return "above_lowered_cap"
    if text.startswith(DENIED_EARLIER):
        return "denied_earlier_in_release"
    if text.startswith("window of steps"):
        return "window_over_cap"
    if text.startswith("spent ") and " > cap " in text:
        return "over_cap"
    return "other"


def denials(con: duckdb.DuckDBPyConnection, flt: Filter | None = None
            ) -> list[dict[str, Any]]:
    """Every denial `flt` selects, with why: requested, spent before, cap (cap's unit), reason.

    For w-event, ``requested`` is the request's charge per window and
    ``spent`` the account's largest window sum when it was denied.
    """
    cond, params = (flt or Filter()).where("e")
    cond += " AND e.kind = 'deny'"
    out = _dicts(con.execute(
        "SELECT e.seq, e.created_at, e.release_id, e.user_id, e.domain, e.step, "  # noqa: S608
        "e.stream_id, e.notion, d.w, CAST(e.amount AS VARCHAR) AS amount, "
        "CAST(e.balance_after AS VARCHAR) AS spent, CAST(e.cap AS VARCHAR) AS cap, e.reason "
        f"FROM entries e LEFT JOIN domains d ON d.domain = e.domain WHERE {cond} "
        "ORDER BY e.seq", params))
    runs = _windows(con, cond, params) if any(r["notion"] == "wevent" for r in out) else {}
    for r in out:
        r["amount"] = from_units(int(r["amount"]))
        for c in ("spent", "cap"):
            r[c] = None if r[c] is None else from_units(int(r[c]))
        _per_window(r, runs)
        r["requested"] = r.pop("amount")
        r["unit"] = unit_of(r["notion"], r.pop("w"))
        r["cause"] = denial_cause(r["reason"])
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
    "releases": None,  # per release and domain, per account: `_releases_table`
    "denials": "SELECT * FROM denials ORDER BY seq",
}
"""The tables `export` writes, by name (``--table all``: each, one file per table)."""

#: Plain Parquet every reader reads (any DuckDB, pandas, Spark): format 1.0
#: types only (strings UTF8, timestamps INT64 TIMESTAMP_MICROS, naive UTC),
#: data pages v1, snappy compression.
PARQUET_OPTIONS: dict[str, Any] = {
    "version": "1.0", "data_page_version": "1.0", "compression": "snappy",
    "coerce_timestamps": "us", "allow_truncated_timestamps": False,
    "use_compliant_nested_type": True}


def _releases_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """`releases` as a table: per release and domain, spent per account (float and exact)."""
    rows = releases(con)
    cols: dict[str, list[Any]] = {c: [] for c in (
        "release_id", "domain", "state", "users_admitted", "users_denied", "accounts",
        "spent_max", "spent_max_exact", "spent_mean", "spent_mean_exact", "cap", "cap_exact",
        "unit", "first_seq", "last_seq", "created_at", "updated_at")}
    for r in rows:
        for c in cols:
            if c.endswith("_exact"):
                v = r[c.removesuffix("_exact")]
                cols[c].append(None if v is None else format_fraction(v))
            elif c in ("spent_max", "spent_mean", "cap"):
                cols[c].append(None if r[c] is None else float(r[c]))
            else:
                cols[c].append(r[c])
    types = {"users_admitted": pa.int64(), "users_denied": pa.int64(), "accounts": pa.int64(),
             "first_seq": pa.int64(), "last_seq": pa.int64(), "spent_max": pa.float64(),
             "spent_mean": pa.float64(), "cap": pa.float64(),
             "created_at": pa.timestamp("us"), "updated_at": pa.timestamp("us")}
    return pa.table({c: pa.array(v, type=types.get(c, pa.string())) for c, v in cols.items()})


def check_export(fmt: str, what: str) -> None:
    """Refuse an unknown export format or table.

    Raises:
        ParameterError: naming the allowed values.
    """
    if fmt not in ("csv", "parquet", "json"):
        raise ParameterError("--format: export format must be csv, parquet or json")
    if what not in (*EXPORTS, "all"):
        raise ParameterError(f"--table: export table must be one of {', '.join(EXPORTS)} or all")


def export_table(con: duckdb.DuckDBPyConnection, what: str) -> pa.Table:
    """One export table as Arrow."""
    sql = EXPORTS[what]
    if sql is None:
        return _releases_table(con)
    return con.sql(sql).to_arrow_table()


def write_table(tbl: pa.Table, path: str | os.PathLike[str], fmt: str) -> int:
    """Write an export table as csv, parquet or json (a JSON array); return the row count."""
    out = Path(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(tbl, out, **PARQUET_OPTIONS)
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(tbl, out)
    else:
        out.write_text(json.dumps(tbl.to_pylist(), default=str, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    return tbl.num_rows


def write_export(tables: dict[str, pa.Table], path: str | os.PathLike[str], fmt: str,
                 what: str) -> int:
    """Write `Ledger.export_tables` as `Ledger.export` does; return the row count.

    One table: the file `path`. ``all``: the directory `path` (created if
    missing) holding ``<table>.<fmt>`` for every table.
    """
    if what != "all":
        return write_table(tables[what], path, fmt)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return sum(write_table(tbl, out / f"{name}.{fmt}", fmt) for name, tbl in tables.items())
