"""Utility against theory (spec §1.5, §1.7; paper Lemma 3.7, 3.9, Sec. 4.1.2)."""

import math

import numpy as np
import pytest

from mechanisms.curves import (
    continuity_projection,
    expected_noise_norm,
    least_squares,
    project_and_privatize,
)
from mechanisms.metrics import l2_error

EDGES = np.array([10.0, 22.0, 35.0, 60.0])
T = np.linspace(10.0, 60.0, 120)
V = np.c_[40 * np.sin(T / 6.0), 25 * np.cos(T / 4.0)]


def _coef_dist(a, b):
    return float(np.linalg.norm(a.coefficients - b.coefficients))  # orthonormal basis


@pytest.mark.slow
@pytest.mark.parametrize("notion,amount", [("gp", 0.5), ("cgp", 0.2)])
def test_expected_distance_to_projection(notion, amount):
    fit = least_squares(T, V, "linear", breakpoints=EDGES)
    approx = l2_error(T, V, fit)
    rng = np.random.default_rng(17)
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
    draws = 2000
    d = np.empty(draws)
    d2q = np.empty(draws)
    for i in range(draws):
        f = project_and_privatize(T, V, "linear", breakpoints=EDGES, rng=rng, **kw)
        d[i] = _coef_dist(f, fit)
        d2q[i] = l2_error(T, V, f) ** 2
    dim = 3 * 2 * 2
    if notion == "gp":
        mean = dim / amount  # E‖Z‖ = D
        second = dim * (dim + 1) / amount**2
    else:
        chi_mean = math.sqrt(2) * math.gamma((dim + 1) / 2) / math.gamma(dim / 2)
        mean = chi_mean / math.sqrt(2 * amount)
        second = dim / (2 * amount)
    assert mean == pytest.approx(
        expected_noise_norm(dim, 1 if notion == "gp" else 2)
        / (amount if notion == "gp" else math.sqrt(2 * amount))
    )
    assert abs(d.mean() - mean) < 4 * d.std() / math.sqrt(draws)
    # Lemma 3.7: E dist(q, f̃)² = dist(q, f_a)² + E‖Z‖²·scale²
    assert abs(d2q.mean() - (approx**2 + second)) < 4 * d2q.std() / math.sqrt(draws)


def _continuity_draws(values, draws, seed):
    fit = least_squares(T, values, "linear", breakpoints=EDGES)
    cont_fit = continuity_projection(fit)  # = the continuous LS fit P_C q (C ⊂ U)
    rng = np.random.default_rng(seed)
    for _ in range(draws):
        f = project_and_privatize(T, values, "linear", breakpoints=EDGES, epsilon=0.3, rng=rng)
        g = continuity_projection(f)
        e = EDGES[1:-1]
        basis = g.basis()
        left = np.einsum("rm,rmn->rn", basis.values(e, EDGES[:-2], e), g.coefficients[:-1])
        right = np.einsum("rm,rmn->rn", basis.values(e, e, EDGES[2:]), g.coefficients[1:])
        assert np.allclose(left, right, atol=1e-9)
        assert g.cost == f.cost
        yield fit, cont_fit, f, g


def test_continuity_within_factor_two_when_the_projection_is_continuous():
    # q continuous and piecewise linear on EDGES: f_a = q is continuous, so the spec's
    # dist(f_â, f_a) ≤ 2·dist(f_ã, f_a) holds (in fact with factor 1: P is non-expansive)
    values = np.c_[np.interp(T, EDGES, [0.0, 30.0, -10.0, 5.0]), np.interp(T, EDGES, [1, 2, 3, 4])]
    ratios = []
    for fit, _, f, g in _continuity_draws(values, 300, 23):
        assert _coef_dist(g, fit) <= 2 * _coef_dist(f, fit) + 1e-9
        assert _coef_dist(g, fit) <= _coef_dist(f, fit) + 1e-9
        ratios.append(_coef_dist(g, fit) / _coef_dist(f, fit))
    # projecting onto the 4·2-dim continuous subspace of the 12-dim space removes noise
    assert np.mean(ratios) < 0.95


def test_continuity_general_bound():
    # f_a of a smooth curve is discontinuous: the factor-2 seed bound need not hold, but
    # dist(f_â, P_C q) ≤ dist(f_ã, f_a), hence dist(f_â, f_a) ≤ dist(f_ã, f_a) + dist(P_C q, f_a)
    for fit, cont_fit, f, g in _continuity_draws(V, 300, 29):
        assert _coef_dist(g, cont_fit) <= _coef_dist(f, fit) + 1e-9
        assert _coef_dist(g, fit) <= _coef_dist(f, fit) + _coef_dist(cont_fit, fit) + 1e-9
