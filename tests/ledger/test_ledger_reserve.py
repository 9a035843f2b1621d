"""Reserve / settle / close semantics, idempotency, policy changes and hostile ids."""

from __future__ import annotations

from fractions import Fraction

import duckdb
import pytest
from ledger_helpers import POLICY_ENTRIES

from ledger import (
    Ledger,
    LedgerInternalError,
    NotionMismatchError,
    PolicyChangeError,
    ReplayConflictError,
    Request,
    Settlement,
)
from mechanisms.cost import Cost, CostItem, StepRun
from schemas.errors import ParameterError
from schemas.policy import parse_policy

P = POLICY_ENTRIES  # the fixture's policy writes these entries (seq 1..P) before any charge

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}


def _count(path, sql="SELECT count(*) FROM entries WHERE kind <> 'policy'", params=()):
    con = duckdb.connect(str(path))
    try:
        return con.execute(sql, list(params)).fetchall()[0][0]
    finally:
        con.close()


def _gp(total, *parts):
    return Cost("gp", Fraction(total), tuple(CostItem(f"s{i}", "gp", Fraction(p))
                                             for i, p in enumerate(parts)))


def test_replay_returns_recorded_decisions_and_writes_nothing(led, ledger_path):
    reqs = [Request("a", "ais", amount=0.5), Request("b", "ais", amount=2)]
    first = led.reserve("r1", reqs, mechanism="m", parameters={"k": 1})
    n = _count(ledger_path)
    again = led.reserve("r1", reqs, mechanism="m", parameters={"k": 1})
    assert _count(ledger_path) == n == 2
    assert [d.user_id for d in again.admitted] == ["a"]
    assert [d.user_id for d in again.denied] == ["b"]
    assert all(d.replayed for d in again.admitted + again.denied)
    for x, y in zip(first.admitted + first.denied, again.admitted + again.denied, strict=True):
        assert (x.admitted, x.requested, x.remaining, x.entry_seq, x.reason) == (
            y.admitted, y.requested, y.remaining, y.entry_seq, y.reason)
    with pytest.raises(ReplayConflictError):
        led.reserve("r1", [Request("a", "ais", amount=0.25)], mechanism="m", parameters={})
    assert _count(ledger_path) == n


def test_all_or_nothing_per_user_across_domains_and_steps(led):
    # u can afford the ais charge but not the ecg one: both are denied.
    reqs = [Request("u", "ais", step="svt", amount=0.3),
            Request("u", "ais", step="project", amount=0.3),
            Request("u", "ecg", step="release", notion="cgp", amount=Fraction(3, 4)),
            Request("v", "ais", amount=0.3)]
    res = led.reserve("r", reqs, mechanism="m", parameters={})
    assert {(d.user_id, d.step) for d in res.denied} == {("u", "svt"), ("u", "project"),
                                                          ("u", "release")}
    assert [d.user_id for d in res.admitted] == ["v"]
    assert all("together with" in d.reason for d in res.denied if d.domain == "ais")
    # the same user's steps add up inside one call
    res = led.reserve("r2", [Request("w", "ais", step="a", amount=0.6),
                             Request("w", "ais", step="b", amount=0.5)],
                      mechanism="m", parameters={})
    assert not res.admitted
    bal = {(b["user_id"], b["domain"]): b["spent"] for b in led.balances()}
    assert bal[("u", "ais")] == 0 and bal[("u", "ecg")] == 0
    assert bal[("v", "ais")] == Fraction(3, 10)
    assert bal[("w", "ais")] == 0
    assert led.verify().ok


def test_cgp_mechanism_on_gp_domain_is_refused(led, ledger_path):
    with pytest.raises(NotionMismatchError, match="cannot be charged to a GP"):
        led.reserve("r", [Request("u", "ais", notion="cgp", amount=0.1)],
                    mechanism="m", parameters={})
    with pytest.raises(NotionMismatchError):
        led.reserve("r", [Request("u", "power", notion="gp", amount=0.1)],
                    mechanism="m", parameters={})
    assert _count(ledger_path) == 0
    assert led.release("r") is None  # the failed call left nothing behind


