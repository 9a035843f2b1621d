"""The ledger service killed inside a write transaction (issue #28, deliverable 2).

`privpipe ledger serve` runs in a subprocess whose `ledger.storage.save_accounts`
pauses once, when an "arm" file exists: the reserve's (or the settle's) entries
and account rows are then written but not committed. The test SIGKILLs the
server there, restarts it, and the client's own retry finishes the call:

- nothing of the killed transaction survives on its own (verify ok; every
  user has exactly one reserve, one settle and one refund entry, not two);
- the balances are exactly the settled amounts, once.
"""

from __future__ import annotations

import signal
import textwrap
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_helpers import PYTHON
from served_helpers import Served, start_server

from ledger import Filter, Ledger, Request, Settlement
from ledger.remote import RemoteLedger
from mechanisms.cost import Cost, CostItem
from schemas.policy import parse_policy

pytestmark = [pytest.mark.slow]

# The server, with save_accounts pausing inside the transaction while ARM exists.
PAUSING_SERVER = textwrap.dedent("""
    import os, sys, time
    import ledger.storage as storage
    from flows.cli import app

    arm, paused = sys.argv[1], sys.argv[2]
    orig = storage.save_accounts

    def pausing(con, accounts):
        orig(con, accounts)  # written inside the transaction, not committed
        if os.path.exists(arm):
            os.unlink(arm)
            open(paused, "w").close()
            time.sleep(600)

    storage.save_accounts = pausing
    app(sys.argv[3:], prog_name="privpipe")
""")

USERS = sorted(f"user-{i}" for i in range(40))
PARAMS = {"epsilon": "1/4", "mechanism": "test"}


def _cost(total: str) -> Cost:
    return Cost("gp", Fraction(total), (CostItem("s0", "gp", Fraction(total)),))


@pytest.fixture()
def served(tmp_path) -> Served:
    from tests.ledger.ledger_helpers import POLICY

    path = tmp_path / "led" / "ledger.duckdb"
    Ledger.init(path, actor="pytest").apply_policy(parse_policy(POLICY, source="p"))
    s = start_server(path, tmp_path)
    s.stop()
    s.args = [PYTHON, "-c", PAUSING_SERVER, str(tmp_path / "arm"), str(tmp_path / "paused"),
              *s.args[s.args.index("ledger"):]]
    s.restart()
    yield s
    s.stop()


def _client(served: Served, who: str) -> RemoteLedger:
    return RemoteLedger(served.url, token=served.tokens[who], ca=str(served.ca),
                        retry_seconds=120)


def _kill_inside(served: Served, call) -> object:
    """Run `call` in a thread; SIGKILL the server inside its write; restart; the answer."""
    tmp = Path(served.args[3]).parent
    (tmp / "arm").touch()
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("answer", call()), daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    while not (tmp / "paused").exists():
        assert time.monotonic() < deadline and served.proc.poll() is None, "never paused"
        time.sleep(0.05)
    (tmp / "paused").unlink()
    served.stop(signal.SIGKILL)
    served.restart()  # the arm file is gone: this server commits
    t.join(180)
    assert not t.is_alive() and "answer" in box, "the client's retry did not finish"
    return box["answer"]


def test_a_server_killed_inside_reserve_and_settle_charges_once(served):
    rel = _client(served, "rel-a")
    reqs = [Request(u, "ais", amount=Fraction(1, 4)) for u in USERS]
    res = _kill_inside(served, lambda: rel.reserve("k1", reqs, mechanism="curves_gp",
                                                   parameters=PARAMS))
    assert sorted(d.user_id for d in res.admitted) == USERS and not res.denied
    settles = [Settlement(u, "ais", "release", _cost("1/5")) for u in USERS]
    _kill_inside(served, lambda: rel.settle("k1", settles))

    aud = _client(served, "aud")
    assert aud.verify().ok
    rows = aud.history(where=Filter(release="k1"))
    kinds = sorted((r["user_id"], r["kind"]) for r in rows)
    # settled below the reservation: one reserve, one settle and one refund each, once
    assert kinds == sorted((u, k) for u in USERS for k in ("reserve", "settle", "refund"))
    spent = {r["user_id"]: r["spent"] for r in aud.balances("ais")}
    assert {u: spent[u] for u in USERS} == {u: Fraction(1, 5) for u in USERS}
