"""Hypothesis state machine: random reserve / settle / replay / close sequences.

An independent model in exact Fractions predicts every decision and balance;
the ledger must agree, never exceed a cap, write nothing on replays, and keep
its balances equal to the sum of its entries (`verify`). The pure admission
function (`ledger.admission.admit`) is also run directly on the model's state
before every reserve and must make the model's decisions.
"""

from __future__ import annotations

import shutil
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from ledger_helpers import POLICY, POLICY_ENTRIES

from ledger import Ledger, Request, Settlement
from ledger.admission import Accounts, Charges, admit
from ledger.amounts import cap_units, charge_units
from mechanisms.cost import Cost, CostItem
from schemas.errors import ParameterError
from schemas.policy import parse_policy

USERS = ("u0", "u1", "u2")
CAPS = {"ais": Fraction(1), "ecg": Fraction(1, 2)}
# ε values whose charges (ε on ais, ε²/2 on ecg) and quarter-settlements are exact quanta.
AMOUNTS = {"ais": (Fraction(1, 10), Fraction(1, 11), Fraction(1, 3), Fraction(1, 4),
                   Fraction(3, 10)),
           "ecg": (Fraction(1, 10), Fraction(1, 4), Fraction(1, 2), Fraction(3, 10))}


def _cost(domain: str, eps: Fraction) -> Fraction:
    return eps if domain == "ais" else eps * eps / 2


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ledger-sm-"))
        self.led = Ledger.init(self.dir / "l.duckdb", actor="hypothesis")
        self.led.apply_policy(parse_policy(POLICY))
        self.spent = {(u, d): Fraction(0) for u in USERS for d in CAPS}
        # (release, user, step) -> dict(domain, eps, charged, status)
        self.res: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, list[Request], list[tuple[str, str, bool]]]] = []
        self.closed: set[str] = set()
        self.n_entries = POLICY_ENTRIES
        self.n_rel = 0

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(picks=st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(["ais", "ecg"]),
                                   st.integers(0, 4), st.sampled_from(["a", "b"])),
                         min_size=1, max_size=5, unique_by=lambda t: (t[0], t[3])))
    def reserve(self, picks):
        self.n_rel += 1
        rel = f"rel-{self.n_rel}"
        reqs = []
        for user, dom, k, step in picks:
            eps = AMOUNTS[dom][k % len(AMOUNTS[dom])]
            reqs.append(Request(user, dom, step=step, notion="gp", amount=eps))
        direct = self._admit_directly(reqs)
        # model: all-or-nothing per user
        by_user: dict[str, list[Request]] = {}
        for r in reqs:
            by_user.setdefault(r.user_id, []).append(r)
        expect = {}
        for user, rs in by_user.items():
            add = {}
            for r in rs:
                add[r.domain] = add.get(r.domain, 0) + _cost(r.domain, r.amount)
            ok = all(self.spent[(user, d)] + a <= CAPS[d] for d, a in add.items())
            for r in rs:
                expect[(user, r.step)] = ok
            if ok:
                for d, a in add.items():
                    self.spent[(user, d)] += a
        assert direct == expect
        result = self.led.reserve(rel, reqs, mechanism="m", parameters={"n": self.n_rel})
        got = {(d.user_id, d.step): d.admitted for d in result.admitted + result.denied}
        assert got == expect
        for r in reqs:
            self.res[(rel, r.user_id, r.step)] = {
                "domain": r.domain, "eps": r.amount, "charged": _cost(r.domain, r.amount),
                "status": "reserved" if expect[(r.user_id, r.step)] else "denied"}
        self.n_entries += len(reqs)
        self.calls.append((rel, reqs, sorted((k[0], k[1], v) for k, v in expect.items()),
                           {"n": self.n_rel}))

    def _admit_directly(self, reqs):
        """The pure admission function on the model's balances: {(user, step): admitted}."""
        users = list(dict.fromkeys(r.user_id for r in reqs))
        accs = list(dict.fromkeys((r.user_id, r.domain) for r in reqs))

        def objects(values):
            out = np.empty(len(values), object)
            out[:] = values
            return out

        accounts = Accounts(cap=objects([cap_units(CAPS[d]) for _, d in accs]),
                            spent=objects([charge_units(self.spent[a]) for a in accs]),
                            w=np.zeros(len(accs), np.int64), history=[[] for _ in accs],
                            labels=["ε"] * len(accs), streams=[""] * len(accs))
        charges = Charges(
            user=np.array([users.index(r.user_id) for r in reqs], np.int64),
            account=np.array([accs.index((r.user_id, r.domain)) for r in reqs], np.int64),
            units=objects([charge_units(_cost(r.domain, r.amount)) for r in reqs]),
            runs=[[] for _ in reqs], denied_before=np.zeros(len(users), bool))
        out = admit(accounts, charges)
        return {(r.user_id, r.step): bool(a) for r, a in zip(reqs, out.admitted, strict=True)}

    @precondition(lambda self: self.calls)
    @rule(i=st.integers(0, 10**6))
    def replay(self, i):
        rel, reqs, expected, params = self.calls[i % len(self.calls)]
        result = self.led.reserve(rel, reqs, mechanism="m", parameters=params)
        got = sorted((d.user_id, d.step, d.admitted) for d in result.admitted + result.denied)
        assert got == expected
        assert all(d.replayed for d in result.admitted + result.denied)

    @precondition(lambda self: any(v["status"] == "reserved" for v in self.res.values()))
    @rule(i=st.integers(0, 10**6), quarters=st.integers(0, 4))
    def settle(self, i, quarters):
        open_keys = sorted(k for k, v in self.res.items() if v["status"] == "reserved")
        rel, user, step = open_keys[i % len(open_keys)]
        r = self.res[(rel, user, step)]
        used = r["eps"] * quarters / 4
        items = (CostItem("main", "gp", used),) if quarters else ()
        self.led.settle(rel, [Settlement(user, r["domain"], step,
                                         Cost("gp", r["eps"], items))])
        actual = _cost(r["domain"], used)
        refund = r["charged"] - actual
        self.spent[(user, r["domain"])] -= refund
        r["status"] = "settled"
        self.n_entries += 1 + (refund > 0)

    @precondition(lambda self: self.calls)
    @rule(i=st.integers(0, 10**6))
    def close(self, i):
        rel = self.calls[i % len(self.calls)][0]
        unsettled = [k for k, v in self.res.items() if k[0] == rel and v["status"] == "reserved"]
        self.led.close(rel, "hypothesis")
        for k in unsettled:
            v = self.res[k]
            self.spent[(k[1], v["domain"])] -= v["charged"]
            v["status"] = "closed"
        if unsettled:
            self.n_entries += len(unsettled)
        elif rel not in self.closed:
            self.n_entries += 1
        self.closed.add(rel)

    @precondition(lambda self: self.closed)
    @rule()
    def new_charge_on_closed_release_is_refused(self):
        rel = sorted(self.closed)[0]
        params = next(c[3] for c in self.calls if c[0] == rel)  # its own binding
        with pytest.raises(ParameterError, match="closed"):
            self.led.reserve(rel, [Request("zz", "ais", step="new", amount=Fraction(1, 10))],
                             mechanism="m", parameters=params)

    @invariant()
    def balances_match_model_and_entries(self):
        bal = {(b["user_id"], b["domain"]): b["spent"] for b in self.led.balances()}
        for key, spent in self.spent.items():
            assert bal.get(key, Fraction(0)) == spent
            assert spent <= CAPS[key[1]]
        rep = self.led.verify()  # recomputes the chain and every balance from the entries
        assert rep.ok, rep.message
        assert rep.entries_checked == self.n_entries  # replays wrote nothing


TestLedgerMachine = pytest.mark.slow(LedgerMachine.TestCase)
TestLedgerMachine.settings = settings(
    max_examples=8, stateful_step_count=10, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
