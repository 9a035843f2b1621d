"""w-event budgets per user (issue #10 item 4): one user's streams share the user's windows.

The attack: one user with three streams in a w-event domain releases ε per
window on each stream. With per-stream accounts all three are admitted and
the user's guarantee is 3ε per window while every report says ε. With the
default ``wevent_budget = "per_user"`` the user is admitted only while every
window, summed over all of the user's streams, stays within the cap; a domain
that opts in to ``per_stream`` keeps the old behaviour and says k·ε.
"""

from __future__ import annotations

import json
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_helpers import POLICY, load_fixture

from ledger import Ledger, PolicyChangeError, Request, Settlement, definitions, wevent_budget
from ledger.accounting import profile
from ledger.admission import Accounts, Charges, admit
from ledger.checks import RequestColumns
from mechanisms.cost import StepRun, WEventCost
from schemas.errors import PolicyError
from schemas.policy import parse_policy

QUARTER = Fraction(1, 4)  # cap 1 per window of w = 4: 1/4 per step fills every window


def _policy(budget: str | None) -> dict:
    pol = json.loads(json.dumps(POLICY))
    if budget is not None:
        pol["domains"]["power"]["wevent_budget"] = budget
    return pol


def _ledger(tmp_path, budget: str | None) -> Ledger:
    led = Ledger.init(tmp_path / "ledger.duckdb", actor="pytest")
    led.apply_policy(parse_policy(_policy(budget)))
    return led


def _stream(user: str, stream: str, runs, step: str | None = None) -> Request:
    return Request(user, "power", step=step or stream, notion="wevent", stream_id=stream,
                   runs=tuple(runs))


def _reserve(led: Ledger, release: str, reqs):
    return led.reserve(release, list(reqs), mechanism="square_wave", parameters={})


def _power_rows(led: Ledger):
    return sorted((b["user_id"], b["stream_id"], b["spent"])
                  for b in led.balances("power"))


# ---------------------------------------------------------------- the attack


def test_one_user_with_three_streams_gets_at_most_eps_per_window_over_all_streams(tmp_path):
    led = _ledger(tmp_path, None)  # the default: per_user
    assert led.domain("power").wevent_budget == "per_user"
    runs = [StepRun(0, 8, QUARTER)]  # ε = 1 per window on each stream
    first = _reserve(led, "r-a", [_stream("u", "a", runs)])
    second = _reserve(led, "r-b", [_stream("u", "b", runs)])
    third = _reserve(led, "r-c", [_stream("u", "c", runs)])
    assert [len(r.admitted) for r in (first, second, third)] == [1, 0, 0]
    denied = second.denied[0]
    assert "summed over all of the user's streams" in denied.reason
    assert denied.requested - denied.remaining == 1  # 1 + 1 in the worst window, cap 1
    # all three in one call: the user is denied (its windows would hold 3ε... > ε)
    together = _reserve(led, "r-all", [_stream("v", s, runs) for s in "abc"])
    assert not together.admitted and len(together.denied) == 3
    # the balances show one row per user (stream ''): the user's largest window
    assert _power_rows(led) == [("u", "", 1), ("v", "", 0)]
    assert led.verify().ok


def test_three_streams_are_admitted_while_the_sum_over_streams_fits(tmp_path):
    led = _ledger(tmp_path, "per_user")
    third = Fraction(1, 12)  # 3 streams x 4 steps x 1/12 = 1 per window
    res = _reserve(led, "r", [_stream("u", s, [StepRun(0, 20, third)]) for s in "abc"])
    assert len(res.admitted) == 3
    assert {d.stream_id for d in res.admitted} == {"a", "b", "c"}  # entries keep the stream
    assert _power_rows(led) == [("u", "", 1)]
    # any further step of any stream in a window that is full is denied ...
    assert not _reserve(led, "r2", [_stream("u", "d", [StepRun(19, 20, third)])]).admitted
    # ... and a window beyond the history is free
    assert _reserve(led, "r3", [_stream("u", "d", [StepRun(23, 27, QUARTER)])]).admitted
    assert led.verify().ok


def test_per_stream_domains_keep_one_budget_per_stream_and_say_k_eps(tmp_path):
    led = _ledger(tmp_path, "per_stream")
    runs = [StepRun(0, 8, QUARTER)]
    for s in "abc":
        assert _reserve(led, f"r-{s}", [_stream("u", s, runs)]).admitted
    assert _power_rows(led) == [("u", "a", 1), ("u", "b", 1), ("u", "c", 1)]
    assert not _reserve(led, "r-a2", [_stream("u", "a", [StepRun(7, 8, QUARTER)])]).admitted
    dom = led.domain("power")
    assert dom.wevent_budget == "per_stream" and "per stream" in dom.units_label()
    assert "k·ε" in wevent_budget.guarantee(dom.wevent_budget)
    assert led.verify().ok


# ---------------------------------------------------------------- settle, close, verify


