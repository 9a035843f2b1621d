"""The cost-from-output functions (`mechanisms.charges`) and their comparisons (`ledger.recompute`).

Expected values by hand: a curve costs its request; a stream ε/w per new step.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from ledger.recompute import charge_faults, chunk_claim_problem, curve_expected, stream_expected
from mechanisms import registry
from mechanisms.charges import curve_cost, wevent_cost, wevent_costs
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost

Q = Fraction(1, 4)


def test_every_registered_mechanism_names_a_charge_function():
    for name in registry.names(releasable_only=False):
        entry = registry.get(name)
        fn = entry.charge_function
        assert fn is (curve_cost if entry.kind == "curves" else wevent_cost)


def test_a_curve_costs_its_whole_request():
    c = curve_cost("cgp", Fraction(1, 3))
    assert (c.notion, c.requested, c.total) == ("cgp", Fraction(1, 3), Fraction(1, 3))


def test_a_stream_costs_eps_over_w_per_new_step():
    c = wevent_cost(np.arange(10), epsilon=Fraction(1), w=4, repeated=[(0, 3)])
    assert [(r.start, r.stop, r.epsilon) for r in c.runs] == [(4, 10, Q)]
    gaps = wevent_cost(np.array([0, 1, 2, 5, 6]), epsilon=Fraction(1), w=4)
    assert [(r.start, r.stop) for r in gaps.runs] == [(0, 3), (5, 7)]
    assert wevent_cost(np.arange(4), epsilon=Fraction(1), w=4, repeated=[(0, 9)]) is None


def test_many_streams_cost_by_hand_in_one_pass():
    steps = np.array([0, 1, 2, 3, 5, 6, 9, 4, 5, 6, 7, 8], dtype=np.int64)
    offsets = np.array([0, 4, 7, 7, 12])  # a whole run; two runs; empty; repeats 4-5
    got = wevent_costs(steps, offsets, epsilon=Fraction(1), w=4,
                       repeated=[(), (), (), [(4, 5)]])
    assert [(r.start, r.stop, r.epsilon) for r in got[0].runs] == [(0, 4, Q)]
    assert [(r.start, r.stop) for r in got[1].runs] == [(5, 7), (9, 10)]
    assert got[2] is None
    assert [(r.start, r.stop) for r in got[3].runs] == [(6, 9)]


def test_many_streams_cost_what_each_costs_alone():
    """`wevent_costs` of random streams equals `wevent_cost` stream by stream, errors included."""
    rng = random.Random(7)
    for _ in range(2000):
        streams, reps = [], []
        for _ in range(rng.randint(0, 6)):
            n = rng.randint(0, 8)
            picked = (sorted(rng.sample(range(20), n)) if rng.random() < 0.8
                      else [rng.randint(0, 5) for _ in range(n)])  # some not increasing
            streams.append(np.array(picked, dtype=np.int64))
            reps.append([(rng.randint(0, 10), rng.randint(0, 15))] if rng.random() < 0.3 else [])
        steps = np.concatenate(streams) if streams else np.empty(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum([s.size for s in streams])]).astype(np.int64)
        eps, w = Fraction(rng.randint(1, 5), rng.randint(1, 3)), rng.randint(1, 4)
        want, first_error = [], None
        for st, r in zip(streams, reps, strict=True):
            try:
                want.append(wevent_cost(st, epsilon=eps, w=w, repeated=r))
            except ValueError as err:
                first_error = first_error or str(err)
        if first_error is not None:
            with pytest.raises(ValueError) as raised:
                wevent_costs(steps, offsets, epsilon=eps, w=w, repeated=reps)
            assert str(raised.value) == first_error
        else:
            assert wevent_costs(steps, offsets, epsilon=eps, w=w, repeated=reps) == want


def test_a_stream_in_two_blocks_of_rows_is_refused():
    samples = pa.table({"user_id": ["u", "u", "v", "u"], "stream_id": ["s", "s", "s", "s"],
                        "step": np.array([0, 1, 0, 2])})
    with pytest.raises(ValueError, match="stream 's' of user 'u' is not in one block of rows"):
        stream_expected(samples, "square_wave", Fraction(1), 4, {})


def _curves() -> pa.Table:
    return pa.table({"user_id": ["a", "a", "b"], "curve_id": ["c0", "c1", "c0"]})


def test_a_claim_below_the_output_cost_is_named():
    exp = curve_expected(_curves(), "privfuncseg", "gp", Fraction(1, 2))
    honest = Cost("gp", Fraction(1, 2), (CostItem("svt", "gp", Fraction(1, 8)),
                                         CostItem("project", "gp", Fraction(3, 8))))
    claims = [("a", "curve:c0", honest, ""), ("a", "curve:c1", honest, ""),
              ("b", "curve:c0", honest, "")]
    assert chunk_claim_problem(claims, exp) is None
    low = Cost("gp", Fraction(1, 2), (CostItem("project", "gp", Fraction(1, 10**9)),))
    assert "user 'b', curve:c0: claimed cost 1/1000000000" in chunk_claim_problem(
        [*claims[:2], ("b", "curve:c0", low, "")], exp)
    assert "published with no cost claimed" in chunk_claim_problem(claims[:2], exp)
    assert "did not publish" in chunk_claim_problem(
        [*claims, ("b", "curve:c9", honest, "")], exp)


def test_a_stream_claim_with_fewer_steps_is_named():
    samples = pa.table({"user_id": ["u"] * 8, "stream_id": ["s"] * 8, "step": np.arange(8)})
    exp = stream_expected(samples, "square_wave", Fraction(1), 4, {("u", "s"): [(0, 3)]})
    right = WEventCost(Fraction(1), 4, (StepRun(4, 8, Q),))
    assert chunk_claim_problem([("u", "stream:s", right, "s")], exp) is None
    short = WEventCost(Fraction(1), 4, (StepRun(4, 5, Q),))
    assert "claimed cost 1/4" in chunk_claim_problem([("u", "stream:s", short, "s")], exp)


def test_charge_faults_compare_each_users_net_in_the_domains_notion():
    exp = curve_expected(_curves(), "privfuncseg", "gp", Fraction(1, 2))
    dom = {"domain": "d", "notion": "cgp", "w": None}  # ε-GP on a CGP account: ε²/2
    ok = [{"user_id": "a", "stream_id": "", "net": Fraction(1, 4)},
          {"user_id": "b", "stream_id": "", "net": Fraction(1, 8)}]
    assert charge_faults("r", exp, ok, dom) == []
    bad = [ok[0], {"user_id": "b", "stream_id": "", "net": Fraction(1, 16)}]
    assert charge_faults("r", exp, bad, dom) == [
        "release 'r', user 'b': the ledger charged 0.0625, its published outputs cost 0.125"]
