from fractions import Fraction

import numpy as np
import pytest

from mechanisms.curves import DyadicTree, least_squares, privfuncseg, reduce_seg
from mechanisms.errors import MechanismParameterError
from mechanisms.metrics import l2_error


def _walk(n=400, seed=0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(10, 60, n))
    t[0], t[-1] = 10.0, 60.0
    v = np.cumsum(rng.standard_normal((n, 2)), axis=0) * 10 + 5000.0
    return t, v


@pytest.mark.parametrize("degree", [0, 1, 3])
def test_tree_matches_direct_least_squares(degree):
    t, v = _walk()
    tree = DyadicTree(t, v, degree, 6)
    for j in (0, 3, 6):
        edges = 10 + 50 * np.arange(2**j + 1) / 2**j
        fit = least_squares(t, v, "legendre", degree=degree, breakpoints=edges)
        assert np.allclose(tree.level_coefficients(j), fit.coefficients, rtol=1e-9, atol=1e-7)
        assert tree.level_dist[j] == pytest.approx(l2_error(t, v, fit), rel=1e-6, abs=1e-6)


def test_level_distances_non_increasing():
    t, v = _walk(seed=3)
    d = DyadicTree(t, v, 1, 8).level_dist
    assert np.all(np.diff(d) <= 1e-9 * d[0])


def test_validation():
    t, v = _walk()
    rng = np.random.default_rng(0)
    with pytest.raises(MechanismParameterError):
        privfuncseg(t, v, rng=rng)
    with pytest.raises(MechanismParameterError):
        privfuncseg(t, v, epsilon=1, basis="sinc", rng=rng)
    with pytest.raises(MechanismParameterError):
        privfuncseg(t, v, epsilon=1, beta=1.5, rng=rng)
    with pytest.raises(MechanismParameterError):
        privfuncseg(t, v, epsilon=1, basis="linear", degree=3, rng=rng)


@pytest.mark.parametrize("kw", [{"epsilon": "1/11"}, {"epsilon": 0.3}, {"rho": "2/7"}])
def test_cost_breakdown_sums_exactly(kw):
    t, v = _walk()
    for seed in range(5):
        f = privfuncseg(t, v, rng=np.random.default_rng(seed), **kw)
        amount = Fraction(list(kw.values())[0]) if not isinstance(list(kw.values())[0], float) \
            else Fraction("0.3")
        assert f.cost.total == amount == f.cost.requested
        steps = {i.step: i.amount for i in f.cost.items}
        assert steps["svt"] == amount / 4
        assert steps.get("reduce_seg", 0) <= amount / 4
        assert steps["project"] >= amount / 2


def test_output_shapes_and_1d_input():
    t, v = _walk()
    f = privfuncseg(t, v[:, 0], epsilon=5, rng=np.random.default_rng(1))
    assert f.evaluate(t).shape == (t.size, 1)
    k = f.breakpoints.size - 1
    assert f.coefficients.shape == (k, 2, 1)
    assert f.dim == 2 * k
    assert f.breakpoints[0] == 10.0 and f.breakpoints[-1] == 60.0
    assert f.diagnostics["segments"] == k


def _reduce_once(tree, share, notion, rng, seg_depth=3, k1=4):
    return reduce_seg(tree, node=(0, 0), seg_depth=seg_depth, k1=k1, level=1, beta=0.05,
                      big_b=Fraction(1, 4), share=share, notion=notion, rng=rng)


def test_reduce_seg_merges_a_straight_line_and_never_overspends():
    t = np.linspace(10, 60, 200)
    v = np.c_[3 * t, -t + 4]
    tree = DyadicTree(t, v, 1, 8)
    rng = np.random.default_rng(0)
    share = Fraction(1000)  # tiny noise: every check on a line must merge
    out = _reduce_once(tree, share, "gp", rng, seg_depth=8, k1=4)
    # level l halves the segments of 2^{l-1} intervals: 256 -> 64 segments at depth 4
    assert out.nodes == [(4, i) for i in range(16)]
    assert out.reductions == out.checks == 1 + 2 + 4 + 8
    # 2^{l-1} checks at level l, each spending (share/2^{l-1})/2^l: total (1 − 2^{-4})·share
    assert out.spent == share * (1 - Fraction(1, 16))
    for seed in range(50):
        for notion in ("gp", "cgp"):
            o = _reduce_once(tree, Fraction(1, 16), notion, np.random.default_rng(seed), 5, 4)
            assert o.spent <= Fraction(1, 16) * (1 - Fraction(1, 16))


def test_reduce_seg_keeps_segments_of_a_wiggly_curve():
    t = np.linspace(10, 60, 2000)
    v = np.c_[1e4 * np.sin(t * 3)]
    tree = DyadicTree(t, v, 1, 8)
    out = _reduce_once(tree, Fraction(1000), "gp", np.random.default_rng(0), seg_depth=5)
    assert len(out.nodes) == 32 and out.reductions == 0 and out.checks == 1


def test_privfuncseg_reduces_flat_parts():
    # flat for 3/4 of the domain, wiggly in the last quarter
    t = np.linspace(0, 1000, 20001)
    v = np.where(t > 750, 200 * np.sin(t / 3.0), 0.0)
    f = privfuncseg(t, v, epsilon=50, rng=np.random.default_rng(0))
    d = f.diagnostics
    assert d["reduce_seg_ran"] and d["segments"] < d["segments_before_reduce"]
    assert d["reduce_seg_reductions"] >= 3


def test_large_epsilon_tracks_the_curve():
    t, v = _walk(2000, seed=5)
    err = [l2_error(t, v, privfuncseg(t, v, epsilon=e, rng=np.random.default_rng(1)))
           for e in (0.1, 10.0, 1000.0)]
    assert err[0] > err[1] > err[2]


def test_continuous_option():
    t, v = _walk()
    f = privfuncseg(t, v, epsilon=20, continuous=True, rng=np.random.default_rng(2))
    e = f.breakpoints[1:-1]
    left = f.basis().values(e, f.breakpoints[:-2], e)
    right = f.basis().values(e, e, f.breakpoints[2:])
    lv = np.einsum("rm,rmn->rn", left, f.coefficients[:-1])
    rv = np.einsum("rm,rmn->rn", right, f.coefficients[1:])
    assert np.allclose(lv, rv, atol=1e-8 * np.abs(v).max())
    assert f.diagnostics["continuous"]
    assert f.error_bound(0.1) == pytest.approx(
        2 * privfuncseg(t, v, epsilon=20, rng=np.random.default_rng(2)).error_bound(0.1))
