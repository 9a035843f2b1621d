"""Exact summaries of many accounts or charges, computed in the database.

A release report needs the spread of a release's charges and of a domain's
balances (count, min, median, max, and the distinct values when there are
few), not one row per account: at 10^6 users those rows cost gigabytes of
Python objects. These queries return the same figures, exact (integer
quanta aggregated by DuckDB, converted to `Fraction` at the end), whatever
the number of accounts.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb

from ledger.amounts import from_units

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


def spread_of(values: list[Fraction]) -> Spread | None:
    """The `Spread` of amounts already in memory (None when there are none)."""
    if not values:
        return None
    v = sorted(values)
    distinct: dict[Fraction, int] = {}
    for x in v:
        distinct[x] = distinct.get(x, 0) + 1
    return Spread(len(v), v[0], v[(len(v) - 1) // 2], v[-1],
                  tuple(distinct.items()) if len(distinct) <= MAX_DISTINCT else None)


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