@pytest.mark.parametrize("bad", [
    Request("u", "nope", amount=0.1),
    Request("u", "ais", amount=0),
    Request("u", "ais", amount=-1),
    Request("u", "ais", amount=None),
    Request("", "ais", amount=0.1),
    Request("u\x00", "ais", amount=0.1),
    Request("u", "ais", notion="dp", amount=0.1),
    Request("u", "power", notion="wevent"),
])
def test_bad_requests_are_parameter_errors_and_charge_nothing(led, ledger_path, bad):
    with pytest.raises(ParameterError):
        led.reserve("r", [Request("ok", "ais", amount=0.1), bad], mechanism="m", parameters={})
    assert _count(ledger_path) == 0


def test_duplicate_keys_in_one_call_are_refused(led):
    with pytest.raises(ParameterError, match="duplicate"):
        led.reserve("r", [Request("u", "ais", amount=0.1)] * 2, mechanism="m", parameters={})


def test_settle_refunds_the_unused_part_and_is_idempotent(led, ledger_path):
    led.reserve("r", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    cost = _gp("0.5", "0.125", "0.125")
    led.settle("r", [Settlement("u", "ais", "release", cost)])
    [bal] = led.balances("ais")
    assert bal["spent"] == Fraction(1, 4)
    kinds = [h["kind"] for h in led.history("u")]
    assert kinds == ["reserve", "settle", "refund"]
    assert [h["amount"] for h in led.history("u")] == [Fraction(1, 2), Fraction(1, 4),
                                                        Fraction(1, 4)]
    n = _count(ledger_path)
    led.settle("r", [Settlement("u", "ais", "release", cost)])
    assert _count(ledger_path) == n
    with pytest.raises(ReplayConflictError):
        led.settle("r", [Settlement("u", "ais", "release", _gp("0.5", "0.5"))])
    assert led.release("r")["state"] == "settled"
    detail = _count(ledger_path, "SELECT detail FROM entries WHERE kind = 'settle'")
    assert '"step":"s0"' in detail and '"amount":"1/8"' in detail
    assert led.verify().ok


def test_one_settle_of_many_users_charges_each_its_own_cost(led):
    """Settle prices each distinct cost once (a memo): equal costs share, others never.

    Six users, one call: the costs differ only in their sub-step amounts (same
    requested ε, same steps), or are equal objects apart, or the very same object.
    A memo keyed on less than the whole cost would charge one user another's spend.
    """
    users = [f"u{i}" for i in range(6)]
    led.reserve("r", [Request(u, "ais", amount="0.5") for u in users], mechanism="m",
                parameters={})
    shared = _gp("0.5", "0.25", "0.25")
    costs = [_gp("0.5", "0.125", "0.125"), _gp("0.5", "0.25", "0.125"), shared, shared,
             _gp("0.5", "0.125", "0.125"), _gp("0.5", "0", "0.0625")]
    led.settle("r", [Settlement(u, "ais", "release", c) for u, c in zip(users, costs, strict=True)])
    spent = {b["user_id"]: b["spent"] for b in led.balances("ais")}
    assert spent == {u: c.total for u, c in zip(users, costs, strict=True)}
    assert led.verify().ok


def test_settle_more_than_reserved_is_a_bug(led):
    led.reserve("r", [Request("u", "ais", amount=0.25)], mechanism="m", parameters={})
    with pytest.raises(LedgerInternalError, match="this is a bug"):
        led.settle("r", [Settlement("u", "ais", "release", _gp("0.5", "0.3"))])
    assert led.balances()[0]["spent"] == Fraction(1, 4)


def test_settle_without_admitted_reservation_is_refused(led):
    led.reserve("r", [Request("u", "ais", amount=2)], mechanism="m", parameters={})
    with pytest.raises(ParameterError, match="denied"):
        led.settle("r", [Settlement("u", "ais", "release", _gp("0.1", "0.1"))])
    with pytest.raises(ParameterError, match="no reservation"):
        led.settle("r", [Settlement("x", "ais", "release", _gp("0.1", "0.1"))])
    led.reserve("r2", [Request("u", "ais", amount=0.25)], mechanism="m", parameters={})
    with pytest.raises(ParameterError, match="names domain 'ecg'"):
        led.settle("r2", [Settlement("u", "ecg", "release", _gp("0.25", "0.25"))])
    with pytest.raises(NotionMismatchError):
        led.settle("r2", [Settlement("u", "ais", "release", Cost(
            "cgp", Fraction(1, 4), (CostItem("g", "cgp", Fraction(1, 8)),)))])
    assert led.balances()[0]["spent"] == Fraction(1, 4)


def test_gp_items_settled_on_cgp_domain_compose_as_sum_of_squares(led):
    led.reserve("r", [Request("u", "ecg", notion="gp", amount=Fraction(1, 2))],
                mechanism="m", parameters={})
    # reserved (1/2)^2/2 = 1/8; two sub-steps of 1/4 cost 2 * (1/4)^2/2 = 1/16
    led.settle("r", [Settlement("u", "ecg", "release", _gp("0.5", "0.25", "0.25"))])
    assert led.balances("ecg")[0]["spent"] == Fraction(1, 16)
    assert led.verify().ok


def test_close_refunds_unsettled_reservations_once(led, ledger_path):
    led.reserve("r", [Request("a", "ais", amount=0.5), Request("b", "ais", amount=0.5)],
                mechanism="m", parameters={})
    led.settle("r", [Settlement("a", "ais", "release", _gp("0.5", "0.5"))])
    led.close("r", "flow died; outputs never left the system")
    bal = {b["user_id"]: b["spent"] for b in led.balances()}
    assert bal == {"a": Fraction(1, 2), "b": 0}
    n = _count(ledger_path)
    led.close("r", "again")
    assert _count(ledger_path) == n
    closes = [h for h in led.history("b") if h["kind"] == "close"]
    assert len(closes) == 1 and closes[0]["reason"] == "flow died; outputs never left the system"
    assert led.release("r")["state"] == "closed"
    with pytest.raises(ParameterError, match="closed"):
        led.reserve("r", [Request("c", "ais", amount=0.1)], mechanism="m", parameters={})
    with pytest.raises(ParameterError, match="closed"):
        led.settle("r", [Settlement("b", "ais", "release", _gp("0.5", "0.5"))])
    with pytest.raises(ParameterError, match="unknown release"):
        led.close("nope", "x")
    assert led.verify().ok


def test_close_of_a_release_without_reservations_is_still_audited(led):
    led.reserve("r", [Request("a", "ais", amount=5)], mechanism="m", parameters={})
    led.close("r", "nothing admitted")
    rng = led.entry_range("r")
    assert rng == (P + 1, P + 2)
    assert led.verify().ok


HOSTILE = [
    "o'brien", '"; DROP TABLE entries; --', "'; DROP TABLE entries; --", "x" * 10_240,
    "ユーザー😀", "tab\tnew\nline", "back\\slash", "%s ? $1 :name", "' OR '1'='1",
]


def test_hostile_ids_are_stored_and_shown_verbatim(led, ledger_path, tmp_path):
    reqs = [Request(u, "ais", step=u[:50], amount=0.1) for u in HOSTILE]
    res = led.reserve(HOSTILE[1], reqs, mechanism=HOSTILE[2], parameters={"n": HOSTILE[3]},
                      flow_run_id=HOSTILE[4], input_fingerprint=HOSTILE[0])
    assert len(res.admitted) == len(HOSTILE)
    assert {b["user_id"] for b in led.balances()} == set(HOSTILE)
    for u in HOSTILE:
        [h] = led.history(u)
        assert h["step"] == u[:50] and h["release_id"] == HOSTILE[1]
        assert h["mechanism"] == HOSTILE[2]
    assert led.entry_range(HOSTILE[1]) == (P + 1, P + len(HOSTILE))
    assert _count(ledger_path, "SELECT count(*) FROM information_schema.tables "
                               "WHERE table_name = 'entries'") == 1
    led.export(tmp_path / "e.json", fmt="json")
    import json
    rows = json.loads((tmp_path / "e.json").read_text())
    assert {r["user_id"] for r in rows if r["kind"] != "policy"} == set(HOSTILE)
    assert led.verify().ok
    assert led.noise_seeds(HOSTILE[1], [HOSTILE[4]], ["fp"], {})[HOSTILE[4]] > 0


def test_apply_policy_is_idempotent_and_refuses_meaning_changes(led, policy):
    assert led.apply_policy(policy) == []
    led.reserve("r", [Request("u", "power", notion="wevent",
                              runs=(StepRun(0, 2, Fraction(1, 4)),))], mechanism="m",
                parameters={})
    raw = parse_policy({"domains": {
        "power": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 8,
                  "value_range": [0.0, 1.0], "value_unit": "MW"}}}, source="p2")
    with pytest.raises(PolicyChangeError, match="w"):
        led.apply_policy(raw)
    raw = parse_policy({"domains": {
        "power": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 4,
                  "value_range": [0.0, 1.0], "value_unit": "kW"}}}, source="p3")
    with pytest.raises(PolicyChangeError, match="value_unit"):
        led.apply_policy(raw)
    # a cap change is allowed and applies to the accounts
    raw = parse_policy({"domains": {
        "ais": {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "2", "value_columns": ["x", "y"],
                "value_unit": "m"},
        "ecg": {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "1"}}}, source="p4")
    led.reserve("r2", [Request("u", "ais", amount=1)], mechanism="m", parameters={})
    changes = led.apply_policy(raw)
    assert any("cap 1 -> 2" in c for c in changes)
    assert any("'ecg': changed notion" in c for c in changes)  # ecg had no charges
    assert {d["domain"]: d["notion"] for d in led.domains()}["ecg"] == "gp"
    assert [b["cap"] for b in led.balances("ais")] == [2]
    assert led.reserve("r3", [Request("u", "ais", amount=1)], mechanism="m",
                       parameters={}).admitted
    assert led.verify().ok


