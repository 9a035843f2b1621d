"""The exact discrete Gaussian (CKS20) and its lattice CGP release, against their laws.

* The samplers: Bernoulli(e^−γ) frequencies (binomial tests), the discrete
  Laplace and the real-centred discrete Gaussian N_Z(c, σ²) against their pmfs
  computed here by direct summation (χ², 20 000 draws each), α = 1e-6.
* The Rényi bound the charge rests on: for real centres c, c' the exact
  D_α(N_Z(c, σ²) ‖ N_Z(c', σ²)), summed numerically, stays within
  α(c − c')²(1/σ² + K)/2 with K from `log_partition_curvature_bound`, at σ
  small enough (σ ≤ 1) that the correction K is visible (D_α exceeds the
  continuous α(c − c')²/(2σ²) there, so the check is not vacuous).
* Through the release task: Project-and-Privatize with ρ-CGP and
  ``noise = "discrete_gaussian"`` releases whitened coordinates on the lattice
  γZ (γ = 2^-20 × the power of two >= σ), whose noise follows N(0, 1/(2ρ)) for
  the ρ the LEDGER recorded (KS; the lattice is 2^-20 σ fine).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from laws import ALPHA, chi2_gof_pvalue, ks_pvalue, projection, whiten
from release_path import release_curves
from scipy import stats

from mechanisms.discrete_gaussian import (
    _bernoulli_ratio,
    _centre_parts,
    _offsets,
    bernoulli_exp,
    cgp_lattice,
    discrete_gaussian,
    discrete_laplace,
    lattice_step,
    log_partition_curvature_bound,
)
from mechanisms.safe_sampling import power_of_two_at_least
from tasks.keyed_rng import release_generator

Q = 2**64 // 3
MECHANISMS_COVERED = ()  # a noise option of project_and_privatize, not a registry entry


def _pmf(support: np.ndarray, logw) -> np.ndarray:
    w = np.exp(logw(support) - np.max(logw(support)))
    return w / w.sum()


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 3)])
def test_bernoulli_exp_frequency(gamma):
    rng = release_generator(7)
    n = 20_000
    hits = sum(bernoulli_exp(gamma, rng) for _ in range(n))
    assert stats.binomtest(hits, n, math.exp(-gamma)).pvalue > ALPHA


def test_discrete_laplace_pmf():
    rng = release_generator(8)
    t = 3
    draws = discrete_laplace(t, rng, size=20_000)
    support = np.arange(-60, 61)
    probs = _pmf(support, lambda y: -np.abs(y) / t)
    counts = np.array([np.sum(draws == y) for y in support])
    assert np.all(np.abs(draws) <= 60)
    assert chi2_gof_pvalue(counts, probs) > ALPHA


@pytest.mark.parametrize("center,sigma2", [(Fraction(3, 10), Fraction(5, 2)),
                                           (-1.75, Fraction(9, 4)), (0.5, Fraction(1, 3)),
                                           (12.125, Fraction(40))])
def test_real_centred_discrete_gaussian_pmf(center, sigma2):
    rng = release_generator(9)
    draws = np.array(discrete_gaussian(center, sigma2, rng, size=20_000))
    c, s2 = float(center), float(sigma2)
    support = np.arange(math.floor(c - 40 * math.sqrt(s2)), math.ceil(c + 40 * math.sqrt(s2)))
    probs = _pmf(support, lambda y: -((y - c) ** 2) / (2 * s2))
    counts = np.array([np.sum(draws == y) for y in support])
    assert chi2_gof_pvalue(counts, probs) > ALPHA


@pytest.mark.parametrize("centre", [0.7, -0.6, 3.5, 0.25, -2.875])
@pytest.mark.parametrize("sigma2", [Fraction(9, 4), Fraction(50)])
def test_lattice_core_draws_around_real_centres(centre, sigma2):
    # the vector path of cgp_lattice (centre split into m + f, |f| <= 1/2, then the
    # shifted offsets) at small σ², where one lattice step is visible: m + y must follow
    # N_Z(c, σ²) whichever side of 1/2 the fractional part lies (cgp_lattice itself
    # always has σ_Z > 2^19, where a one-step error or a too-small proposal scale is
    # invisible statistically)
    m, num, den = _centre_parts(np.full(20_000, centre))
    draws = m + _offsets(num, den, sigma2, release_generator(5))
    s = math.sqrt(float(sigma2))
    support = np.arange(math.floor(centre - 40 * s), math.ceil(centre + 40 * s))
    probs = _pmf(support, lambda y: -((y - centre) ** 2) / (2 * float(sigma2)))
    counts = np.array([np.sum(draws == y) for y in support])
    assert counts.sum() == draws.size
    assert chi2_gof_pvalue(counts, probs) > ALPHA


class _Words:
    """A generator stand-in that hands out given 64-bit words (for the tie rule)."""

    def __init__(self, words):
        self.words = list(words)

    def integers(self, low, high, size, dtype):
        assert (low, high, dtype) == (0, 2**64, np.uint64)
        out, self.words = self.words[:size], self.words[size:]
        return np.array(out, dtype=np.uint64)


@pytest.mark.parametrize("words,expected", [
    ([Q - 1], True), ([Q + 1], False),       # decided by the first word
    ([Q, Q - 1], True), ([Q, Q + 1], False),  # a tie: the next word against the remainder
    ([Q, Q, Q, Q - 1], True),                 # 1/3 = 0.010101…: every word ties with Q
])
def test_bernoulli_ratio_reads_further_words_on_a_tie(words, expected):
    # U < 1/3 for U = 0.w1 w2 … in base 2^64; Q = ⌊2^64/3⌋ and 2^64 − 3Q = 1, so the
    # remainder after a tie is again 1/3 of the next word's range (computed by hand)
    rng = _Words(words)
    assert _bernoulli_ratio([1], [3], rng).tolist() == [expected]
    assert rng.words == []


def test_each_coordinate_follows_its_own_centre():
    # a vector of centres σ_Z apart (one call, coordinates drawn side by side): each
    # coordinate's mean and spread are those of N_Z(c_j, σ_Z²), so a coordinate drawn
    # around another's centre is off by >= 55 standard errors; the fractional parts
    # include a centre of 1e-300 (a 2^-1000 denominator)
    gamma, sigma2_z = lattice_step(Fraction(1, 2))
    s = math.sqrt(float(sigma2_z))
    centres = np.array([0.0, 1e-300, 0.3 + s, -0.7 - 2 * s, 2.5 + 3 * s, -4 * s]) * gamma
    draws = np.stack([cgp_lattice(centres, rho=Fraction(1, 2), rng=release_generator(100 + i))[0]
                      for i in range(3000)]) / gamma
    sd = math.sqrt(float(sigma2_z))
    assert np.all(draws == np.rint(draws))  # on the lattice
    z = (draws.mean(axis=0) - centres / gamma) / (sd / math.sqrt(len(draws)))
    assert np.all(np.abs(z) < 5.5), z
    assert np.all(np.abs(draws.std(axis=0) / sd - 1) < 0.1)


def _renyi(c: float, c2: float, s2: float, alpha: float) -> float:
    y = np.arange(-200, 201, dtype=np.float64)
    lp = -((y - c) ** 2) / (2 * s2)
    lq = -((y - c2) ** 2) / (2 * s2)
    lp -= np.logaddexp.reduce(lp)
    lq -= np.logaddexp.reduce(lq)
    return float(np.logaddexp.reduce(alpha * lp + (1 - alpha) * lq) / (alpha - 1))


@pytest.mark.parametrize("sigma2", [0.25, 0.4, 1.0])
def test_renyi_divergence_within_the_charged_bound(sigma2):
    k = log_partition_curvature_bound(sigma2)
    worst_excess = 0.0
    for c in np.linspace(-0.5, 0.5, 11):
        for delta in (0.05, 0.3, 1.0, 2.5):
            for alpha in (1.5, 2.0, 5.0, 20.0):
                d = _renyi(c, c + delta, sigma2, alpha)
                bound = alpha * delta**2 * (1 / sigma2 + k) / 2
                assert d <= bound * (1 + 1e-9) + 1e-12, (c, delta, alpha, d, bound)
                worst_excess = max(worst_excess, d / (alpha * delta**2 / (2 * sigma2)))
    if sigma2 <= 0.4:
        assert worst_excess > 1.0  # the curvature term is needed: the check is not vacuous


@pytest.mark.slow
@pytest.mark.parametrize("basis", ["legendre", "monomial"])
def test_release_with_discrete_gaussian_noise(tmp_path, basis):
    t = np.linspace(0.0, 40.0, 21)
    shape = np.c_[10 * np.sin(t / 6.0), t - 20.0]
    curves = {(f"u{u:03d}", "c0"): (t, shape) for u in range(150)}
    degree = 3
    rel = release_curves(tmp_path, "project_and_privatize", "cgp", "0.35",
                         {"basis": basis, "degree": degree, "noise": "discrete_gaussian"},
                         curves)
    exact = projection(t, shape, [0.0, 40.0], degree, basis)[0]
    rho = {float(rel.recorded(u, c, "project")) for u, c in rel.curve_keys()}
    assert rho == {0.35}
    sigma = 1 / math.sqrt(2 * 0.35)
    gamma = power_of_two_at_least(sigma) * 2.0**-20
    z, off_lattice = [], []
    for user, curve in rel.curve_keys():
        (coefs,) = rel.segments_of(user, curve)["coefficients"]
        released = np.asarray(coefs).reshape(1, degree + 1, 2)
        off_lattice.append(np.max(np.abs(released / gamma - np.rint(released / gamma))))
        w = whiten(released, basis, [0.0, 40.0], degree)
        z.append((w - whiten(exact, basis, [0.0, 40.0], degree)).ravel() / sigma)
    if basis == "legendre":  # orthonormal: the released coefficients are the lattice points
        assert max(off_lattice) == 0.0
    # (monomials: L^{-T} maps the lattice points to coefficients, which the release then
    # snaps to its grid: post-processing of the lattice release)
    assert ks_pvalue(np.concatenate(z), "norm") > ALPHA
