"""A transaction aborted by a failed statement is not a write conflict (issue #26).

DuckDB answers every statement after a failed one with "Current transaction is
aborted"; `Store.transact` used to take that for a conflict and retry it until
`lock_timeout` (60 s), then report "conflicting ledger transactions". Now the
failed statement's own error comes out at once, and only real conflicts are
retried. Timing-free: the backoff is replaced by a counter.
"""

from __future__ import annotations

import duckdb
import pytest

from ledger import storage

_OVERFLOW = ("INSERT INTO t VALUES "
             "(CAST('170141183460469231731687303715884105727' AS HUGEINT) + 1)")


@pytest.fixture
def store(tmp_path, monkeypatch):
    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    con.execute("CREATE TABLE t (a HUGEINT)")
    con.close()
    sleeps: list[int] = []

    def sleep(attempt: int, deadline: float) -> None:
        sleeps.append(attempt)
        if len(sleeps) > 3:
            raise AssertionError(f"retried {len(sleeps)} times")

    monkeypatch.setattr(storage, "_sleep_backoff", sleep)
    s = storage.Store(tmp_path / "x.duckdb", lock_timeout=3600.0)
    s.sleeps = sleeps  # type: ignore[attr-defined]
    return s


def test_the_failed_statement_error_comes_out_at_once(store):
    def fn(con):
        try:
            con.execute(_OVERFLOW)
        finally:  # clean-up (e.g. unregistering a view) in the aborted transaction
            con.execute("INSERT INTO t VALUES (1)")  # DuckDB: "transaction is aborted"

    with pytest.raises(duckdb.OutOfRangeException, match="Overflow"):
        store.transact(fn)
    assert store.sleeps == [], "an aborted transaction must not be retried"
    assert store.transact(lambda con: con.execute("SELECT count(*) FROM t").fetchone()[0],
                          write=False) == 0


def test_an_uncaught_failed_statement_is_not_retried(store):
    with pytest.raises(duckdb.OutOfRangeException):
        store.transact(lambda con: con.execute(_OVERFLOW))
    assert store.sleeps == []


def test_an_aborted_transaction_without_its_cause_is_raised_as_is(store):
    def fn(con):
        try:
            con.execute(_OVERFLOW)
        except duckdb.OutOfRangeException:
            pass  # a caller that swallowed the error: only DuckDB's "aborted" is left
        con.execute("INSERT INTO t VALUES (1)")

    with pytest.raises(duckdb.TransactionException, match="aborted"):
        store.transact(fn)
    assert store.sleeps == []


def test_a_write_conflict_is_still_retried(store):
    calls = []

    def fn(con):
        calls.append(1)
        if len(calls) == 1:
            raise duckdb.TransactionException("Catalog write-write conflict on alter with 't'")
        con.execute("INSERT INTO t VALUES (2)")
        return "done"

    assert store.transact(fn) == "done"
    assert len(calls) == 2 and store.sleeps == [0]
