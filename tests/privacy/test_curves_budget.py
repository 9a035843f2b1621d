"""Budget accounting of the curve mechanisms: exact splits, privacy filter, SVT budgets."""

import math
from fractions import Fraction

import numpy as np
import pytest

import mechanisms.curves.segment as segment_module
import mechanisms.curves.select as select_module
from mechanisms.curves import (
    baseline_points,
    privfuncseg,
    privfuncseg_unbounded,
    privfuncselect,
    project_and_privatize,
)

AMOUNTS = [("epsilon", "1/11"), ("epsilon", 0.1), ("epsilon", 7), ("rho", "3/7"), ("rho", 0.05)]


def _curve(n=500, seed=0):
    rng = np.random.default_rng(seed)
    t = np.linspace(10.0, 60.0, n)
    return t, np.cumsum(rng.standard_normal((n, 2)), axis=0) * 20


def _exact(value):
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


@pytest.mark.parametrize("name,value", AMOUNTS)
def test_every_mechanism_spends_exactly_the_request(name, value):
    t, v = _curve()
    want = _exact(value)
    runs = [
        lambda r: project_and_privatize(t, v, "legendre", degree=2, rng=r, **{name: value}),
        lambda r: privfuncseg(t, v, rng=r, **{name: value}),
        lambda r: privfuncseg(t, v, rng=r, continuous=True, **{name: value}),
        lambda r: privfuncselect(t, v, rng=r, **{name: value}),
        lambda r: baseline_points(t, v, 25, smooth=3, rng=r, **{name: value}),
        lambda r: privfuncseg_unbounded(t, v, rng=r, **{name: value}),
    ]
    for run in runs:
        for seed in range(3):
            f = run(np.random.default_rng(seed))
            assert f.cost.requested == want
            assert sum(i.amount for i in f.cost.items) == want
            assert f.cost.notion == ("gp" if name == "epsilon" else "cgp")


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_reduce_seg_never_exceeds_its_quarter(notion):
    # a curve flat on most of its domain so that ReduceSeg runs and merges
    t = np.linspace(0.0, 1000.0, 8001)
    v = np.where(t > 700, 300 * np.sin(t / 4.0), 0.0)
    kw = {"epsilon": Fraction(40)} if notion == "gp" else {"rho": Fraction(400)}
    amount = next(iter(kw.values()))
    ran = 0
    for seed in range(60):
        f = privfuncseg(t, v, rng=np.random.default_rng(seed), **kw)
        steps = {i.step: i.amount for i in f.cost.items}
        if "reduce_seg" in steps:
            ran += 1
            assert 0 < steps["reduce_seg"] <= amount / 4 * (1 - Fraction(1, 16))
            # the spend is the sum over executed checks: 4 parts x (ε/16)/2 at level 1 at least
            assert steps["reduce_seg"] >= 4 * (amount / 16) / 2
        assert steps["project"] == amount - amount / 4 - steps.get("reduce_seg", 0)
        assert steps["project"] >= amount / 2
    assert ran > 30


@pytest.mark.parametrize("name,value", [("epsilon", Fraction(2)), ("rho", Fraction(1, 2))])
def test_svts_run_with_their_share(monkeypatch, name, value):
    seen = []
    real_svt = select_module.svt
    real_scale = segment_module.laplace_scale

    def spy(queries, **kw):
        seen.append(kw["epsilon"])
        return real_svt(queries, **kw)

    def spy_scale(sensitivity, eps):
        # PrivFuncSeg's batched SVT draws its slots at Lap(3K/ε) with K = 1
        assert sensitivity == 3
        seen.append(eps)
        return real_scale(sensitivity, eps)

    monkeypatch.setattr(segment_module, "laplace_scale", spy_scale)
    monkeypatch.setattr(select_module, "svt", spy)
    t, v = _curve()
    privfuncseg(t, v, rng=np.random.default_rng(0), **{name: value})
    calls = len(seen)
    privfuncselect(t, v, rng=np.random.default_rng(0), **{name: value})
    quarter = float(value) / 4
    want = quarter if name == "epsilon" else math.sqrt(2 * quarter)
    assert calls >= 1 and len(seen) == calls + 2
    assert seen == pytest.approx([want] * len(seen))