def test_record_release_and_lookup(led):
    assert led.release("r") is None
    led.record_release("r", {"users": 3, "eps": Fraction(1, 3), "ok": True}, "reserved")
    rec = led.release("r")
    assert rec["state"] == "reserved" and rec["manifest"] == {"users": 3, "eps": "1/3", "ok": True}
    led.record_release("r", {"users": 3}, "failed")
    assert led.release("r")["state"] == "failed"
    with pytest.raises(ParameterError):
        led.record_release("r", {}, "done")
    with pytest.raises(ParameterError):
        led.record_release("r", {"x": object()}, "settled")
    led.close("r", "operator")
    with pytest.raises(ParameterError, match="reopened"):
        led.record_release("r", {}, "reserved")


def test_queries(led):
    led.reserve("r1", [Request("a", "ais", amount=0.5), Request("b", "ais", amount=3)],
                mechanism="m", parameters={})
    rels = led.releases()
    assert rels[0]["release_id"] == "r1" and rels[0]["users_admitted"] == 1
    # per account, never summed over users: only a (1/2) was charged, b was denied
    assert rels[0]["users_denied"] == 1 and rels[0]["spent_max"] == Fraction(1, 2)
    assert rels[0]["accounts"] == 1 and rels[0]["unit"] == "ε"
    [den] = led.denials()
    assert den["user_id"] == "b" and den["requested"] == 3 and "cap" in den["reason"]
    assert led.entry_range("r1") == (P + 1, P + 2) and led.entry_range("zz") is None
    assert Ledger(led.path).balances("ecg") == []


