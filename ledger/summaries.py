"""Exact summaries of many accounts or charges, computed in the database.

A release report needs the spread of a release's charges and of a domain's
balances (count, min, median, max, and the distinct values when there are
few), not one row per account: at 10^6 users those rows cost gigabytes of
Python objects. These queries return the same figures, exact (integer
quanta aggregated by DuckDB, converted to `Fraction` at the end), whatever
the number of accounts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import groupby
from typing import Any

import duckdb

from ledger import storage, wevent_budget
from ledger.accounting import Run, max_window
from ledger.amounts import from_units

#: rows of step runs fetched at a time while the window charges are swept
FETCH_ROWS = 50_000

#: Distinct values listed with their counts when there are at most this many.
MAX_DISTINCT = 12


@dataclass(frozen=True)
class Spread:
    """Exact figures of a set of amounts.

    Attributes:
        n: how many; low, median, high: the minimum, the median (the lower
            of the two middle values when `n` is even, `statistics.median_low`)
            and the maximum; counts: (value, how many) in increasing value when
            there are at most `MAX_DISTINCT` distinct values, else None.
    """

    n: int
    low: Fraction
    median: Fraction
    high: Fraction
    counts: tuple[tuple[Fraction, int], ...] | None


def spread_of_counts(counts: Mapping[int, int]) -> Spread | None:
    """The `Spread` of integer quanta given as {value: how many} (None when empty)."""
    n = sum(counts.values())
    if not n:
        return None
    values = sorted(counts)
    middle, seen = (n - 1) // 2, 0
    for v in values:  # the lower median: the value at sorted position (n - 1) // 2
        seen += counts[v]
        if seen > middle:
            median = v
            break
    return Spread(n, from_units(values[0]), from_units(median), from_units(values[-1]),
                  tuple((from_units(v), counts[v]) for v in values)
                  if len(values) <= MAX_DISTINCT else None)


def _spread(con: duckdb.DuckDBPyConnection, query: str, params: list[Any]) -> Spread | None:
    """The `Spread` of column ``v`` (integer quanta) of `query`, in the database.

    `query` is one of this module's constant SQL texts (never user input).
    """
    n, low, high, distinct = con.execute(
        "SELECT count(*), CAST(min(v) AS VARCHAR), CAST(max(v) AS VARCHAR), "  # noqa: S608
        f"count(DISTINCT v) FROM ({query})", params).fetchone()
    if not n:
        return None
    (median,) = con.execute(f"SELECT CAST(v AS VARCHAR) FROM ({query}) ORDER BY v "  # noqa: S608
                            "LIMIT 1 OFFSET ?", [*params, (n - 1) // 2]).fetchone()
    counts = None
    if distinct <= MAX_DISTINCT:
        counts = tuple((from_units(int(v)), int(c)) for v, c in con.execute(
            f"SELECT CAST(v AS VARCHAR), count(*) FROM ({query}) GROUP BY v "  # noqa: S608
            "ORDER BY v", params).fetchall())
    return Spread(int(n), from_units(int(low)), from_units(int(median)),
                  from_units(int(high)), counts)


def user_charges(con: duckdb.DuckDBPyConnection, release_id: str) -> Spread | None:
    """The spread of what one release charged each user, net, summed over its accounts.

    The per-user sums of `queries.release_charges` ``net`` (reserved - refunded
    - closed): right for ε-GP and ρ-CGP, where a user's charge is the sum of its
    curves'. (A w-event charge is a window's, not a sum: `tasks.report` takes
    it from `release_charges`.)
    """
    return _spread(con, "SELECT sum(CASE e.kind WHEN 'reserve' THEN 1 ELSE -1 END * e.amount) "
                        "AS v FROM entries e WHERE e.release_id = ? "
                        "AND e.kind IN ('reserve', 'refund', 'close') AND e.user_id <> '' "
                        "GROUP BY e.user_id", [release_id])


@dataclass(frozen=True)
class DomainBudget:
    """A domain's accounts after a release (`balance_summary`).

    Attributes:
        accounts: how many; cap: the largest cap; spent, remaining: their
            spreads; near: accounts whose remaining budget is at most a tenth
            of `cap`.
    """

    accounts: int
    cap: Fraction
    spent: Spread
    remaining: Spread
    near: int


def balance_summary(con: duckdb.DuckDBPyConnection, domain: str) -> DomainBudget | None:
    """The spread of every account of `domain` (every release so far), exact; None if none."""
    spent = _spread(con, "SELECT spent AS v FROM accounts WHERE domain = ?", [domain])
    remaining = _spread(con, "SELECT cap - spent AS v FROM accounts WHERE domain = ?",
                        [domain])
    if spent is None or remaining is None:
        return None
    (cap,) = con.execute("SELECT CAST(max(cap) AS VARCHAR) FROM accounts WHERE domain = ?",
                         [domain]).fetchone()
    (near,) = con.execute("SELECT count(*) FROM accounts WHERE domain = ? "
                          "AND 10 * (cap - spent) <= CAST(? AS HUGEINT)",
                          [domain, cap]).fetchone()
    return DomainBudget(spent.n, from_units(int(cap)), spent, remaining, int(near))


def _user_runs(con: duckdb.DuckDBPyConnection, release_id: str
               ) -> Iterator[tuple[str, list[tuple[str, str, int, int, int, int]]]]:
    """(user, its rows) in user order: (domain, stream, w, run start, stop, signed quanta).

    Fetched `FETCH_ROWS` at a time, so memory holds one batch and one user's
    rows, whatever the number of users. Every w-event reserve has its step
    runs (the ledger refuses a request without), so every charged user is here.
    """
    cur = con.execute(
        "SELECT e.user_id, e.domain, e.stream_id, d.w, s.run_start, s.run_stop, "
        "CAST(CASE e.kind WHEN 'reserve' THEN 1 ELSE -1 END * s.amount AS VARCHAR) "
        "FROM entries e JOIN domains d ON d.domain = e.domain "
        "JOIN step_runs s ON s.seq = e.seq "
        "WHERE e.release_id = ? AND e.kind IN ('reserve', 'refund', 'close') "
        "AND e.user_id <> '' ORDER BY e.user_id", [release_id])

    def rows() -> Iterator[tuple[Any, ...]]:
        while batch := cur.fetchmany(FETCH_ROWS):
            yield from batch

    for user, group in groupby(rows(), key=lambda r: r[0]):
        yield user, [(dom, stream, int(w or 0), int(start), int(stop), int(q))
                     for _, dom, stream, w, start, stop, q in group]


def window_charges(con: duckdb.DuckDBPyConnection, release_id: str
                   ) -> tuple[Spread | None, bool]:
    """The spread of what a w-event release charged each user per window, exact.

    A user's charge is its largest net sum over w consecutive steps
    (`accounting.max_window`): over all of its streams in a per-user domain
    (`ledger.wevent_budget`), else its most charged stream's. These are the
    ``user_window`` / ``window`` figures of `queries.release_charges`, but
    swept user by user in the database's order and kept as {value: count}:
    no row per user in memory (at 10^6 stream users those rows cost over a
    GB). Returns (spread, whether the windows cover all of a user's streams).
    """
    per_user = wevent_budget.per_user_domains(storage.load_domains(con))
    counts: Counter[int] = Counter()
    over_streams = False
    for _, rows in _user_runs(con, release_id):
        accounts: dict[tuple[str, str], tuple[int, list[Run]]] = {}
        for dom, stream, w, start, stop, q in rows:
            key = (dom, wevent_budget.ALL_STREAMS if dom in per_user else stream)
            accounts.setdefault(key, (w, []))[1].append((start, stop, q))
        over_streams = over_streams or any(dom in per_user for dom, _ in accounts)
        counts[max(max_window(runs, w)[0] if w else 0
                   for w, runs in accounts.values())] += 1
    return spread_of_counts(counts), over_streams
