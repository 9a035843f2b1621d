"""Project-and-Privatize through the release task: the noise law against the ledger's amount.

Every curve is released by `tasks.privatize.privatize_curve_chunk` with the
ledger's per-user noise seeds and the release snapping. The test projects
each input itself (its own bases and quadrature, `laws.projection`), so
released − projection is the noise, and whitens it with its own Cholesky
factor of the basis' Gram matrix: the whitened noise is Z·scale, with scale
1/ε or 1/√(2ρ) for the amount the LEDGER settled for that curve. Checks (each
at α = 1e-6):

* ‖Lᵀ(ã − a)‖ = dist₂(f̃, f_a) ~ Gamma(D, 1/ε) (GP) or chi(D)/√(2ρ) (CGP), one
  joint draw over all segments;
* GP direction uniform on the sphere: Σ u_i⁴ of u = Z/‖Z‖ against the law of
  normalised Gaussians (a cube-normalised direction gives p ≈ 1e-28 already at
  D = 6 with 300 curves, p < 1e-70 at D = 12 with 300; simulated);
* CGP coordinates iid N(0, 1/(2ρ)) (catches √ρ for √(2ρ): KS distance ≈ 0.16
  over 10 800 coordinates).

The monomial basis has Gram = L·Hilbert (far from I), so dropping the Σ^{1/2}
transform moves dist₂ by large factors: rejected outright. (A joint draw over
several segments is checked by the PrivFuncSeg tests, whose final projection
spans all segments.)
"""

from __future__ import annotations

import numpy as np
import pytest
from laws import (
    ALPHA,
    ks_pvalue,
    norm_cdf,
    pl_values,
    projection,
    sphere_fourth_moment_reference,
    whiten,
)
from release_path import release_curves
from scipy import stats

USERS, PER_USER = 100, 6  # 600 curves, one ledger reservation each
T = np.linspace(0.0, 50.0, 26)
EDGES = [0.0, 50.0]  # one segment: absolute breakpoints are refused by the release's dry run

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("project_and_privatize",)


def _shapes() -> list[np.ndarray]:
    rng = np.random.default_rng(2026)
    out = []
    for _ in range(PER_USER):
        knots = rng.normal(0.0, 20.0, (6, 2))
        out.append(np.column_stack([np.interp(T, np.linspace(0, 50, 6), knots[:, j])
                                    for j in range(2)]))
    return out


SHAPES = _shapes()


def _curves(users: int = USERS) -> dict:
    return {(f"u{u:03d}", f"c{c}"): (T, SHAPES[c]) for u in range(users) for c in range(PER_USER)}


def _whitened_noise(rel, basis: str, degree: int, edges) -> tuple[np.ndarray, np.ndarray]:
    """(whitened noise per curve (curves, D), ledger amount per curve)."""
    exact = {c: projection(T, SHAPES[c], edges, degree, basis)[0] for c in range(PER_USER)}
    m = degree + 1
    z, amounts = [], []
    for user, curve in rel.curve_keys():
        seg = rel.segments_of(user, curve)
        assert list(seg["t_start"]) == list(edges[:-1]) and list(seg["t_end"]) == list(edges[1:])
        released = np.stack([np.asarray(c).reshape(m, 2) for c in seg["coefficients"]])
        noise = released - exact[int(curve[1:])]
        z.append(whiten(noise, basis, edges, degree).ravel())
        amounts.append(float(rel.recorded(user, curve, "project")))
    return np.array(z), np.array(amounts)


def _check_law(notion: str, z: np.ndarray, amounts: np.ndarray) -> None:
    dim = z.shape[1]
    norms = np.linalg.norm(z, axis=1)
    u = [norm_cdf(notion, dim, a).cdf(r) for r, a in zip(norms, amounts, strict=True)]
    assert ks_pvalue(u, "uniform") > ALPHA, "dist₂(f̃, f_a) does not follow the ledger's amount"
    if notion == "gp":
        ref = sphere_fourth_moment_reference(dim)
        stat = np.sum((z / norms[:, None]) ** 4, axis=1)
        assert stats.ks_2samp(stat, ref).pvalue > ALPHA, "noise direction is not uniform"
    else:
        coords = (z * np.sqrt(2.0 * amounts)[:, None]).ravel()
        assert ks_pvalue(coords, "norm") > ALPHA, "whitened noise coordinates are not N(0, 1/2ρ)"


@pytest.mark.parametrize("notion", ["gp", "cgp"])
@pytest.mark.parametrize("basis", ["legendre", "monomial"])
def test_polynomial_bases_noise_law(tmp_path, notion, basis):
    degree = 5
    # 600 curves (300 for monomials: each needs three small triangular solves per curve)
    users = USERS if basis == "legendre" else USERS // 2
    rel = release_curves(tmp_path, "project_and_privatize", notion,
                         "0.9" if notion == "gp" else "0.35",
                         {"basis": basis, "degree": degree},
                         _curves(users))
    spec = rel.spec
    assert len(rel.curve_keys()) == users * PER_USER
    z, amounts = _whitened_noise(rel, basis, degree, EDGES)
    assert z.shape[1] == (degree + 1) * 2  # one joint draw over 6 terms x 2 coordinates
    assert set(amounts) == {float(spec.amount)}  # the ledger settled what was reserved
    _check_law(notion, z, amounts)


def _sinc_projection(curve: int, centres: np.ndarray, h: float) -> np.ndarray:
    """∫ q φ_j dt with φ_j = sinc((t − c_j)/h)/√h, by 24-point Gauss per linear piece."""
    x, w = np.polynomial.legendre.leggauss(24)
    lo, hi = T[:-1, None], T[1:, None]
    nodes = (0.5 * (lo + hi) + 0.5 * (hi - lo) * x).ravel()
    weights = (0.5 * (hi - lo) * w).ravel()
    q = pl_values(T, SHAPES[curve], nodes)
    phi = np.sinc((nodes[:, None] - centres[None, :]) / h) / np.sqrt(h)
    return (phi * weights[:, None]).T @ q


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_sinc_basis_noise_law(tmp_path, notion):
    """The sinc functions are orthonormal on R: the coefficient noise is Z·scale directly."""
    h, n_terms, first = 5.0, 11, 0
    rel = release_curves(tmp_path, "project_and_privatize", notion,
                         "1.3" if notion == "gp" else "0.6",
                         {"basis": "sinc", "n_terms": n_terms, "spacing": h, "first": first},
                         _curves())
    centres = (first + np.arange(n_terms)) * h
    exact = {c: _sinc_projection(c, centres, h) for c in range(PER_USER)}
    z, amounts = [], []
    for user, curve in rel.curve_keys():
        (coefs,) = rel.segments_of(user, curve)["coefficients"]
        z.append((np.asarray(coefs).reshape(n_terms, 2) - exact[int(curve[1:])]).ravel())
        amounts.append(float(rel.recorded(user, curve, "project")))
    _check_law(notion, np.array(z), np.array(amounts))
