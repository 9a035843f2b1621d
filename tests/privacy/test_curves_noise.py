"""Statistical checks of the noise calibration of the curve mechanisms (spec §1.1, §1.2).

For an input inside the privatized span, dist₂(output, input) = ‖Z‖·scale with
‖Z‖ ~ Gamma(D, 1) (GP, spherical Laplace drawn jointly) or chi(D) (CGP). Each
test is a one-sample KS test at level 1e-3 with enough draws that a factor-2
error in the noise scale, a wrong budget split or a per-segment (non-joint)
SLap draw is rejected with overwhelming probability.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms.curves import (
    baseline_points,
    least_squares,
    privfuncseg,
    privfuncselect,
    project_and_privatize,
    slap,
)
from mechanisms.metrics import l2_error

LEVEL = 1e-3
EDGES = np.array([10.0, 17.0, 26.0, 31.0, 44.0, 60.0])  # 5 segments on [10, 60]


def _in_span_curve():
    # piecewise linear with knots at the segment edges: inside span{1, t} per segment
    t = np.union1d(EDGES, np.linspace(10, 60, 21))
    rng = np.random.default_rng(99)
    knots = rng.normal(0, 50, (EDGES.size, 2))
    v = np.c_[np.interp(t, EDGES, knots[:, 0]), np.interp(t, EDGES, knots[:, 1])]
    return t, v


def _distances(notion, amount, draws, seed):
    t, v = _in_span_curve()
    rng = np.random.default_rng(seed)
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
    out = []
    for _ in range(draws):
        f = project_and_privatize(t, v, "linear", breakpoints=EDGES, rng=rng, **kw)
        out.append(l2_error(t, v, f))  # exact: f and q are piecewise polynomial
    return np.array(out), f.dim


def test_gp_distance_is_gamma_d_over_epsilon():
    eps = 0.7
    d, dim = _distances("gp", eps, 1500, 1)
    assert dim == 5 * 2 * 2
    assert stats.kstest(d, stats.gamma(a=dim, scale=1 / eps).cdf).pvalue > LEVEL


def test_cgp_distance_is_chi_d_over_sqrt_2rho():
    rho = 0.3
    d, dim = _distances("cgp", rho, 1500, 2)
    assert stats.kstest(d, stats.chi(df=dim, scale=1 / math.sqrt(2 * rho)).cdf).pvalue > LEVEL


def test_power_factor_two_and_per_segment_draws_are_rejected():
    """The same KS check rejects a halved scale and per-segment SLap draws (test power)."""
    eps, dim, draws = 0.7, 20, 1500
    rng = np.random.default_rng(3)
    ref = stats.gamma(a=dim, scale=1 / eps).cdf
    halved = np.linalg.norm(slap(dim, rng=rng, size=draws), axis=1) / (2 * eps)
    assert stats.kstest(halved, ref).pvalue < 1e-12
    # per-segment draws: 5 independent SLap(4) blocks instead of one SLap(20)
    blocks = np.stack([slap(4, rng=rng, size=draws) for _ in range(5)], axis=1)
    per_segment = np.linalg.norm(blocks.reshape(draws, -1), axis=1) / eps
    assert stats.kstest(per_segment, ref).pvalue < 1e-12


def _seg_curve():
    rng = np.random.default_rng(7)
    t = np.linspace(10.0, 60.0, 300)
    v = np.cumsum(rng.standard_normal((300, 2)), axis=0) * 5
    return t, v


@pytest.mark.slow
@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_privfuncseg_final_noise_pit(notion):
    """Given the released segments, dist(f̃, LS fit) ~ Gamma(D)/ε_fin (chi(D)/√(2ρ_fin)).

    D and ε_fin vary between runs (they depend on the SVT and ReduceSeg), so the
    probability integral transform of each distance must be Uniform(0, 1).
    """
    t, v = _seg_curve()
    rng = np.random.default_rng(11)
    kw = {"epsilon": 2.0} if notion == "gp" else {"rho": 2.0}
    u = []
    for _ in range(800):
        f = privfuncseg(t, v, rng=rng, **kw)
        fit = least_squares(t, v, "linear", breakpoints=f.breakpoints)
        dist = float(np.linalg.norm(f.coefficients - fit.coefficients))  # orthonormal basis
        fin = float(Fraction(f.diagnostics["final_budget"]))
        assert fin == f.noise_budget
        if notion == "gp":
            u.append(stats.gamma(a=f.dim, scale=1 / fin).cdf(dist))
        else:
            u.append(stats.chi(df=f.dim, scale=1 / math.sqrt(2 * fin)).cdf(dist))
    assert stats.kstest(u, "uniform").pvalue > LEVEL


@pytest.mark.slow
@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_privfuncselect_final_noise_pit(notion):
    t = np.linspace(0.0, 100.0, 401)
    v = 3 * np.exp(-((t - 30) ** 2) / 60) + np.exp(-((t - 70) ** 2) / 20)
    exact = least_squares(t, v, "legendre", degree=32).coefficients[0]
    rng = np.random.default_rng(12)
    kw = {"epsilon": 40.0} if notion == "gp" else {"rho": 40.0}
    u = []
    for _ in range(600):
        f = privfuncselect(t, v, rng=rng, **kw)
        sel = f.diagnostics["selected_terms"]
        dist = float(np.linalg.norm(f.coefficients[0, sel] - exact[sel]))
        if notion == "gp":
            u.append(stats.gamma(a=f.dim, scale=1 / 10.0).cdf(dist))
        else:
            u.append(stats.chi(df=f.dim, scale=1 / math.sqrt(20.0)).cdf(dist))
    assert stats.kstest(u, "uniform").pvalue > LEVEL


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_baseline_per_point_noise(notion):
    t = np.linspace(10.0, 60.0, 101)
    v = np.c_[np.sin(t), np.cos(t)]
    k, amount = 6, 3.0
    times = np.linspace(10.0, 60.0, k)
    exact = np.c_[np.interp(times, t, v[:, 0]), np.interp(times, t, v[:, 1])]
    rng = np.random.default_rng(13)
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
    r = []
    for _ in range(300):
        f = baseline_points(t, v, k, rng=rng, **kw)
        r.extend(np.linalg.norm(f.evaluate(times) - exact, axis=1))
    if notion == "gp":
        ref = stats.gamma(a=2, scale=k / amount).cdf
    else:
        ref = stats.chi(df=2, scale=1 / math.sqrt(2 * amount / k)).cdf
    assert stats.kstest(r, ref).pvalue > LEVEL
