"""The audit web page's queries: small, paged reads of the entries for one page each.

Every function takes a connection of one read-only transaction
(`AuditReader.read`) and returns plain rows; amounts stay exact (integer
quanta in ``*_q`` columns, turned into Fractions here). Filters are constant
SQL with ``?`` parameters (``? IS NULL OR column = ?``), so no SQL text is
ever built from a request. Lists take ``limit`` and ``offset``; each page
asks for one row more than it shows to know whether a next page exists.
Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ledger import storage
from ledger.amounts import from_units
from ledger.policy import list_tx
from ledger.queries import denial_cause


@dataclass(frozen=True)
class ListFilter:
    """What a list page is narrowed to: domain, [since, until) and a denial cause."""

    domain: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    reason: str | None = None

    def params(self) -> list[Any]:
        """The parameters of `_FILTER` (each value twice: the NULL test and the comparison)."""
        return [self.domain, self.domain, self.since, self.since, self.until, self.until]


_FILTER = ("(CAST(? AS VARCHAR) IS NULL OR domain = ?) "
           "AND (CAST(? AS TIMESTAMP) IS NULL OR created_at >= ?) "
           "AND (CAST(? AS TIMESTAMP) IS NULL OR created_at < ?)")


class AuditReader:
    """Read-only access to a ledger file: each `read` is one short transaction.

    The connection is opened read-only (DuckDB refuses any write on it) and
    closed when the transaction ends, so nothing holds the file between two
    pages and a release beside the server waits for one page's query at most.
    """

    def __init__(self, path: Path, lock_timeout: float = 30.0):
        """Read the ledger at `path`, retrying up to `lock_timeout` s while a writer holds it."""
        self._store = storage.Store(Path(path), lock_timeout, read_only=True)

    def read(self, fn: Any) -> Any:
        """Run `fn(con)` in one read-only transaction and return its result."""
        return self._store.transact(fn, write=False)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _exact(rows: list[dict[str, Any]], *columns: str) -> list[dict[str, Any]]:
    """Replace each ``<name>_q`` column (quanta) by ``<name>`` (exact Fraction)."""
    for r in rows:
        for c in columns:
            q = r.pop(f"{c}_q")
            r[c] = None if q is None else from_units(int(q))
    return rows


def head(con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
    """The chain head (seq, hash): the cache key of every summary."""
    return storage.head(con)


_DOMAIN_FIGURES = """
    SELECT d.domain, count(a.user_id) AS accounts,
           CAST(quantile_disc(a.spent, 0.5) AS VARCHAR) AS spent_median_q,
           CAST(max(a.spent) AS VARCHAR) AS spent_max_q,
           count(*) FILTER (WHERE a.spent <= a.cap AND
                 CAST(a.spent AS DOUBLE) >= 0.9 * CAST(a.cap AS DOUBLE)) AS near_cap,
           count(*) FILTER (WHERE a.spent > a.cap) AS above_cap
    FROM domains d LEFT JOIN accounts a ON a.domain = d.domain
    GROUP BY d.domain ORDER BY d.domain"""

_DOMAIN_COUNTS = """
    SELECT domain, count(DISTINCT release_id) FILTER (WHERE user_id <> '') AS releases,
           count(*) FILTER (WHERE kind = 'deny') AS denials,
           count(DISTINCT user_id) FILTER (WHERE kind = 'deny') AS users_denied
    FROM entries WHERE kind <> 'policy' GROUP BY domain"""


def overview(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per domain: cap and unit, accounts, spent median/max, near/above cap, releases, denials."""
    domains = {d["domain"]: d for d in list_tx(con)}
    counts = {r["domain"]: r for r in _rows(con, _DOMAIN_COUNTS, [])}
    out = []
    for r in _exact(_rows(con, _DOMAIN_FIGURES, []), "spent_median", "spent_max"):
        d = domains[r["domain"]]
        c = counts.get(r["domain"], {})
        out.append({**r, "notion": d["notion"], "cap": d["cap"], "w": d.get("w"),
                    "units": d["units_label"], "releases": c.get("releases", 0),
                    "denials": c.get("denials", 0), "users_denied": c.get("users_denied", 0)})
    return out


