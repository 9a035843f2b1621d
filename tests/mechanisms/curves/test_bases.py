import numpy as np
import pytest
from scipy import integrate

from mechanisms.curves import (
    FourierBasis,
    LegendreBasis,
    MonomialBasis,
    SincBasis,
    least_squares,
    make_basis,
)
from mechanisms.curves._piecewise import SubPieces
from mechanisms.errors import MechanismParameterError

A, B = 10.0, 60.0


def _gram_by_quad(basis, a, b):
    m = basis.m
    g = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            g[i, j] = integrate.quad(
                lambda x, i=i, j=j: basis.values(np.array([x]), a, b)[0, i]
                * basis.values(np.array([x]), a, b)[0, j],
                a,
                b,
                limit=200,
            )[0]
    return g


@pytest.mark.parametrize(
    "basis", [LegendreBasis(4), FourierBasis(5), MonomialBasis(3)], ids=lambda b: b.name
)
def test_gram_matches_quadrature_on_10_60(basis):
    assert np.allclose(_gram_by_quad(basis, A, B), basis.gram(A, B), atol=1e-10)


def _curve():
    t = np.array([10.0, 12.5, 19.0, 33.3, 40.0, 52.0, 60.0])
    v = np.c_[[0.0, 2.0, -1.0, 4.0, 3.5, -2.0, 1.0], [1.0, 1.0, 0.0, 0.0, 2.0, 2.0, 5.0]]
    return t, v


@pytest.mark.parametrize(
    "basis", [LegendreBasis(3), FourierBasis(7), MonomialBasis(2)], ids=lambda b: b.name
)
def test_inner_products_exact_against_quad(basis):
    t, v = _curve()
    edges = np.array([A, 27.0, B])
    inner = basis.inner(SubPieces(t, v, edges), edges)
    for r in range(2):
        a, b = edges[r], edges[r + 1]
        for j in range(basis.m):
            for c in range(2):
                def f(x, j=j, c=c, a=a, b=b):
                    return np.interp(x, t, v[:, c]) * basis.values(np.array([x]), a, b)[0, j]

                ref = integrate.quad(f, a, b, points=t[(t > a) & (t < b)], limit=200)[0]
                assert inner[r, j, c] == pytest.approx(ref, abs=1e-9)


def test_sinc_inner_exact_against_quad():
    t, v = _curve()
    basis = SincBasis(6, spacing=7.0, first=1)
    inner = basis.inner(t, v)
    for j in range(basis.m):
        def f(x, j=j):
            return np.interp(x, t, v[:, 0]) * basis.values(np.array([x]))[0, j]

        ref = integrate.quad(f, A, B, points=t[1:-1], limit=400)[0]
        assert inner[j, 0] == pytest.approx(ref, abs=1e-9)


@pytest.mark.slow
def test_sinc_orthonormal_over_r():
    # ∫_R sinc(x-j) sinc(x-l) dx = δ_jl; check via Parseval on a long interval (tail ~ 1/L)
    basis = SincBasis(3, spacing=2.0, first=0)
    x = np.linspace(-4000, 4000, 4_000_001)
    phi = basis.values(x)
    g = phi.T @ phi * (x[1] - x[0])
    assert np.allclose(g, np.eye(3), atol=2e-3)


def test_legendre_recovers_polynomial_exactly_on_10_60():
    # a cubic sampled densely is not piecewise linear; use a linear curve in the span of degree 1
    t = np.linspace(A, B, 11)
    v = 3.0 * t - 7.0
    fit = least_squares(t, v, "legendre", degree=1)
    assert np.allclose(fit.evaluate(t)[:, 0], v, atol=1e-10)


def test_piecewise_fit_in_span_is_exact():
    edges = np.array([A, 20.0, 45.0, B])
    t = np.array([A, 15.0, 20.0, 30.0, 45.0, 50.0, B])
    v = np.c_[np.interp(t, edges, [0.0, 5.0, -3.0, 2.0]), np.interp(t, edges, [1.0, 1.0, 4.0, 0.0])]
    fit = least_squares(t, v, "linear", breakpoints=edges)
    assert np.allclose(fit.evaluate(t), v, atol=1e-10)


def test_make_basis_errors():
    with pytest.raises(MechanismParameterError, match="unknown basis"):
        make_basis("wavelet")
    with pytest.raises(MechanismParameterError, match="degree"):
        make_basis("legendre", degree=-1)
    with pytest.raises(MechanismParameterError):
        SincBasis(10, spacing=0.0)
