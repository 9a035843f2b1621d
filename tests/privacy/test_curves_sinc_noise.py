"""Noise calibration of Project-and-Privatize with the sinc basis (paper Sec. 3.5, Thm 3.2/3.3).

The sinc functions sinc((t − jh)/h)/√h are orthonormal in L²(R), so the
released function minus the noiseless projection is a sinc expansion with
L²(R) norm ‖Z‖·scale: Gamma(D, 1/ε) under GP (spherical Laplace drawn
jointly), chi(D)/√(2ρ) under CGP. The tests measure that norm in function space
by their own quadrature of the released functions over a long interval (so a
missing 1/√h, a wrong scale or budget fails), and for the budget rule
(spacing="auto") at two budgets that choose different D. KS at level 1e-3.
"""

import math

import numpy as np
import pytest
from scipy import stats

from mechanisms.curves import SincBasis, least_squares, project_and_privatize
from mechanisms.curves._piecewise import gauss_legendre

LEVEL = 1e-3
DRAWS = 1000


def _curve():
    t = np.linspace(10.0, 60.0, 51)  # a domain neither [0, 1] nor starting at 0
    return t, 30 * np.sin(t / 3) + 10 * np.cos(2.3 * t) + t


def _nodes(lo, hi, width):
    x, w = gauss_legendre(8)
    edges = np.linspace(lo, hi, int(round((hi - lo) / width)) + 1)
    a, b = edges[:-1], edges[1:]
    nodes = ((a + b)[:, None] + (b - a)[:, None] * x[None, :]).ravel() / 2
    return nodes, ((b - a)[:, None] * w[None, :]).ravel() / 2


def _function_space_distances(notion, amount, **basis):
    """dist over R (quadrature on [-90, 160]) between each release and the LS fit."""
    t, v = _curve()
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
    rng = np.random.default_rng(21)
    fs = [project_and_privatize(t, v, rng=rng, **kw, **basis) for _ in range(DRAWS)]
    params = fs[0].basis_params
    assert all(f.basis_params == params for f in fs)
    b = SincBasis(params["n_terms"], spacing=params["spacing"], first=params["first"])
    exact = least_squares(t, v, b).coefficients[0, :, 0]
    # centres lie in [10, 60]: a sinc holds 2h/(π²L) of its energy beyond distance L,
    # < 1e-3 here, far below what the KS test resolves
    nodes, w = _nodes(-90.0, 160.0, b.spacing)
    x = (nodes[:, None] - b.centres[None, :]) / b.spacing
    phi = np.sinc(x) / math.sqrt(b.spacing)  # the test's own basis values
    diff = np.stack([f.coefficients[0, :, 0] - exact for f in fs], axis=1)
    vals = phi @ diff
    return np.sqrt(w @ (vals * vals)), b.m


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_sinc_fixed_spacing_distance_law(notion):
    amount = 3.0
    d, dim = _function_space_distances(notion, amount, basis="sinc", n_terms=161,
                                       spacing=0.25, first=60)  # centres 15 .. 55
    assert dim == 161
    ref = (stats.gamma(a=dim, scale=1 / amount) if notion == "gp"
           else stats.chi(df=dim, scale=1 / math.sqrt(2 * amount)))
    assert stats.kstest(d, ref.cdf).pvalue > LEVEL


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_sinc_auto_spacing_distance_law(notion):
    # ratios forced to one non-unit spacing h = 0.5·0.5 = 0.25 over [10, 60]: 201 centres
    amount = 2.0
    d, dim = _function_space_distances(notion, amount, basis="sinc", spacing="auto",
                                       sample_spacing=0.5, kink_error=1.0, ratios=("1/2",))
    assert dim == 201
    ref = (stats.gamma(a=dim, scale=1 / amount) if notion == "gp"
           else stats.chi(df=dim, scale=1 / math.sqrt(2 * amount)))
    assert stats.kstest(d, ref.cdf).pvalue > LEVEL


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_sinc_rule_two_budgets(notion):
    """The rule picks D from the budget; the noise follows that D and that budget."""
    t, v = _curve()
    rule = {"spacing": "auto", "sample_spacing": 0.5, "kink_error": 40.0, "edge_error": 5.0}
    dims = []
    for amount in ((0.5, 5.0) if notion == "gp" else (0.05, 0.5)):
        kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
        rng = np.random.default_rng(22)
        fs = [project_and_privatize(t, v, "sinc", rng=rng, **kw, **rule) for _ in range(500)]
        b = fs[0].basis()
        dim = fs[0].dim
        assert dim == b.m == np.count_nonzero((b.centres >= 10.0) & (b.centres <= 60.0))
        exact = least_squares(t, v, b).coefficients[0, :, 0]
        d = np.array([np.linalg.norm(f.coefficients[0, :, 0] - exact) for f in fs])
        ref = (stats.gamma(a=dim, scale=1 / amount) if notion == "gp"
               else stats.chi(df=dim, scale=1 / math.sqrt(2 * amount)))
        assert stats.kstest(d, ref.cdf).pvalue > LEVEL
        dims.append(dim)
    assert dims[0] < dims[1]