def domain_notions(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Each domain's notion, w and units label (to print amounts in the cap's unit)."""
    return {d["domain"]: d for d in list_tx(con)}


_USER_BALANCES = """
    SELECT domain, stream_id, CAST(cap AS VARCHAR) AS cap_q, CAST(spent AS VARCHAR) AS spent_q,
           CAST(cap - spent AS VARCHAR) AS remaining_q
    FROM accounts WHERE user_id = ? ORDER BY domain, stream_id"""

_USER_ENTRIES = """
    SELECT seq, created_at, release_id, domain, stream_id, kind, mechanism,
           CAST(amount AS VARCHAR) AS amount_q, CAST(balance_after AS VARCHAR) AS balance_q,
           CAST(cap AS VARCHAR) AS cap_q, reason
    FROM entries WHERE user_id = ? AND kind IN ('reserve', 'settle', 'refund', 'close', 'deny')
    ORDER BY seq LIMIT ? OFFSET ?"""


def user(con: duckdb.DuckDBPyConnection, user_id: str, limit: int, offset: int
         ) -> dict[str, Any]:
    """One user's balances per account and a page of their entries (charges and denials)."""
    balances = _exact(_rows(con, _USER_BALANCES, [user_id]), "cap", "spent", "remaining")
    entries = _exact(_rows(con, _USER_ENTRIES, [user_id, limit + 1, offset]),
                     "amount", "balance", "cap")
    for e in entries:
        e["cause"] = denial_cause(e["reason"]) if e["kind"] == "deny" else None
    return {"balances": balances, "entries": entries}


_RELEASES = """
    SELECT release_id, domain, min(created_at) AS first_at, max(created_at) AS last_at,
           min(seq) AS first_seq, max(seq) AS last_seq,
           count(DISTINCT user_id) FILTER (WHERE kind = 'reserve') AS admitted,
           count(DISTINCT user_id) FILTER (WHERE kind = 'deny') AS denied,
           any_value(mechanism) FILTER (WHERE mechanism IS NOT NULL) AS mechanism
    FROM entries WHERE user_id <> '' AND kind <> 'policy'
    GROUP BY release_id, domain ORDER BY first_seq DESC, domain"""