def test_refunds_and_closes_free_the_users_windows(tmp_path):
    led = _ledger(tmp_path, "per_user")
    half = Fraction(1, 8)  # two streams at 1/8 per step: every window of the user holds 1
    _reserve(led, "r", [_stream("u", "a", [StepRun(0, 8, half)]),
                        _stream("u", "b", [StepRun(0, 8, half)])])
    assert _power_rows(led) == [("u", "", 1)]
    # stream a used steps [0, 4) only: the refund of [4, 8) leaves 1/2 in the windows there
    led.settle("r", [Settlement("u", "power", "a", WEventCost(Fraction(1, 2), 4,
                                                             (StepRun(0, 4, half),)),
                                stream_id="a")])
    assert _power_rows(led) == [("u", "", 1)]  # window [0, 4) still holds both streams
    assert _reserve(led, "r2", [_stream("u", "c", [StepRun(4, 8, half)])]).admitted
    assert not _reserve(led, "r3", [_stream("u", "d", [StepRun(4, 5, half)])]).admitted
    led.close("r2", "stream c never released")  # its steps [4, 8) come back
    assert _reserve(led, "r4", [_stream("u", "d", [StepRun(4, 8, half)])]).admitted
    assert led.verify().ok


def test_verify_replays_the_per_user_account(tmp_path):
    led = _ledger(tmp_path, "per_user")
    _reserve(led, "r", [_stream("u", "a", [StepRun(0, 4, Fraction(1, 8))]),
                        _stream("u", "b", [StepRun(2, 6, Fraction(1, 8))])])
    assert led.verify().ok  # the per-user account's largest window: 3/4 ([2, 6) and [0, 4))
    con = duckdb.connect(str(tmp_path / "ledger.duckdb"))
    # the stored per-user spent set to one stream's window (what a per-stream replay gives)
    con.execute("UPDATE accounts SET spent = spent * 2 / 3 WHERE domain = 'power'")
    con.close()
    rep = led.verify()
    assert not rep.ok and "recomputed from the entries" in rep.message


# ---------------------------------------------------------------- the policy key


def test_the_policy_key_is_checked_and_sealed_in_the_definition(tmp_path):
    assert parse_policy(_policy(None)).domains["power"].wevent_budget == "per_user"
    assert parse_policy(_policy("per_stream")).domains["power"].wevent_budget == "per_stream"
    with pytest.raises(PolicyError, match="wevent_budget.*per_user"):
        parse_policy(_policy("per_window"))
    curves = _policy(None)
    curves["domains"]["ais"]["wevent_budget"] = "per_user"
    with pytest.raises(PolicyError, match="only applies to streams"):
        parse_policy(curves)
    _ledger(tmp_path, None)
    con = duckdb.connect(str(tmp_path / "ledger.duckdb"), read_only=True)
    (text,) = con.execute("SELECT definition FROM domains WHERE domain = 'power'").fetchone()
    con.close()
    assert json.loads(text)["wevent_budget"] == "per_user"


def test_changing_the_budget_of_a_charged_domain_is_refused(tmp_path):
    led = _ledger(tmp_path, "per_stream")
    lines = led.apply_policy(parse_policy(_policy("per_user")))  # no charges yet: allowed
    assert any("wevent_budget" in line for line in lines)
    _reserve(led, "r", [_stream("u", "a", [StepRun(0, 4, QUARTER)])])
    with pytest.raises(PolicyChangeError, match="wevent_budget of domain 'power'"):
        led.apply_policy(parse_policy(_policy("per_stream")))
    assert led.domain("power").wevent_budget == "per_user"
    assert led.verify().ok


# ---------------------------------------------------------------- domains recorded before


def test_a_definition_without_the_key_is_read_per_stream():
    dom = parse_policy(_policy(None)).domains["power"]
    data = json.loads(definitions.encode(dom))
    del data["wevent_budget"]
    old = definitions.decode(json.dumps(data), "power")
    assert old.wevent_budget == "per_stream" and "per stream" in old.units_label()
    ais = parse_policy(_policy(None)).domains["ais"]
    assert definitions.decode(definitions.encode(ais), "ais").wevent_budget is None


def test_a_v2_ledger_is_read_per_stream_before_and_after_migrate(tmp_path):
    led = Ledger(load_fixture("ledger_v2", tmp_path / "old.duckdb"))
    assert led.verify().ok
    led.migrate(parse_policy(POLICY))  # the policy does not state the key: as it was charged
    assert led.domain("power").wevent_budget == "per_stream"
    assert led.verify().ok
    # m's stream 's' holds a full window; another stream of m has windows of its own
    full = [StepRun(0, 4, QUARTER)]
    assert not _reserve(led, "n1", [_stream("m", "s", full, step="n1")]).admitted
    assert _reserve(led, "n2", [_stream("m", "t", full, step="n2")]).admitted
    with pytest.raises(PolicyChangeError, match="state wevent_budget = \"per_stream\""):
        led.apply_policy(parse_policy(POLICY))  # per_user by default: a change of meaning
    # stating the budget it was charged with changes only the label, which now says so
    assert led.apply_policy(parse_policy(_policy("per_stream"))) == [
        "domain 'power': changed units_label"]
    assert "per stream" in led.domains()[-1]["units_label"]
    assert led.verify().ok


