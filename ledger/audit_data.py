"""The figures of a compliance audit, computed from one export of the ledger.

The audit reads the ledger through its public API only: `Ledger.export` of
the hash-chained entries (one consistent snapshot, queried here with an
in-memory DuckDB), `balances`, `domains`, `releases`, `release` (manifests),
`release_charges` (w-event windows), `head` (the signed chain head) and
`policy_history`. Without the noise key it reads as an auditor (public key
only; `verify` then names what it could not check). Every amount is exact (integer
quanta -> Fraction) until it is formatted. Nothing here reads release
outputs or raw data, and nothing is written to the ledger.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ledger import Ledger, LedgerBusyError, VerifyReport, from_units, key_path_for
from ledger.filters import Filter
from ledger.heads import parse_expect_head
from ledger.queries import denial_cause


@dataclass
class DomainSpend:
    """One domain's releases in time order, with account balances after each."""

    releases: list[str] = field(default_factory=list)
    times: list[str] = field(default_factory=list)
    max_after: list[Fraction] = field(default_factory=list)
    p90_after: list[Fraction] = field(default_factory=list)
    median_after: list[Fraction] = field(default_factory=list)
    accounts_after: list[int] = field(default_factory=list)
    cap: list[Fraction] = field(default_factory=list)
    charge_min: list[Fraction] = field(default_factory=list)
    charge_median: list[Fraction] = field(default_factory=list)
    charge_max: list[Fraction] = field(default_factory=list)