def releases(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every (release, domain), newest first: when it started and ended, users, mechanism.

    One row per release and domain (a ledger has thousands of releases at
    most, so the server keeps this list per head and filters it in memory).
    """
    return _rows(con, _RELEASES, [])


def select_releases(rows: list[dict[str, Any]], flt: ListFilter) -> list[dict[str, Any]]:
    """The releases of `flt`'s domain that started in [since, until)."""
    return [r for r in rows if flt.domain in (None, r["domain"])
            and (flt.since is None or r["first_at"] >= flt.since)
            and (flt.until is None or r["first_at"] < flt.until)]


_RELEASE_DOMAINS = """
    SELECT domain, min(created_at) AS first_at, max(created_at) AS last_at,
           min(seq) AS first_seq, max(seq) AS last_seq,
           any_value(mechanism) FILTER (WHERE mechanism IS NOT NULL) AS mechanism,
           any_value(parameters) FILTER (WHERE parameters IS NOT NULL) AS parameters,
           string_agg(DISTINCT actor, ', ') AS actors,
           count(DISTINCT user_id) FILTER (WHERE kind = 'reserve') AS admitted,
           count(DISTINCT user_id) FILTER (WHERE kind = 'deny') AS denied
    FROM entries WHERE release_id = ? AND user_id <> '' GROUP BY domain ORDER BY domain"""

_RELEASE_SPREAD = """
    WITH per_user AS (
        SELECT domain, user_id, stream_id,
               sum(CASE kind WHEN 'reserve' THEN 1 WHEN 'refund' THEN -1 WHEN 'close' THEN -1
                   ELSE 0 END * amount) AS net
        FROM entries WHERE release_id = ? AND user_id <> '' AND kind <> 'deny'
        GROUP BY ALL)
    SELECT domain, count(*) AS accounts, CAST(min(net) AS VARCHAR) AS net_min_q,
           CAST(quantile_disc(net, 0.5) AS VARCHAR) AS net_median_q,
           CAST(max(net) AS VARCHAR) AS net_max_q, CAST(sum(net) AS VARCHAR) AS net_total_q
    FROM per_user GROUP BY domain ORDER BY domain"""

_RELEASE_PAGE = """
    SELECT seq, user_id, domain, stream_id, kind = 'deny' AS denied FROM entries
    WHERE release_id = ? AND kind IN ('reserve', 'deny') AND seq > ? ORDER BY seq LIMIT ?"""

_RELEASE_NET = """
    SELECT user_id, domain, stream_id,
           CAST(sum(CASE kind WHEN 'reserve' THEN 1 WHEN 'refund' THEN -1 WHEN 'close' THEN -1
                ELSE 0 END * amount) AS VARCHAR) AS net_q
    FROM entries WHERE release_id = ? AND user_id IN (SELECT unnest(CAST(? AS VARCHAR[])))
    GROUP BY ALL"""


def release_users(con: duckdb.DuckDBPyConnection, release_id: str, limit: int, after: int
                  ) -> list[dict[str, Any]]:
    """A page of the release's requests (admitted or denied) after entry `after`, net charges.

    Paged by entry number (keyset), so page 10,000 of a 10^6-user release
    costs what page 1 does.
    """
    page = _rows(con, _RELEASE_PAGE, [release_id, after, limit + 1])
    nets = {(r["user_id"], r["domain"], r["stream_id"]): r["net_q"] for r in _rows(
        con, _RELEASE_NET, [release_id, sorted({r["user_id"] for r in page})])}
    for r in page:
        r["net_q"] = nets.get((r["user_id"], r["domain"], r["stream_id"]))
    return _exact(page, "net")


def release(con: duckdb.DuckDBPyConnection, release_id: str) -> dict[str, Any]:
    """One release: state; per domain its mechanism, parameters, users, charge spread."""
    state = _rows(con, "SELECT state FROM releases WHERE release_id = ?", [release_id])
    return {
        "state": state[0]["state"] if state else None,
        "domains": _rows(con, _RELEASE_DOMAINS, [release_id]),
        "spread": _exact(_rows(con, _RELEASE_SPREAD, [release_id]),
                         "net_min", "net_median", "net_max", "net_total")}


_DENIALS = """
    SELECT seq, created_at, release_id, user_id, domain, stream_id,
           CAST(amount AS VARCHAR) AS requested_q, CAST(balance_after AS VARCHAR) AS spent_q,
           CAST(cap AS VARCHAR) AS cap_q, reason
    FROM entries WHERE kind = 'deny' AND (CAST(? AS VARCHAR) IS NULL OR release_id = ?)
      AND """ + _FILTER + """
      AND (CAST(? AS VARCHAR) IS NULL OR reason LIKE ? || '%')
    ORDER BY seq DESC LIMIT ? OFFSET ?"""  # noqa: S608 - constants only


def denials(con: duckdb.DuckDBPyConnection, flt: ListFilter, limit: int, offset: int,
            release_id: str | None = None) -> list[dict[str, Any]]:
    """A page of denials, newest first, narrowed by release, domain, time and reason prefix."""
    rows = _rows(con, _DENIALS, [release_id, release_id, *flt.params(), flt.reason,
                                 flt.reason, limit + 1, offset])
    for r in _exact(rows, "requested", "spent", "cap"):
        r["cause"] = denial_cause(r["reason"])
    return rows


_POLICY = """
    SELECT seq, created_at, actor, domain, step AS change, CAST(cap AS VARCHAR) AS before_q,
           CAST(amount AS VARCHAR) AS after_q, reason AS summary,
           json_extract_string(detail, '$.reason') AS why
    FROM entries WHERE kind = 'policy' AND seq > ? ORDER BY seq DESC LIMIT ? OFFSET ?"""


def policy(con: duckdb.DuckDBPyConnection, limit: int | None, offset: int, after_seq: int = 0
           ) -> list[dict[str, Any]]:
    """Policy changes after `after_seq`, newest first: who, when, cap before and after, why.

    `limit` None: all of them (a page asks for one row more than it shows).
    """
    return _exact(_rows(con, _POLICY, [after_seq, None if limit is None else limit + 1,
                                       offset]), "before", "after")


def entry_at(con: duckdb.DuckDBPyConnection, seq: int) -> str | None:
    """The hash of the entry `seq` (seq 0: the genesis hash), None if the chain has none."""
    if seq == 0:
        return "0" * 64
    rows = _rows(con, "SELECT hash FROM entries WHERE seq = ?", [seq])
    return rows[0]["hash"] if rows else None


_SINCE_FIRST = """
    SELECT min(created_at) AS first_at, min(seq) AS first_seq FROM entries
    WHERE seq > ? AND release_id = ? AND domain = ? AND user_id <> ''"""

_SINCE_CHARGES = """
    WITH after AS (
        SELECT e.domain, e.user_id, e.stream_id, d.notion = 'wevent' AS windowed,
               sum(CASE e.kind WHEN 'reserve' THEN 1 WHEN 'refund' THEN -1
                   WHEN 'close' THEN -1 ELSE 0 END * e.amount) AS net_q,
               arg_max(e.balance_after, e.seq) AS now_q,
               bool_or(e.kind = 'reserve') AS charged
        FROM entries e JOIN domains d ON d.domain = e.domain
        WHERE e.seq > ? AND e.user_id <> '' AND e.balance_after IS NOT NULL
          AND (? OR d.notion = 'wevent') GROUP BY ALL),
    before AS (
        SELECT e.domain, e.user_id, e.stream_id, arg_max(e.balance_after, e.seq) AS then_q
        FROM entries e SEMI JOIN (SELECT * FROM after WHERE windowed) w
          ON w.domain = e.domain AND w.user_id = e.user_id AND w.stream_id = e.stream_id
        WHERE e.seq <= ? AND e.balance_after IS NOT NULL GROUP BY ALL)
    SELECT a.domain, count(*) FILTER (WHERE a.charged) AS accounts_charged,
           CAST(max(CASE WHEN a.windowed THEN a.now_q - coalesce(b.then_q, 0)
                    ELSE a.net_q END) AS VARCHAR) AS increase_q
    FROM after a LEFT JOIN before b
      ON b.domain = a.domain AND b.user_id = a.user_id AND b.stream_id = a.stream_id
    GROUP BY a.domain HAVING bool_or(a.charged) ORDER BY a.domain"""

_SINCE_RISE_EARLY = """
    WITH at_head AS (
        SELECT domain, user_id, stream_id, arg_max(balance_after, seq) AS then_q
        FROM entries WHERE seq <= ? AND user_id <> '' AND balance_after IS NOT NULL
        GROUP BY ALL)
    SELECT a.domain, CAST(max(a.spent - coalesce(t.then_q, 0)) AS VARCHAR) AS increase_q
    FROM accounts a JOIN domains d ON d.domain = a.domain AND d.notion <> 'wevent'
    LEFT JOIN at_head t
      ON t.domain = a.domain AND t.user_id = a.user_id AND t.stream_id = a.stream_id
    GROUP BY a.domain"""

_MARKS = """
    WITH last AS (
        SELECT '' AS release_id, domain, 'account' AS kind, max(seq) AS seq FROM entries
        WHERE kind = 'reserve' AND user_id <> '' GROUP BY domain, user_id, stream_id
        UNION ALL
        SELECT release_id, domain, kind, max(seq) FROM entries
        WHERE kind IN ('reserve', 'deny') AND user_id <> ''
        GROUP BY release_id, domain, kind, user_id)
    SELECT release_id, domain, kind, seq FROM last ORDER BY release_id, domain, kind, seq"""

_SINCE_DENIALS = """
    SELECT domain, count(*) AS denied_requests, count(DISTINCT user_id) AS users_denied
    FROM entries WHERE seq > ? AND kind = 'deny' GROUP BY ALL ORDER BY domain"""


Marks = dict[tuple[str, str, str], np.ndarray]
"""`marks`: sorted last entry numbers per (release, domain, kind)."""


def marks(con: duckdb.DuckDBPyConnection) -> Marks:
    """Last entry numbers, sorted, for counting what happened after any kept head.

    ``("", domain, "account")``: each account's last reserve (any release);
    ``(release, domain, "reserve" | "deny")``: each user's last admission or
    denial in that release. How many are after seq s: ``len - searchsorted(s)``.
    """
    cols = con.execute(_MARKS).fetchnumpy()
    seqs = np.asarray(cols["seq"], dtype=np.int64)
    keys = list(zip(cols["release_id"].tolist(), cols["domain"].tolist(),
                    cols["kind"].tolist(), strict=True))
    starts = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]
    return {keys[a]: seqs[a:b] for a, b in zip(starts, starts[1:], strict=False) if a < b}