def test_auditor_views_answer_with_plain_duckdb(led, ledger_path):
    led.reserve("r1", [Request("full", "ais", amount=Fraction(19, 20)),
                       Request("low", "ais", amount=Fraction(1, 10)),
                       Request("deny", "ais", amount=2)], mechanism="m", parameters={})
    led.settle("r1", [Settlement("low", "ais", "release", _gp("0.1", "0.05"))])
    con = duckdb.connect(str(ledger_path))  # a separate, plain connection
    try:
        bal = dict(con.execute("SELECT user_id, spent FROM balances").fetchall())
        assert bal == {"full": pytest.approx(0.95), "low": pytest.approx(0.05), "deny": 0.0}
        exact = con.execute("SELECT CAST(spent_quanta AS VARCHAR) FROM balances "
                            "WHERE user_id = 'low'").fetchall()[0][0]
        units = con.execute("SELECT value FROM meta WHERE key = 'units_per_epsilon'").fetchall()
        assert Fraction(int(exact), int(units[0][0])) == Fraction(1, 20)
        assert con.execute("SELECT user_id FROM near_cap").fetchall() == [("full",)]
        summary = con.execute("SELECT users_admitted, users_denied, refunded, net_spent, "
                              "first_seq, last_seq FROM release_summary").fetchall()
        assert summary == [(2, 1, pytest.approx(0.05), pytest.approx(1.0), P + 1, P + 5)]
        den = con.execute("SELECT user_id, requested, remaining_before FROM denials").fetchall()
        assert den == [("deny", 2.0, 1.0)]
        hist = con.execute("SELECT kind FROM user_history WHERE user_id = 'low' "
                           "ORDER BY seq").fetchall()
        assert hist == [("reserve",), ("settle",), ("refund",)]
    finally:
        con.close()