@dataclass
class AuditData:
    """Everything the audit report shows."""

    ledger_path: str
    verification: VerifyReport
    head: dict[str, Any]                   # last entry of the export: seq, hash, time
    signed_head: dict[str, Any]            # Ledger.head(): seq, hash, signature, key
    auditor: bool                          # opened with the public key only
    domains: list[dict[str, Any]]
    policy_history: list[dict[str, Any]]   # Ledger.policy_history(): every change, in order
    balances: list[dict[str, Any]]
    releases: list[dict[str, Any]]
    spend: dict[str, DomainSpend]
    denials: list[dict[str, Any]]          # one row per (domain, user), with causes
    denials_per_day: dict[str, list[tuple[str, int]]]
    entries: int
    denial_causes: list[dict[str, Any]] = field(default_factory=list)  # (domain, cause)
    where: Filter = field(default_factory=Filter)  # what the listings were narrowed to
    since: dict[str, Any] | None = None    # changes since a kept checkpoint (`changes`)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None
          ) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _head(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    rows = _rows(con, "SELECT seq, hash, created_at FROM e ORDER BY seq DESC LIMIT 1")
    if not rows:
        return {"seq": 0, "hash": "0" * 64, "created_at": None}
    return rows[0]


def _release_rows(con: duckdb.DuckDBPyConnection, ledger: Ledger, user: str | None = None
                  ) -> list[dict[str, Any]]:
    """One row per (release, domain) of the entries, with its manifest's public facts.

    `user` (the audit's ``--user``): w-event windows of that user only.
    """
    rows = _rows(con, """
        WITH per_user AS (
            SELECT release_id, domain, user_id, stream_id,
                   sum(CASE kind WHEN 'reserve' THEN 1 WHEN 'refund' THEN -1
                       WHEN 'close' THEN -1 ELSE 0 END * CAST(amount_quanta AS HUGEINT)) AS net,
                   bool_or(kind = 'reserve') AS admitted
            FROM e WHERE user_id <> '' AND kind <> 'deny' GROUP BY ALL),
        per_rel AS (
            SELECT release_id, domain, min(created_at) AS first_at, max(seq) AS last_seq,
                   min(seq) AS first_seq, string_agg(DISTINCT actor, ', ') AS actors,
                   any_value(mechanism) FILTER (WHERE mechanism IS NOT NULL) AS mechanism,
                   any_value(notion) AS notion,
                   max(CAST(cap_quanta AS HUGEINT)) AS cap_q,
                   count(DISTINCT user_id) FILTER (WHERE kind = 'reserve') AS admitted,
                   count(DISTINCT user_id) FILTER (WHERE kind = 'deny') AS denied
            FROM e WHERE user_id <> '' GROUP BY ALL)
        SELECT r.*, CAST(min(p.net) AS VARCHAR) AS net_min,
               CAST(quantile_disc(p.net, 0.5) AS VARCHAR) AS net_median,
               CAST(max(p.net) AS VARCHAR) AS net_max
        FROM per_rel r LEFT JOIN per_user p
          ON p.release_id = r.release_id AND p.domain = r.domain AND p.admitted
        GROUP BY ALL ORDER BY r.last_seq""")
    for r in rows:
        rec = ledger.release(r["release_id"]) or {}
        r["state"] = rec.get("state", "no manifest (ledger charge)")
        r["manifest"] = rec.get("manifest") or {}
        cap_q = r.pop("cap_q")
        r["cap"] = None if cap_q is None else from_units(int(cap_q))
        for k in ("net_min", "net_median", "net_max"):
            r[k] = None if r[k] is None else from_units(int(r[k]))
        if r["notion"] == "wevent":
            per: dict[str, Any] = {}  # per user: its window over all streams, or its max
            for c in ledger.release_charges(r["release_id"]):
                if c["domain"] == r["domain"] and user in (None, c["user_id"]):
                    w = c["user_window"] if c["user_window"] is not None else c["window"]
                    per[c["user_id"]] = max(per.get(c["user_id"], w), w)
            windows = sorted(per.values())
            if windows:
                r["net_min"], r["net_max"] = windows[0], windows[-1]
                r["net_median"] = windows[(len(windows) - 1) // 2]
    return rows


def _balances_after(con: duckdb.DuckDBPyConnection, domain: str, checkpoints: list[int]
                    ) -> list[list[int]]:
    """Every account's balance (exact quanta) after each checkpoint seq, from ``balance_after``.

    ``balance_after`` is the account's spent after each entry (for w-event, its
    largest window sum), so an account's balance after seq s is that of its
    last entry at or before s.
    """
    rows = con.execute(
        "SELECT seq, user_id || chr(0) || stream_id, balance_after_quanta FROM e "
        "WHERE domain = ? AND user_id <> '' AND balance_after_quanta IS NOT NULL ORDER BY seq",
        [domain]).fetchall()
    seqs = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    current: dict[str, int] = {}
    out, done = [], 0
    for cp in checkpoints:
        upto = int(np.searchsorted(seqs, cp, side="right"))
        for _, acc, bal in rows[done:upto]:
            current[acc] = int(bal)
        done = max(done, upto)
        out.append(sorted(current.values()))
    return out


def _spend(con: duckdb.DuckDBPyConnection, releases: list[dict[str, Any]]
           ) -> dict[str, DomainSpend]:
    spend: dict[str, DomainSpend] = {}
    for dom in sorted({r["domain"] for r in releases}):
        rels = [r for r in releases if r["domain"] == dom]
        after = _balances_after(con, dom, [int(r["last_seq"]) for r in rels])
        s = spend[dom] = DomainSpend()
        for r, q in zip(rels, after, strict=True):
            q = q or [0]
            s.releases.append(r["release_id"])
            s.times.append(r["first_at"])
            s.max_after.append(from_units(q[-1]))
            s.p90_after.append(from_units(q[int(np.ceil(0.9 * len(q))) - 1]))
            s.median_after.append(from_units(q[(len(q) - 1) // 2]))
            s.accounts_after.append(len(q))
            s.cap.append(r["cap"] or Fraction(0))
            s.charge_min.append(r["net_min"] or Fraction(0))
            s.charge_median.append(r["net_median"] or Fraction(0))
            s.charge_max.append(r["net_max"] or Fraction(0))
    return spend


def _denials(con: duckdb.DuckDBPyConnection) -> tuple[list[dict[str, Any]],
                                                      dict[str, list[tuple[str, int]]],
                                                      list[dict[str, Any]]]:
    """Denials per (domain, user) with their causes and last reason; per day; per cause."""
    per_user = _rows(con, """
        SELECT domain, user_id, count(*) AS denied_requests,
               count(DISTINCT release_id) AS releases, min(created_at) AS first_denied,
               max(created_at) AS last_denied, arg_max(reason, seq) AS last_reason
        FROM e WHERE kind = 'deny' GROUP BY ALL ORDER BY domain, denied_requests DESC, user_id""")
    causes: dict[tuple[str, str], dict[str, int]] = {}
    users: dict[tuple[str, str], set[str]] = {}
    for dom, user, reason, n in con.execute(
            "SELECT domain, user_id, reason, count(*) FROM e WHERE kind = 'deny' "
            "GROUP BY ALL").fetchall():
        cause = denial_cause(reason)
        mine = causes.setdefault((dom, user), {})
        mine[cause] = mine.get(cause, 0) + int(n)
        users.setdefault((dom, cause), set()).add(user)
    for r in per_user:
        r["causes"] = dict(sorted(causes.get((r["domain"], r["user_id"]), {}).items()))
    by_cause = [{"domain": dom, "cause": cause, "users": len(who),
                 "requests": sum(c.get(cause, 0) for (d, _), c in causes.items() if d == dom)}
                for (dom, cause), who in sorted(users.items())]
    per_day: dict[str, list[tuple[str, int]]] = {}
    for r in _rows(con, "SELECT domain, strftime(date_trunc('day', created_at), '%Y-%m-%d') AS "
                        "day, count(DISTINCT user_id) AS users FROM e WHERE kind = 'deny' "
                        "GROUP BY ALL ORDER BY domain, day"):
        per_day.setdefault(r["domain"], []).append((r["day"], int(r["users"])))
    return per_user, per_day, by_cause


def open_for_audit(ledger_path: str, public_key: str | None = None) -> Ledger:
    """The ledger, or as an auditor (public key only) when its noise key is not here.

    With `public_key` (a file the auditor kept) always as an auditor.
    """
    if public_key is None and key_path_for(ledger_path).exists():
        return Ledger(ledger_path)
    return Ledger.open_auditor(ledger_path, public_key=public_key)


def _changes(con: duckdb.DuckDBPyConnection, ledger: Ledger,
             kept: tuple[str, Any]) -> dict[str, Any]:
    """What changed after the kept head (seq, hash): releases, charges, policy, denials.

    Charges per domain are per account in the cap's unit: ``balance_increase_max``
    is the largest rise of one account's balance (its spent; for w-event its
    largest window sum) since the kept head. ``in_chain`` is False (and nothing
    else is listed) when the chain has no entry `seq` with hash `digest`, or
    when a kept signed head's signature is not this ledger's (``problem`` says
    why: a forged checkpoint names a real entry but proves nothing).
    """
    where, head = kept
    seq, digest = head.seq, head.hash
    at = _rows(con, "SELECT hash FROM e WHERE seq = ?", [seq])
    found = at[0]["hash"] if at else ("0" * 64 if seq == 0 else None)
    first: dict[str, Any] = {"checkpoint": where, "seq": seq, "hash": digest,
                             "in_chain": found == digest}
    problem = ledger.kept_head_problem(where, head)
    if problem is not None:
        first.update(in_chain=False, problem=problem)
    if not first["in_chain"]:
        return first
    releases = _rows(con, """
        SELECT release_id, domain, min(created_at) AS first_at, min(seq) AS first_seq,
               count(DISTINCT user_id) FILTER (WHERE kind = 'reserve') AS users_admitted,
               count(DISTINCT user_id) FILTER (WHERE kind = 'deny') AS users_denied
        FROM e WHERE seq > ? AND user_id <> '' GROUP BY ALL ORDER BY first_seq, domain""",
                     [seq])
    charges = _rows(con, """
        WITH acc AS (
            SELECT domain, user_id, stream_id,
                   CAST(arg_max(balance_after_quanta, seq) AS HUGEINT) AS now_q,
                   coalesce(CAST(arg_max(balance_after_quanta, seq) FILTER (WHERE seq <= ?)
                            AS HUGEINT), 0) AS then_q,
                   bool_or(seq > ? AND kind = 'reserve') AS charged
            FROM e WHERE user_id <> '' AND balance_after_quanta IS NOT NULL GROUP BY ALL)
        SELECT domain, count(*) FILTER (WHERE charged) AS accounts_charged,
               CAST(max(now_q - then_q) AS VARCHAR) AS increase_q
        FROM acc GROUP BY ALL HAVING bool_or(charged) ORDER BY domain""", [seq, seq])
    for c in charges:
        c["balance_increase_max"] = from_units(int(c.pop("increase_q")))
    denied = _rows(con, "SELECT domain, count(*) AS denied_requests, count(DISTINCT user_id) "
                        "AS users_denied FROM e WHERE seq > ? AND kind = 'deny' GROUP BY ALL "
                        "ORDER BY domain", [seq])
    policy = [p for p in ledger.policy_history() if p["seq"] > seq]
    return {**first, "releases": releases, "charges": charges, "denials": denied,
            "policy_changes": policy}


def _narrow(con: duckdb.DuckDBPyConnection, where: Filter) -> None:
    """Keep only the entries `where` selects in the audit's table ``e``."""
    if not where.empty:
        cond, params = where.where()
        con.execute(f"DELETE FROM e WHERE NOT ({cond})", params)  # noqa: S608


#: How often `collect` reads the ledger again when a release committed while it read.
COLLECT_ATTEMPTS = 8


def collect(ledger_path: str, public_key: str | None = None,
            expect_heads: Sequence[str] = (), where: Filter | None = None,
            since_checkpoint: str | None = None) -> AuditData:
    """Export the ledger once, verify it, and compute every figure of the audit.

    `expect_heads` (checkpoint files or ``SEQ:HASH``) are heads kept earlier
    that the chain must contain (`Ledger.verify`). `where` narrows the
    listings (releases, spend, denials, balances, policy changes), never the
    verification, which always covers the whole chain. `since_checkpoint` (a
    checkpoint file or ``SEQ:HASH``) is a head the chain must also contain;
    what changed after it is in ``since``.

    The figures come from several read transactions (the export, the
    verification, balances, policy); every writing transaction moves the
    signed head, so they describe one state of the ledger exactly when the
    head is the same before and after them. Otherwise (a release committed
    meanwhile) everything is read again.

    Raises:
        LedgerBusyError: the ledger changed during each of `COLLECT_ATTEMPTS` reads.
    """
    where = where or Filter()
    expected = [parse_expect_head(text) for text in expect_heads]
    kept = parse_expect_head(since_checkpoint) if since_checkpoint is not None else None
    ledger = open_for_audit(ledger_path, public_key)
    for _ in range(COLLECT_ATTEMPTS):
        before = ledger.head().to_dict()
        data = _collect_once(ledger, ledger_path, expected, where, kept)
        if data.signed_head == before and data.head["seq"] == before["seq"]:
            return data
    raise LedgerBusyError(
        f"the ledger {str(ledger_path)!r} changed while it was read, {COLLECT_ATTEMPTS} times "
        "in a row (releases committing); run the audit again when fewer releases run")


def _collect_once(ledger: Ledger, ledger_path: str, expected: list[Any], where: Filter,
                  kept: Any) -> AuditData:
    """`collect`'s reads, once (the caller checks they saw one state)."""
    with tempfile.TemporaryDirectory(prefix="privpipe-audit-") as tmp:
        path = Path(tmp) / "entries.parquet"
        n = ledger.export(path, fmt="parquet", what="entries")
        con = duckdb.connect()
        try:
            con.execute("CREATE TABLE e AS SELECT * FROM read_parquet(?)", [str(path)])
            head = _head(con)
            since = (None if kept is None else
                     _changes(con, ledger, kept))
            _narrow(con, where)
            releases = _release_rows(con, ledger, where.user)
            spend = _spend(con, releases)
            denials, per_day, causes = _denials(con)
        finally:
            con.close()
    policy_where = Filter(domain=where.domain, since=where.since, until=where.until)
    return AuditData(
        ledger_path=str(Path(ledger_path).resolve()),
        verification=ledger.verify(expected + ([kept] if kept is not None else [])),
        head=head, signed_head=ledger.head().to_dict(), auditor=ledger.auditor,
        domains=[d for d in ledger.domains() if where.domain in (None, d["domain"])],
        policy_history=ledger.policy_history(where=policy_where),
        balances=ledger.balances(where=where), releases=releases, spend=spend,
        denials=denials, denials_per_day=per_day, entries=n, denial_causes=causes,
        where=where, since=since)