def test_a_v2_ledger_migrated_with_a_per_user_policy_is_refused(tmp_path):
    led = Ledger(load_fixture("ledger_v2", tmp_path / "old.duckdb"))
    with pytest.raises(PolicyChangeError, match="wevent_budget"):
        led.migrate(parse_policy(_policy("per_user")))
    led.migrate()  # without a policy: the row has no definition, its accounts are per stream
    assert wevent_budget.of_row({"notion": "wevent", "definition": None}) == "per_stream"
    assert led.verify().ok


# ---------------------------------------------------------------- admission vs a model


def _user_windows_ok(per_step: dict[int, int], w: int, cap: int) -> bool:
    if not per_step:
        return True
    lo, hi = min(per_step) - w + 1, max(per_step)
    return all(sum(per_step.get(t, 0) for t in range(s, s + w)) <= cap for s in range(lo, hi + 1))


def _add(per: dict[int, int], runs) -> None:
    for a, b, q in runs:
        for t in range(a, b):
            per[t] = per.get(t, 0) + q


_RUN = st.tuples(st.integers(0, 10), st.integers(1, 5), st.integers(1, 3)).map(
    lambda t: (t[0], t[0] + t[1], t[2]))


@st.composite
def _scenario(draw):
    budget = draw(st.sampled_from(["per_user", "per_stream"]))
    w, cap = draw(st.integers(1, 4)), draw(st.integers(3, 12))
    users = [f"u{i}" for i in range(draw(st.integers(1, 3)))]
    streams = ["a", "b", "c"]
    history = {(u, s): profile(draw(st.lists(_RUN, max_size=2))) for u in users for s in streams}
    reqs = [(draw(st.sampled_from(users)), draw(st.sampled_from(streams)),
             profile(draw(st.lists(_RUN, min_size=1, max_size=2))))
            for _ in range(draw(st.integers(1, 6)))]
    return budget, w, cap, history, reqs


def _model(budget, w, cap, history, reqs):
    """Admitted per request: per user, all of its windows (per user or per stream) <= cap."""
    ok = {}
    for u in dict.fromkeys(r[0] for r in reqs):
        scopes: dict[str, dict[int, int]] = {}
        for (hu, s), runs in history.items():
            if hu == u:
                _add(scopes.setdefault("" if budget == "per_user" else s, {}), runs)
        before = {k: _user_windows_ok(v, w, cap) for k, v in scopes.items()}
        for ru, s, runs in reqs:
            if ru == u:
                _add(scopes.setdefault("" if budget == "per_user" else s, {}), runs)
        charged = {"" if budget == "per_user" else s for ru, s, _ in reqs if ru == u}
        ok[u] = all(_user_windows_ok(scopes[k], w, cap) and before.get(k, True)
                    for k in charged)
    return [ok[r[0]] for r in reqs]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_scenario())
def test_admission_aggregates_a_users_streams_like_the_model(scenario):
    budget, w, cap, history, reqs = scenario
    per_user = frozenset({"power"} if budget == "per_user" else ())
    cols = RequestColumns([r[0] for r in reqs], ["power"] * len(reqs),
                          [f"s{i}" for i in range(len(reqs))], [r[1] for r in reqs],
                          ["wevent"] * len(reqs), [None] * len(reqs), [()] * len(reqs))
    acc, n_acc, acc_streams = wevent_budget.account_codes(cols, per_user)
    hist: list[list] = [[] for _ in range(n_acc)]
    labels: list[str | None] = [None] * n_acc
    for a in range(n_acc):  # the account's runs: every stream it covers (storage.account_runs)
        i = int(np.flatnonzero(acc == a)[0])
        labels[a] = None if acc_streams[i] == "" else acc_streams[i]
        hist[a] = profile([run for (u, s), runs in history.items() if u == reqs[i][0]
                           and (s == reqs[i][1] or acc_streams[i] == "") for run in runs])
    objects = np.empty(n_acc, object)
    objects[:] = [cap] * n_acc
    spent = np.empty(n_acc, object)
    spent[:] = [0] * n_acc  # the stored spend does not enter a w-event decision
    users = {u: k for k, u in enumerate(dict.fromkeys(r[0] for r in reqs))}
    units = np.empty(len(reqs), object)
    units[:] = [sum(q * (b - a) for a, b, q in r[2]) for r in reqs]
    out = admit(Accounts(objects, spent, np.full(n_acc, w, np.int64), hist,
                         ["ε"] * n_acc, labels),
                Charges(np.array([users[r[0]] for r in reqs], np.int64), acc, units,
                        [r[2] for r in reqs], np.zeros(len(users), bool)))
    assert out.admitted.tolist() == _model(budget, w, cap, history, reqs)