def test_one_amount_object_shared_by_requests_of_two_domains(led, ledger_path):
    led.apply_policy(parse_policy({"domains": {"ais2": {"kind": "curves", **PUBLIC, "notion": "gp",
                                                         "cap": "2"}}}))
    eps = Fraction(1, 4)  # the very same object in all three requests
    reqs = [Request("u", "ais", notion="gp", amount=eps),
            Request("u", "ais2", step="b", notion="gp", amount=eps),
            Request("u", "ecg", step="c", notion="gp", amount=eps)]
    res = led.reserve("r", reqs, mechanism="m", parameters={})
    assert [d.requested for d in res.admitted] == [Fraction(1, 4), Fraction(1, 4), Fraction(1, 32)]
    # replayed in another order, with equal but distinct amount objects
    again = led.reserve("r", [Request("u", "ecg", step="c", notion="gp", amount=Fraction(1, 4)),
                              Request("u", "ais2", step="b", notion="gp", amount=Fraction(1, 4)),
                              Request("u", "ais", notion="gp", amount=Fraction(1, 4))],
                        mechanism="m", parameters={})
    assert all(d.replayed for d in again.admitted) and len(again.admitted) == 3
    assert [d.domain for d in again.admitted] == ["ecg", "ais2", "ais"]


def test_a_release_reserved_and_settled_chunk_by_chunk(led):
    from mechanisms.cost import WEventCost

    users = [f"u{i}" for i in range(9)]
    for k in range(3):
        chunk = users[3 * k: 3 * k + 3]
        res = led.reserve("big", [Request(u, "ais", amount=0.5) for u in chunk]
                          + [Request(u, "power", notion="wevent", stream_id="s",
                                     runs=(StepRun(0, 4, Fraction(1, 4)),)) for u in chunk],
                          mechanism="m", parameters={})
        assert len(res.admitted) == 6
    for k in range(3):
        chunk = users[3 * k: 3 * k + 3]
        led.settle("big", [Settlement(u, "ais", "release", _gp("0.5", "0.25")) for u in chunk]
                   + [Settlement(u, "power", "release",
                                 WEventCost(Fraction(1), 4, (StepRun(0, 2, Fraction(1, 4)),)),
                                 stream_id="s") for u in chunk])
        if k < 2:
            assert led.release("big")["state"] == "reserved"
    assert led.release("big")["state"] == "settled"
    # a replay of the first chunk answers from the ledger
    again = led.reserve("big", [Request(u, "ais", amount=0.5) for u in users[:3]],
                        mechanism="m", parameters={})
    assert all(d.replayed and d.admitted for d in again.admitted)
    assert {b["spent"] for b in led.balances("ais")} == {Fraction(1, 4)}
    assert {b["spent"] for b in led.balances("power")} == {Fraction(1, 2)}
    assert led.verify().ok


def _entries(path):
    con = duckdb.connect(str(path))
    try:
        return con.execute(
            "SELECT seq, user_id, domain, step, stream_id, kind, CAST(amount AS VARCHAR), notion, "
            "CAST(cap AS VARCHAR), CAST(balance_after AS VARCHAR), detail, reason FROM entries "
            "ORDER BY seq").fetchall(), con.execute(
            "SELECT user_id, domain, stream_id, CAST(spent AS VARCHAR) FROM accounts "
            "ORDER BY ALL").fetchall()
    finally:
        con.close()


