"""The audit web page on a ledger of 10^6 users, in headless Chromium: right figures, < 1 s.

The ledger is built through the real Ledger API (`benchmarks/audit/big_ledger.py`,
about 80 s on two shared cores, hence `slow`; it still runs in CI). Expected
figures follow from the rules the builder charged by (`expected_spent`) and
from direct SQL over the entries, never from the page's own code.
"""

from __future__ import annotations

import statistics
import time
import urllib.parse

import duckdb
import pytest

from benchmarks.audit.big_ledger import CHANGE_REASON, build, expected_spent, user_id
from tests.reports.browser import Server, chromium, dump_dom, parse, screenshot

USERS = 1_000_000
DENIED_POOL = 20_000


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    chromium()
    path = tmp_path_factory.mktemp("big") / "ledger.duckdb"
    t0 = time.perf_counter()
    build(path, USERS, batch=200_000, denied_pool=DENIED_POOL, log=lambda _: None)
    built = time.perf_counter() - t0
    con = duckdb.connect(str(path), read_only=True)
    try:
        counts = dict(con.execute("SELECT kind, count(*) FROM entries GROUP BY kind").fetchall())
    finally:
        con.close()
    srv = Server(path)
    srv.wait_verified(timeout=600)
    yield {"server": srv, "counts": counts, "built": built, "path": path}
    srv.stop()


def _timed(srv: Server, path: str) -> float:
    """The median server time of three requests of `path` (ms)."""
    times = []
    for _ in range(3):
        status, _, ms = srv.get(path)
        assert status == 200, path
        times.append(ms)
    return statistics.median(times)


@pytest.mark.slow
def test_user_lookup_on_a_million_users(big, tmp_path):
    srv = big["server"]
    for i in (1, 2, 777_777):
        dom = parse(dump_dom(srv.base + "/user?id=" + user_id(i), tmp_path))
        spent = expected_spent(i, DENIED_POOL)
        bal = dom.table_with("Remaining")[0]
        assert bal["Spent"] == f"{float(spent):g} ε" and bal["Cap"] == "2 ε"
        kinds = [r["What"] for r in dom.table_with("Why denied")]
        if i < DENIED_POOL:
            assert ("DENIED" in kinds) == (i % 2 == 0)
        assert _timed(srv, "/user?id=" + user_id(i)) < 1000
    screenshot(srv.base + "/user?id=" + user_id(2), tmp_path / "user.png", tmp_path)


@pytest.mark.slow
def test_release_and_overview_pages_on_a_million_users(big, tmp_path):
    srv, counts = big["server"], big["counts"]
    over = parse(dump_dom(srv.base + "/", tmp_path))
    assert f"Whole chain verified up to entry {sum(counts.values()):,}" in over.text
    row = over.table_with("Cap per user")[0]
    assert row["Accounts"] == f"{USERS:,}" and row["Denied requests"] == f"{counts['deny']:,}"
    assert counts["deny"] == DENIED_POOL // 2
    assert row["Spent: median"] == "0.1 ε" and row["Spent: largest"] == "0.96 ε"  # 1/100 + 19/20
    rel = parse(dump_dom(srv.base + "/release?id=top-up", tmp_path))
    facts = rel.table_with("Mechanism")[0]
    assert (facts["Users admitted"], facts["Users denied"]) == ("10,000", "10,000")
    bulk = parse(dump_dom(srv.base + "/release?id=bulk", tmp_path))
    assert bulk.table_with("Mechanism")[0]["Users admitted"] == f"{USERS:,}"
    charges = bulk.table_with("Accounts charged")[0]
    # half the users 1/10, half 1/100 (no total: a sum over accounts is no one's loss)
    assert (charges["Accounts charged"], charges["Smallest"], charges["Largest"]) == (
        f"{USERS:,}", "0.01 ε", "0.1 ε")
    nxt = parse(dump_dom(srv.base + bulk.link("Next page →"), tmp_path))  # paging by link
    assert nxt.table_with("Decision")[0]["User"] == user_id(50)
    for path in ("/", "/releases", "/release?id=bulk", "/release?id=top-up", "/denials",
                 "/denials?" + urllib.parse.urlencode({"release": "top-up", "offset": 5000}),
                 "/policy"):
        assert _timed(srv, path) < 1000, path
    policy = parse(dump_dom(srv.base + "/policy", tmp_path)).table_with("Reason given")
    assert policy[0]["Reason given"] == CHANGE_REASON
