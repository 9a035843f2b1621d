"""The batched curve core: each curve of a batch gets exactly what it gets alone.

* batch == per-curve API, in bytes, on random inputs (sizes, degrees, notions,
  ReduceSeg on/off, continuity, users whose generator serves several curves);
* batch == a straightforward transcription of the spec (reference_privfuncseg)
  with the documented draw order: same SVT index, segments and exact costs,
  coefficients equal to rounding;
* a user's outputs depend only on that user's data and generator.
"""

from fractions import Fraction

import numpy as np
import pytest
from reference_privfuncseg import reference

from mechanisms.curves import CurveBatch, privfuncseg, privfuncseg_batch
from mechanisms.errors import MechanismParameterError


def _curves(seed, count, lo=20, hi=2500):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(lo, hi))
        t = np.cumsum(rng.uniform(0.2, 3.0, n)) + rng.uniform(-100, 100)
        kind = rng.integers(4)
        if kind == 3:  # flat, then wiggly in the last quarter: ReduceSeg merges the flat part
            v = np.c_[np.where(t > np.quantile(t, 0.75), 300 * np.sin(t / 2.0), 0.0)]
            v = np.c_[v, 0.5 * v]
        elif kind == 0:
            v = np.cumsum(rng.standard_normal((n, 2)), axis=0) * 10
        elif kind == 1:
            v = np.c_[np.sin(t / 30) * 200, np.where(t > np.median(t), 50.0, 0.0)]
        else:
            v = np.c_[3 * t + 1, -t]  # exactly linear: ReduceSeg merges
        out.append((t, v))
    return out


def _same(f, g):
    assert np.array_equal(f.breakpoints, g.breakpoints)
    assert np.array_equal(f.coefficients, g.coefficients)
    assert f.cost == g.cost and f.dim == g.dim and f.noise_budget == g.noise_budget
    assert f.diagnostics == g.diagnostics and f.error_factor == g.error_factor


@pytest.mark.parametrize("kw", [
    {"epsilon": 1.0},
    {"epsilon": "1/7", "reduce": False},
    {"rho": 0.5},
    {"epsilon": 40, "degree": 2, "basis": "legendre"},
    {"rho": "3/2", "basis": "constant", "continuous": True},
    {"epsilon": 5, "k1": 2, "margin": False, "max_level": 6},
])
def test_batch_equals_each_curve_alone_in_bytes(kw):
    curves = _curves(1, 40)
    seeds = range(100, 140)
    batch = privfuncseg_batch(CurveBatch.from_curves(curves),
                              rngs=[np.random.default_rng(s) for s in seeds], **kw)
    assert len(batch) == 40
    for c, ((t, v), s) in enumerate(zip(curves, seeds, strict=True)):
        _same(batch.function(c), privfuncseg(t, v, rng=np.random.default_rng(s), **kw))