def _after(mark: Marks, key: tuple[str, str, str], seq: int) -> int:
    m = mark.get(key)
    return 0 if m is None else int(len(m) - np.searchsorted(m, seq, side="right"))


def _charges_since(con: duckdb.DuckDBPyConnection, seq: int, head_seq: int,
                   mark: Marks) -> list[dict[str, Any]]:
    """Accounts charged after `seq` and the largest rise of one account, per domain.

    A head in the later half of the chain: one pass over the entries after it.
    An early head: GP/CGP rises from the accounts' balances now less their
    balance at the head (entries before it), and the accounts charged from
    `mark` (`marks`), so neither reads the many entries after it.
    """
    if 2 * seq >= head_seq:
        return _exact(_rows(con, _SINCE_CHARGES, [seq, True, seq]), "increase")
    rows = _rows(con, _SINCE_CHARGES, [seq, False, seq])  # w-event domains
    charged = {d: _after(mark, (r, d, k), seq) for r, d, k in mark if k == "account"}
    for r in _rows(con, _SINCE_RISE_EARLY, [seq]):
        if charged.get(r["domain"], 0) > 0:
            rows.append({"domain": r["domain"], "accounts_charged": charged[r["domain"]],
                         "increase_q": r["increase_q"]})
    return _exact(sorted(rows, key=lambda r: r["domain"]), "increase")