def test_shared_and_distinct_amount_objects_write_the_same_entries(tmp_path, policy):
    """One amount or cost object for all, or equal distinct ones: the same entries.

    reserve and settle price equal amounts once (a memo by object and value);
    the result must not depend on how the caller built its objects.
    """
    eps = Fraction(1, 4)
    runs = {}
    for shared in (True, False):
        path = tmp_path / f"{shared}.duckdb"
        led = Ledger.init(path, actor="pytest")
        led.apply_policy(policy)
        users = [f"u{i}" for i in range(5)]
        led.reserve("r0", [Request("u0", "ais", amount=Fraction(9, 10))], mechanism="m",
                    parameters={})  # u0 will be denied in r1
        amounts = [eps] * 5 if shared else [Fraction(1, 4) + 0 for _ in range(5)]
        res = led.reserve("r1", [Request(u, "ais", amount=a) for u, a in zip(users, amounts,
                                                                               strict=True)],
                          mechanism="m", parameters={"k": 1})
        cost = Cost("gp", eps, (CostItem("a", "gp", Fraction(1, 8)),))
        costs = [cost] * 4 if shared else [Cost("gp", eps, (CostItem("a", "gp", Fraction(1, 8)),))
                                           for _ in range(4)]
        led.settle("r1", [Settlement(u, "ais", "release", c) for u, c in zip(users[1:], costs,
                                                                               strict=True)])
        res2 = led.reserve("r2", [Request(u, "ais", amount=eps) for u in users[1:]],
                           mechanism="m", parameters={})
        assert led.verify().ok
        runs[shared] = (_entries(path), [(d.user_id, d.admitted, d.requested, d.remaining,
                                          d.entry_seq) for d in res.admitted + res.denied
                                         + res2.admitted + res2.denied])
    assert runs[True] == runs[False]
    (entries, accounts), decisions = runs[True]
    assert [e[5] for e in entries].count("refund") == 4 and len(accounts) == 5
    assert ("u0", False, eps, Fraction(1, 10), P + 2) in decisions


def _decisions(res):
    return [(d.user_id, d.domain, d.step, d.stream_id, d.admitted, d.reason, d.requested,
             d.remaining, d.replayed, d.notion, d.units) for d in res.admitted + res.denied]


def test_plan_decides_as_reserve_and_writes_nothing(led, ledger_path):
    wev = Request("w", "power", notion="wevent", stream_id="s",
                  runs=(StepRun(0, 4, Fraction(1, 4)),))
    led.reserve("r0", [Request("u", "ais", amount=0.75), wev], mechanism="m", parameters={})
    calls = [
        ("r1", [Request("u", "ais", amount=0.25), Request("v", "ais", amount=2),
                Request("u", "ecg", step="e", notion="gp", amount=0.5),
                Request("w", "power", notion="wevent", stream_id="s",
                        runs=(StepRun(2, 6, Fraction(1, 4)),)),
                Request("x", "power", notion="wevent", stream_id="s",
                        runs=(StepRun(0, 2, Fraction(1, 2)),))]),
        ("r0", [Request("u", "ais", amount=0.75), Request("new", "ais", amount=0.5)]),
    ]
    for rid, reqs in calls:
        n, known = _count(ledger_path), led.release(rid) is not None
        planned = led.plan(rid, reqs)
        assert _count(ledger_path) == n and (led.release(rid) is not None) == known
        assert all(d.entry_seq == 0 for d in planned.admitted + planned.denied if not d.replayed)
        reserved = led.reserve(rid, reqs, mechanism="m", parameters={})
        assert _decisions(planned) == _decisions(reserved)
    with pytest.raises(ReplayConflictError):
        led.plan("r0", [Request("u", "ais", amount=0.5)])
    led.close("r1", "test")
    with pytest.raises(ParameterError, match="closed"):
        led.plan("r1", [Request("late", "ais", amount=0.1)])
    assert led.verify().ok