def test_a_shared_generator_is_drawn_curve_after_curve():
    # users of 1-4 curves: the batch equals sequential calls with each user's generator
    curves = _curves(2, 30)
    owners = [c // 3 if c < 12 else 4 + (c % 5) for c in range(30)]
    batch = privfuncseg_batch(CurveBatch.from_curves(curves), rngs=_user_rngs(owners),
                              epsilon=2.0)
    alone = {u: np.random.default_rng(500 + u) for u in set(owners)}
    for c, (t, v) in enumerate(curves):
        _same(batch.function(c), privfuncseg(t, v, epsilon=2.0, rng=alone[owners[c]]))


def _user_rngs(owners):
    made = {}
    return [made.setdefault(u, np.random.default_rng(500 + u)) for u in owners]


def test_one_users_output_does_not_depend_on_the_others():
    curves = _curves(3, 12)
    first = privfuncseg_batch(CurveBatch.from_curves(curves),
                              rngs=[np.random.default_rng(s) for s in range(12)], rho=1.0)
    other = [(t, v[::-1] * 3 + 7) if c != 5 else (t, v) for c, (t, v) in enumerate(curves)]
    second = privfuncseg_batch(CurveBatch.from_curves(other),
                               rngs=[np.random.default_rng(s + (c != 5) * 99)
                                     for c, s in enumerate(range(12))], rho=1.0)
    _same(first.function(5), second.function(5))


@pytest.mark.parametrize("notion,amount,noise", [
    ("gp", "1", None), ("gp", "30", None), ("cgp", "1/2", None), ("cgp", "20", None),
    ("cgp", "1/2", "gaussian")])
def test_batch_matches_the_spec_transcription(notion, amount, noise):
    curves = _curves(4, 12, lo=8, hi=700)
    kw = {"epsilon": Fraction(amount)} if notion == "gp" else {"rho": Fraction(amount)}
    batch = privfuncseg_batch(CurveBatch.from_curves(curves), noise=noise,
                              rngs=[np.random.default_rng(s) for s in range(12)], **kw)
    reductions = ran = 0
    for c, (t, v) in enumerate(curves):
        f = batch.function(c)
        k_bar, halted, nodes, cost, coef, final = reference(
            t, v, notion=notion, amount=Fraction(amount), rng=np.random.default_rng(c),
            noise=noise)
        assert (f.diagnostics["k_bar"], f.diagnostics["svt_halted"]) == (k_bar, halted)
        assert f.diagnostics["segments"] == len(nodes)
        assert {i.step: i.amount for i in f.cost.items} == cost
        assert Fraction(f.diagnostics["final_budget"]) == final
        scale = np.abs(coef).max()
        assert np.allclose(f.coefficients, coef, rtol=1e-7, atol=1e-9 * scale)
        reductions += f.diagnostics["reduce_seg_reductions"]
        ran += f.diagnostics["reduce_seg_ran"]
    assert ran > 0  # the inputs exercise ReduceSeg, and its merges at the larger budgets
    assert reductions > 0 or Fraction(amount) < 10


def test_batch_validation_names_the_curve():
    t = np.arange(10.0)
    v = np.c_[t, t]
    bad = v.copy()
    bad[3, 1] = np.nan
    with pytest.raises(MechanismParameterError, match="curve 1"):
        CurveBatch.from_arrays(np.r_[t, t], np.r_[v, bad], [0, 10, 20])
    with pytest.raises(MechanismParameterError, match="curve 2"):
        CurveBatch.from_arrays(np.r_[t, t, t[::-1]], np.r_[v, v, v], [0, 10, 20, 30])
    with pytest.raises(MechanismParameterError, match="one generator per curve"):
        privfuncseg_batch(CurveBatch.from_curves([(t, v)] * 2),
                          rngs=[np.random.default_rng(0)], epsilon=1)
    with pytest.raises(MechanismParameterError):
        privfuncseg_batch(CurveBatch.from_curves([(t, v)]), rngs=[None], epsilon=1)


def test_long_curves_blocked_from_their_own_start():
    # a curve longer than a block is summed in blocks cut at offsets from its own first
    # sample: alone or between other curves, the same bytes; and the fits are right
    from mechanisms.curves import forest, least_squares
    from mechanisms.curves.forest import DyadicForest
    from mechanisms.metrics import l2_error

    long_n = 2 * forest.BLOCK + 777
    rng = np.random.default_rng(8)
    t = np.cumsum(rng.uniform(0.1, 2.0, long_n))
    v = np.cumsum(rng.standard_normal((long_n, 2)), axis=0)
    curves = _curves(5, 3) + [(t, v)] + _curves(6, 2)
    batch = CurveBatch.from_curves(curves)
    for level in (3, 17):
        both = DyadicForest(batch.t, batch.values, batch.offsets, 1, level)
        alone = DyadicForest(t, v, np.array([0, long_n]), 1, level)
        for j in range(level + 1):
            assert np.array_equal(both.coef[j][3], alone.coef[j][0])
            assert np.array_equal(both.res2[j][3], alone.res2[j][0])
    for j in (0, 5, 11):
        edges = t[0] + (t[-1] - t[0]) * np.arange(2**j + 1) / 2**j
        fit = least_squares(t, v, "legendre", degree=1, breakpoints=edges)
        assert np.allclose(alone.coef[j][0], fit.coefficients, rtol=1e-8, atol=1e-6)
        assert alone.level_dist[0, j] == pytest.approx(l2_error(t, v, fit), rel=1e-6)
    seeds = range(20, 26)
    out = privfuncseg_batch(batch, rngs=[np.random.default_rng(s) for s in seeds], epsilon=3)
    _same(out.function(3), privfuncseg(t, v, epsilon=3, rng=np.random.default_rng(23)))