def _releases_since(con: duckdb.DuckDBPyConnection, seq: int,
                    summary: list[dict[str, Any]], mark: Marks) -> list[dict[str, Any]]:
    """Releases with entries after `seq`, with the users admitted and denied after it.

    Those begun after it come from `summary` (`releases`); for those under way
    at it, the users come from `mark` and the first entry after it from SQL.
    """
    out = []
    for r in summary:
        if r["first_seq"] > seq:
            out.append({"release_id": r["release_id"], "domain": r["domain"],
                        "first_at": r["first_at"], "first_seq": r["first_seq"],
                        "users_admitted": r["admitted"], "users_denied": r["denied"]})
        elif r["last_seq"] > seq:
            key = (r["release_id"], r["domain"])
            first = _rows(con, _SINCE_FIRST, [seq, *key])[0]
            out.append({"release_id": key[0], "domain": key[1], **first,
                        "users_admitted": _after(mark, (*key, "reserve"), seq),
                        "users_denied": _after(mark, (*key, "deny"), seq)})
    return sorted(out, key=lambda r: (r["first_seq"], r["domain"]))


def since(con: duckdb.DuckDBPyConnection, seq: int, digest: str,
          summary: list[dict[str, Any]], mark: Marks) -> dict[str, Any]:
    """What changed after the kept head (seq, hash), as `ledger.audit_data._changes` reads it.

    ``in_chain`` is False (and nothing else is listed) when the chain has no
    entry `seq` with hash `digest`. `summary` (`releases`) and `mark`
    (`marks`) are of this head (kept by the server). Charges per
    domain: accounts charged and the largest rise of one account's balance,
    in the cap's unit (`_charges_since`).
    """
    found = entry_at(con, seq)
    first = {"seq": seq, "hash": digest, "in_chain": found == digest, "found": found}
    if not first["in_chain"]:
        return first
    return {**first,
            "releases": _releases_since(con, seq, summary, mark),
            "charges": _charges_since(con, seq, head(con)[0], mark),
            "denials": _rows(con, _SINCE_DENIALS, [seq]),
            "policy": policy(con, None, 0, after_seq=seq)}
