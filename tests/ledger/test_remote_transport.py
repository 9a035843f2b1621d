"""`ledger.remote._Transport.retrying`: the one retry loop of the service's clients
(operations on the keep-alive connection, published files on a fresh one each try)."""

from __future__ import annotations

import http.client

import pytest

from ledger.errors import LedgerBusyError
from ledger.remote import _Transport


def _flaky(fails: int, seen: list):
    """A call that fails with a connection error `fails` times, then answers."""
    def call(con):
        seen.append(con)
        if len(seen) <= fails:
            raise ConnectionResetError("reset by peer")
        return "answer"
    return call


@pytest.mark.parametrize("fresh", [False, True])
def test_connection_errors_are_retried_until_an_answer(fresh, monkeypatch):
    monkeypatch.setattr("ledger.remote.time.sleep", lambda s: None)
    tr = _Transport("https://127.0.0.1:9", "t", None, retry_seconds=60)
    seen: list[http.client.HTTPSConnection] = []
    assert tr.retrying(_flaky(2, seen), fresh=fresh) == "answer"
    assert len(seen) == 3 and len({id(c) for c in seen}) == 3  # a new connection each try
    kept = getattr(tr._local, "con", None)
    assert (kept is None) if fresh else (kept is seen[-1])  # fresh ones are not kept


@pytest.mark.parametrize("fresh", [False, True])
def test_no_answer_until_the_deadline_is_busy(fresh, monkeypatch):
    monkeypatch.setattr("ledger.remote.time.sleep", lambda s: None)
    tr = _Transport("https://127.0.0.1:9", "t", None, retry_seconds=0)
    seen: list = []
    with pytest.raises(LedgerBusyError, match="did not answer for 0 s"):
        tr.retrying(_flaky(10, seen), fresh=fresh)
    assert len(seen) == 1
