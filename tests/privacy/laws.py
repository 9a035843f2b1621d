"""The noise laws of the papers, computed independently of the code under test.

Everything here is written from the specs (docs/mechanisms.md, the papers' algorithms),
with its own quadrature, bases and SVT probabilities: no function of
`mechanisms` is used to compute an expected value.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import stats

#: Significance level of every statistical check in tests/privacy. Each test's
#: sample size gives a factor-2 scale error (or a wrong budget split) a p-value
#: far below it (the power figures are in each test's docstring).
ALPHA = 1e-6

@functools.lru_cache(maxsize=64)
def _nodes(g: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre rule with g points (exact for polynomials of degree 2g − 1)."""
    return np.polynomial.legendre.leggauss(g)


def legendre_values(t: np.ndarray, a: float, b: float, degree: int) -> np.ndarray:
    """Orthonormal Legendre φ_l(t) = √((2l+1)/L) P_l(2(t−a)/L − 1) on [a, b]: (len(t), degree+1)."""
    length = b - a
    s = 2.0 * (np.asarray(t, dtype=np.float64) - a) / length - 1.0
    v = np.polynomial.legendre.legvander(s, degree)
    return v * np.sqrt((2.0 * np.arange(degree + 1) + 1.0) / length)


def monomial_values(t: np.ndarray, a: float, b: float, degree: int) -> np.ndarray:
    """Monomials ((t − a)/L)^k on [a, b] (the rescaled-segment basis): (len(t), degree+1)."""
    return np.polynomial.polynomial.polyvander((np.asarray(t) - a) / (b - a), degree)


def basis_values(name: str, t: np.ndarray, a: float, b: float, degree: int) -> np.ndarray:
    """Values of the named local polynomial basis on the segment [a, b]."""
    if name == "legendre":
        return legendre_values(t, a, b, degree)
    if name == "monomial":
        return monomial_values(t, a, b, degree)
    raise ValueError(f"no independent definition of basis {name!r} here")


def _piece_nodes(t: np.ndarray, a: float, b: float, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss nodes and weights on every linear piece of a PL curve inside [a, b]."""
    cuts = np.unique(np.concatenate([[a, b], t[(t > a) & (t < b)]]))
    x, w = _nodes(g)
    lo, hi = cuts[:-1, None], cuts[1:, None]
    nodes = (0.5 * (lo + hi) + 0.5 * (hi - lo) * x[None, :]).ravel()
    weights = (0.5 * (hi - lo) * w[None, :]).ravel()
    return nodes, weights


def pl_values(t: np.ndarray, v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The piecewise-linear interpolant of samples (t, v (N, n)) at x (zero outside [t0, tN])."""
    out = np.column_stack([np.interp(x, t, v[:, j], left=0.0, right=0.0)
                           for j in range(v.shape[1])])
    return out


def gram(name: str, a: float, b: float, degree: int) -> np.ndarray:
    """∫_a^b φ_j φ_l dt of the basis, by quadrature (exact: polynomial of degree 2·degree)."""
    x, w = _nodes(degree + 2)
    nodes = 0.5 * (a + b) + 0.5 * (b - a) * x
    phi = basis_values(name, nodes, a, b, degree)
    return (phi * (0.5 * (b - a) * w)[:, None]).T @ phi


def projection(t: np.ndarray, v: np.ndarray, edges: Sequence[float], degree: int,
               name: str = "legendre") -> tuple[np.ndarray, float]:
    """Exact least-squares coefficients (k, m, n) of a PL curve on segments, and ‖residual‖².

    Inner products ∫ q φ dt per linear piece by Gauss-Legendre (exact for the
    product of a linear piece and a polynomial of this degree).
    """
    edges = np.asarray(edges, dtype=np.float64)
    coefs, res2 = [], 0.0
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        nodes, weights = _piece_nodes(t, a, b, degree // 2 + 2)
        q = pl_values(t, v, nodes)
        phi = basis_values(name, nodes, a, b, degree)
        r = (phi * weights[:, None]).T @ q
        c = np.linalg.solve(gram(name, a, b, degree), r)
        coefs.append(c)
        res2 += float(np.sum(weights[:, None] * q * q) - np.sum(c * r))
    return np.stack(coefs), max(res2, 0.0)


def whiten(noise: np.ndarray, name: str, edges: Sequence[float], degree: int) -> np.ndarray:
    """Lᵀ·noise per segment (G = L Lᵀ): coordinates in which the L2 norm is Euclidean."""
    edges = np.asarray(edges, dtype=np.float64)
    out = []
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        chol = np.linalg.cholesky(gram(name, a, b, degree))
        out.append(chol.T @ noise[i])
    return np.stack(out)


# ----------------------------------------------------------------- laws of ‖Z‖


def norm_cdf(notion: str, dim: int, amount: float) -> stats.rv_continuous:
    """Law of dist₂(f̃, f_a): Gamma(D, 1/ε) (SLap(D)/ε) or chi(D)/√(2ρ) (N(0, I_D)/√(2ρ))."""
    if notion == "gp":
        return stats.gamma(a=dim, scale=1.0 / amount)
    return stats.chi(df=dim, scale=1.0 / math.sqrt(2.0 * amount))


def sphere_fourth_moment_reference(dim: int, size: int = 200_000, seed: int = 0) -> np.ndarray:
    """Σ u_i⁴ for u uniform on S^{dim−1} (normalised Gaussians: the definition), sorted."""
    g = np.random.default_rng(seed).standard_normal((size, dim))
    u = g / np.linalg.norm(g, axis=1, keepdims=True)
    return np.sort(np.sum(u**4, axis=1))


def ks_pvalue(samples: np.ndarray, cdf) -> float:
    """One-sample KS p-value."""
    return float(stats.kstest(np.asarray(samples, dtype=np.float64), cdf).pvalue)


# ----------------------------------------------------------------- SVT


def laplace_cdf(x: np.ndarray, scale: float) -> np.ndarray:
    """CDF of Lap(0, scale)."""
    x = np.asarray(x, dtype=np.float64) / scale
    return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0.0)), 1.0 - 0.5 * np.exp(-np.maximum(x, 0)))


