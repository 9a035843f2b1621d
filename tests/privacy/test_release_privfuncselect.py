"""PrivFuncSelect through the release task against an independent simulation of the paper.

Algorithm 3 (GP) / 7 (CGP) of the paper, written here from the spec
(docs/mechanisms.md §1.6) with numpy only and calibrated to the four sub-step
amounts the LEDGER settled for the release (svt_terms, project_all,
svt_subset, project_subset), gives the law of the released selection (the set
of Legendre degrees with non-zero coefficients). A χ² homogeneity test
compares the released selections with 20 000 simulated ones; the final
coefficients' noise is checked against Gamma(k₁n)/ε₄ (chi(k₁n)/√(2ρ₄)).

The input's Legendre coefficients are a few multiples of the line-2 noise
scale, so the ranking of line 3 is noise-sensitive. Simulated power: line 2
at ε instead of ε/4 (GP, noise 4x too small) gives an expected χ² of 60 from
16 curves (400 are released: χ² ≈ 1500); at ρ instead of ρ/4 (CGP, noise 2x
too small) from ≈ 860 curves, so the CGP case releases 1600 (slow).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from laws import ALPHA, chi2_homogeneity_pvalue, ks_pvalue, legendre_values, norm_cdf, projection
from release_path import release_curves

MAX_TERMS = 33  # the mechanism's default: Legendre degrees 0..32
USERS, PER_USER = 100, 4
T = np.linspace(0.0, 50.0, 201)
# x's Legendre coefficients in line-2 noise scales: separated degrees, so line 3's ranking
# and line 5's SVT decide among a few well-defined candidates
SHAPE_UNITS = [0.0, 4.0, 0, 0, 3.0, 0, 0, 2.0, 0, 0, 1.0, 0, 0, 0.5]

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("privfuncselect",)


def _curve() -> np.ndarray:
    x = legendre_values(T, 0.0, 50.0, len(SHAPE_UNITS) - 1) @ np.array(SHAPE_UNITS)
    return np.column_stack([x + 3.0, np.zeros_like(x)])


def _slap(rng, size, dim):
    g = rng.standard_normal((size, dim))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g * rng.gamma(dim, 1.0, (size, 1))


def _svt(rng, queries, threshold, eps):
    """AboveThreshold per row: W ~ Lap(3/ε) once, ν_j ~ Lap(3/ε); index of first crossing."""
    size, count = queries.shape
    w = rng.laplace(0.0, 3.0 / eps, (size, 1))
    hit = queries + rng.laplace(0.0, 3.0 / eps, (size, count)) >= threshold + w
    return np.where(hit.any(axis=1), hit.argmax(axis=1), count - 1)


def simulate(c, res2, notion, amounts, total, size, seed):
    """Released selections of the paper's algorithm for exact coefficients c (J, n)."""
    rng = np.random.default_rng(seed)
    n = c.shape[1]
    quarter = total / 4
    if notion == "gp":
        eps1, eps2 = amounts["svt_terms"], amounts["svt_subset"]
        scale2, unit = 1.0 / amounts["project_all"], 1.0 / quarter
    else:
        eps1, eps2 = math.sqrt(2 * amounts["svt_terms"]), math.sqrt(2 * amounts["svt_subset"])
        scale2, unit = 1.0 / math.sqrt(2 * amounts["project_all"]), 1.0 / math.sqrt(2 * quarter)
    energy = np.sum(c**2, axis=1)
    dist = np.sqrt(np.maximum(res2 + energy.sum() - np.cumsum(energy), 0.0))
    k_bar = _svt(rng, np.broadcast_to(-dist, (size, dist.size)), -unit, eps1) + 1
    out = []
    for k in np.unique(k_bar):
        m = int(np.sum(k_bar == k))
        z = _slap(rng, m, k * n) if notion == "gp" else rng.standard_normal((m, k * n))
        noisy = c[None, :k] + scale2 * z.reshape(m, k, n)
        order = np.argsort(-np.linalg.norm(noisy, axis=2), axis=1, kind="stable")
        err = np.sum((c[None, :k] - noisy) ** 2, axis=2) - energy[None, :k]
        d = np.sqrt(np.maximum(res2 + energy.sum()
                               + np.cumsum(np.take_along_axis(err, order, axis=1), axis=1), 0.0))
        r = np.arange(1, k + 1)
        pen = n * r * unit if notion == "gp" else np.sqrt(n * r) * unit
        k1 = _svt(rng, pen[None, :] - d, 0.0, eps2) + 1
        out.extend(tuple(sorted(order[i, : k1[i]].tolist())) for i in range(m))
    return Counter(out)


@pytest.mark.parametrize("notion,amount,users", [  # amounts: line-2 noise scale 1
    ("gp", "4", USERS), pytest.param("cgp", "2", 4 * USERS, marks=pytest.mark.slow)])
def test_privfuncselect_selection_and_final_noise(tmp_path, notion, amount, users):
    shape = _curve()
    curves = {(f"u{u:03d}", f"c{c}"): (T, shape) for u in range(users) for c in range(PER_USER)}
    rel = release_curves(tmp_path, "privfuncselect", notion, amount, {}, curves)
    spec = rel.spec
    exact, res2 = projection(T, shape, [0.0, 50.0], MAX_TERMS - 1)
    exact = exact[0]
    released, u = Counter(), []
    steps = None
    for user, curve in rel.curve_keys():
        recorded = rel.ledger.breakdown[(user, f"curve:{curve}")]
        steps = steps or recorded
        assert recorded == steps  # the same split for every curve
        (coefs,) = rel.segments_of(user, curve)["coefficients"]
        coefs = np.asarray(coefs).reshape(MAX_TERMS, 2)
        chosen = np.flatnonzero(np.any(coefs != 0.0, axis=1))
        released[tuple(chosen.tolist())] += 1
        dist = float(np.linalg.norm(coefs[chosen] - exact[chosen]))
        if notion == "cgp":  # the default sampler: the lattice γZ of the final step's ρ
            sigma = 1 / math.sqrt(2 * float(recorded["project_subset"]))
            gamma = 2.0 ** (math.ceil(math.log2(sigma)) - 20)
            assert np.all(coefs[chosen] / gamma == np.rint(coefs[chosen] / gamma))
        u.append(norm_cdf(notion, chosen.size * 2, float(recorded["project_subset"])).cdf(dist))
    total = float(sum(steps.values()))
    assert total == float(spec.amount)
    sim = simulate(exact, res2, notion, {k: float(v) for k, v in steps.items()}, total,
                   20_000, seed=5)
    assert len(released) > 3  # the selection is random: the test has something to compare
    assert chi2_homogeneity_pvalue(released, sim) > ALPHA, (released.most_common(5),
                                                            sim.most_common(5))
    assert ks_pvalue(u, "uniform") > ALPHA