def svt_index_law(queries: Sequence[float], threshold: float, *, threshold_scale: float,
                  query_scale: float) -> np.ndarray:
    """P[SVT returns index j], j = 0..J−1, for AboveThreshold with a finite query list.

    W ~ Lap(threshold_scale) once, ν_j ~ Lap(query_scale); halt at the first j
    with g_j + ν_j ≥ 𝒯 + W; when none crosses the last index is returned.
    Integrated numerically over W (grid of 40 001 points over ±60 scales).
    """
    g = np.asarray(queries, dtype=np.float64)
    w = np.linspace(-60.0, 60.0, 40_001) * threshold_scale
    dens = 0.5 / threshold_scale * np.exp(-np.abs(w) / threshold_scale)
    below = laplace_cdf(threshold + w[:, None] - g[None, :], query_scale)  # P[no cross at j | w]
    survive = np.cumprod(np.concatenate([np.ones((w.size, 1)), below[:, :-1]], axis=1), axis=1)
    per = survive * (1.0 - below)
    per[:, -1] = survive[:, -1]  # the last index: crossing there or exhausting the list
    probs = np.trapezoid(per * dens[:, None], w, axis=0)
    return probs / probs.sum()


def chi2_gof_pvalue(observed: Sequence[int], probs: Sequence[float], min_expected: float = 5.0,
                    ) -> float:
    """χ² goodness of fit; cells with expected count < min_expected are pooled."""
    obs = np.asarray(observed, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    exp = p * obs.sum()
    keep = exp >= min_expected
    o = list(obs[keep]) + ([obs[~keep].sum()] if (~keep).any() else [])
    e = list(exp[keep]) + ([exp[~keep].sum()] if (~keep).any() else [])
    if len(o) < 2:
        return 1.0
    return float(stats.chisquare(o, e).pvalue)


def chi2_homogeneity_pvalue(a: Counter, b: Counter, min_total: int = 20) -> float:
    """χ² test that two samples of a discrete outcome share one law (rare cells pooled)."""
    keys = sorted(set(a) | set(b), key=repr)
    x = np.array([a.get(k, 0) for k in keys], dtype=np.float64)
    y = np.array([b.get(k, 0) for k in keys], dtype=np.float64)
    keep = (x + y) >= min_total
    rows = [list(x[keep]), list(y[keep])]
    if (~keep).any() and (x[~keep].sum() + y[~keep].sum()) > 0:
        rows[0].append(x[~keep].sum())
        rows[1].append(y[~keep].sum())
    if len(rows[0]) < 2:
        return 1.0
    return float(stats.chi2_contingency(np.array(rows))[1])


def l2_norm(t: np.ndarray, v: np.ndarray, lo: float, hi: float) -> float:
    """‖q·1_[lo, hi]‖₂ of the PL interpolant (zero outside its samples), by exact quadrature."""
    lo, hi = max(lo, float(t[0])), min(hi, float(t[-1]))
    if lo >= hi:
        return 0.0
    nodes, weights = _piece_nodes(t, lo, hi, 2)
    q = pl_values(t, v, nodes)
    return math.sqrt(float(np.sum(weights[:, None] * q * q)))


# ----------------------------------------------------------------- Square Wave


def square_wave_constants(eps0: float) -> tuple[float, float, float]:
    """(b, p, q) of Li et al. SIGMOD'20: b = (εe^ε − e^ε + 1)/(2e^ε(e^ε − 1 − ε)), p/q = e^ε.

    Written from the paper's formulas (expm1 against the small-ε cancellation).
    """
    e = math.exp(eps0)
    num = eps0 * e - math.expm1(eps0)              # εe^ε − e^ε + 1
    den = 2.0 * e * (math.expm1(eps0) - eps0)       # 2e^ε(e^ε − 1 − ε)
    b = num / den
    q = 1.0 / (2.0 * b * e + 1.0)
    return b, e * q, q


def square_wave_cdf(y: np.ndarray, x: float, eps0: float) -> np.ndarray:
    """CDF of the Square Wave output for input x ∈ [0, 1]: density p on |y − x| ≤ b, q elsewhere."""
    b, p, q = square_wave_constants(eps0)
    y = np.clip(np.asarray(y, dtype=np.float64), -b, 1.0 + b)
    left = np.clip(y, -b, x - b) + b
    mid = np.clip(y, x - b, x + b) - (x - b)
    right = np.clip(y, x + b, 1.0 + b) - (x + b)
    return np.clip(q * left + p * mid + q * right, 0.0, 1.0)
