"""PrivFuncSeg (+ ReduceSeg, continuity) through the release task, against the ledger.

Three laws of the paper's Algorithms 4/5 (GP) and 8/9 (CGP), computed here
from the spec (docs/mechanisms.md §1.8-§1.9) and the amounts the LEDGER settled:

* the SVT over dyadic levels: P[k̄ = j] for the input's own dyadic residuals
  dist_j (own quadrature), τ_j = 2^j·m·n/(ε/4) (CGP √(2^j m n)/√(2ρ/4)) and
  noise Lap(3/ε_svt) with ε_svt the ledger's ``svt`` amount (CGP √(2ρ_svt));
  with ReduceSeg off the released segment count is 2^k̄ (χ² goodness of fit);
* every ReduceSeg check that ran, reconstructed from the released segments:
  it merges with probability F(τ − margin − d) (Lap(2^l/ε') or
  N(0, 2^l/(2ρ')) noise, ε' = ε/16 halved per level, d the residual on the
  halved segments); the ledger's ``reduce_seg`` amount must equal the sum of
  the reconstructed checks' costs exactly;
* the final projection: dist₂(f̃, f_a) ~ Gamma(D)/ε_fin (chi(D)/√(2ρ_fin)) for
  the ledger's ``project`` amount, D = segments·m·n; with the continuity
  projection (post-processing) the released noise is P_C of that noise:
  chi(D_C)/√(2ρ_fin) under CGP, Gamma(D)·√Beta(D_C/2, (D−D_C)/2)/ε_fin under GP.

Simulated power for the SVT law (400 curves): SVT at ε instead of ε/4 gives
an expected χ² ≈ 160 (p < 1e-25).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from laws import (
    ALPHA,
    chi2_gof_pvalue,
    ks_pvalue,
    laplace_cdf,
    legendre_values,
    norm_cdf,
    projection,
    svt_index_law,
)
from release_path import release_curves
from scipy import integrate, stats

LO, HI = 0.0, 100.0
T = np.linspace(LO, HI, 257)
M, N_OUT = 2, 2  # linear basis (m = 2), two value columns
TOP = math.ceil(math.log2(T.size))  # the SVT's last level: ⌈log₂ N⌉ (N public), < max_level
BETA_RS, K1 = 0.1 / 2, 4  # ReduceSeg's β (the mechanism's β/2) and depth k₁: defaults

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("privfuncseg",)


def _shape(active_from: float, scale: float = 30.0) -> np.ndarray:
    """A rough walk on [active_from, HI], zero before: flat dyadic parts for ReduceSeg."""
    rng = np.random.default_rng(3)
    walk = np.cumsum(rng.standard_normal((T.size, 2)), axis=0)
    walk -= walk[np.searchsorted(T, active_from)]
    return np.where((T >= active_from)[:, None], walk * scale, 0.0)


def _release(tmp_path, notion, amount, shape, options, users=100, per_user=4):
    curves = {(f"u{u:03d}", f"c{c}"): (T, shape) for u in range(users) for c in range(per_user)}
    rel = release_curves(tmp_path, "privfuncseg", notion, amount, options, curves)
    return rel, rel.spec


@functools.cache
def _fit(shape_key: tuple, edges: tuple) -> tuple[np.ndarray, float]:
    """Exact LS fit of a test shape on given edges (cached: releases repeat segmentations)."""
    return projection(T, _SHAPES[shape_key], np.array(edges), 1)


_SHAPES: dict[tuple, np.ndarray] = {}


def _shape_key(active_from: float, scale: float) -> tuple:
    key = (active_from, scale)
    _SHAPES.setdefault(key, _shape(active_from, scale))
    return key


def _dyadic_residuals(shape: np.ndarray) -> np.ndarray:
    return np.array([math.sqrt(projection(T, shape, np.linspace(LO, HI, 2**j + 1), 1)[1])
                     for j in range(TOP + 1)])


@pytest.mark.parametrize("notion,amount", [("gp", "0.25"), ("cgp", "0.01")])
def test_svt_level_law(tmp_path, notion, amount):
    shape = _shape(LO, scale=3.0)
    rel, spec = _release(tmp_path, notion, amount, shape, {"reduce": False})
    (svt_amount,) = {float(rel.recorded(u, c, "svt")) for u, c in rel.curve_keys()}
    total = float(spec.amount)
    levels = 2.0 ** np.arange(TOP + 1)
    if notion == "gp":
        tau, eps_svt = levels * M * N_OUT / (total / 4), svt_amount
    else:
        tau, eps_svt = np.sqrt(levels * M * N_OUT) / math.sqrt(2 * total / 4), \
            math.sqrt(2 * svt_amount)
    probs = svt_index_law(tau - _dyadic_residuals(shape), 0.0, threshold_scale=3 / eps_svt,
                          query_scale=3 / eps_svt)
    counts = Counter(int(round(math.log2(len(rel.segments_of(u, c)))))
                     for u, c in rel.curve_keys())
    observed = [counts.get(j, 0) for j in range(TOP + 1)]
    assert max(probs) < 0.9  # the law is spread: the test can see a wrong scale
    assert chi2_gof_pvalue(observed, probs) > ALPHA, (observed, np.round(probs * 400, 1))


def _nodes(seg) -> dict[tuple[int, int], None]:
    """Released segments as dyadic nodes (depth, index) of [LO, HI]."""
    out = {}
    for a, b in zip(seg["t_start"], seg["t_end"], strict=True):
        depth = int(round(math.log2((HI - LO) / (b - a))))
        out[(depth, int(round((a - LO) / (HI - LO) * 2**depth)))] = None
    return out


def _inside(nodes, depth, index):
    return [(d, i) for d, i in nodes if d >= depth and i >> (d - depth) == index]


def _checks(nodes, depth, index, seg_depth, level, share):
    """The ReduceSeg checks that ran in a node: (depth, index, seg_depth, level, share, merged)."""
    if level > K1 or seg_depth - depth < 1:
        return []
    inside = _inside(nodes, depth, index)
    merged = any(d < seg_depth for d, _ in inside)
    if not merged:
        assert all(d == seg_depth for d, _ in inside)
    out = [(depth, index, seg_depth, level, share, merged)]
    if merged and seg_depth - 1 > depth:
        for child in (2 * index, 2 * index + 1):
            out += _checks(nodes, depth + 1, child, seg_depth - 1, level + 1, share / 2)
    return out


def _merge_probability(notion, key, check, total):
    depth, index, seg_depth, level, share, _ = check
    width = (HI - LO) / 2**depth
    lo = LO + index * width
    halves = np.linspace(lo, lo + width, 2 ** (seg_depth - 1 - depth) + 1)
    d = math.sqrt(_fit(key, tuple(halves))[1])
    h = 2 ** (seg_depth - depth)
    big_b = total / 4
    log_term = math.log(2**K1 / BETA_RS)
    if notion == "gp":
        scale = 2**level / float(share)
        tau = (h / 2) * (math.e / (math.e - 1)) * M * N_OUT / (2 * big_b)
        return float(laplace_cdf(tau - scale * log_term - d, scale))
    scale = math.sqrt(2**level) / math.sqrt(2 * float(share))
    tau = (math.sqrt(h * M * N_OUT) - math.sqrt(h * M * N_OUT / 2)) / math.sqrt(4 * big_b)
    return float(stats.norm.cdf((tau - scale * math.sqrt(2 * log_term) - d) / scale))


def _binned_bernoulli_pvalue(outcomes, probs) -> float:
    """χ² over bins of predicted probability: Σ (O − E)² / Σ p(1 − p), bins pooled to V ≥ 2."""
    outcomes, probs = np.asarray(outcomes, float), np.asarray(probs, float)
    order = np.argsort(probs)
    stat, df, o, e, v = 0.0, 0, 0.0, 0.0, 0.0
    for k in order:
        o, e, v = o + outcomes[k], e + probs[k], v + probs[k] * (1 - probs[k])
        if v >= 2.0:
            stat, df, o, e, v = stat + (o - e) ** 2 / v, df + 1, 0.0, 0.0, 0.0
    if v > 0:
        stat, df = stat + (o - e) ** 2 / v, df + 1
    if abs(o - e) > 0 and v == 0:
        return 0.0  # an outcome the law says is impossible
    return float(stats.chi2.sf(stat, max(df, 1)))


# CGP at ρ = 1 merges rarely (≈ 0.9 % of checks): 300 users give ≈ 42 expected merges,
# so that both outcomes are seen (P[fewer than 10] ≈ 1e-10) and a law that never
# merges fails; with 100 users (≈ 14 expected) one run in eight saw fewer than 10
@pytest.mark.parametrize("notion,amount,users", [("gp", "16", 100), ("cgp", "1", 300)])
def test_reduce_seg_checks_and_final_noise(tmp_path, notion, amount, users):
    key = _shape_key(75.0, 30.0)
    rel, spec = _release(tmp_path, notion, amount, _SHAPES[key], {}, users=users)
    total = spec.amount
    outcomes, probs, pit = [], [], []
    for (user, curve), diag in zip(rel.curve_keys(), rel.diagnostics, strict=True):
        seg = rel.segments_of(user, curve)
        nodes = _nodes(seg)
        k_bar = diag["k_bar"]
        checks = []
        if 2**k_bar >= 8:
            for part in range(4):
                checks += _checks(nodes, 2, part, k_bar, 1, total / 16)
        spent = sum((c[4] / 2 ** c[3] for c in checks), Fraction(0))
        steps = rel.ledger.breakdown[(user, f"curve:{curve}")]
        assert steps.get("reduce_seg", Fraction(0)) == spent  # every check charged, exactly
        assert sum(steps.values(), Fraction(0)) == total
        for c in checks:
            outcomes.append(c[5])
            probs.append(_merge_probability(notion, key, c, float(total)))
        edges = np.r_[seg["t_start"].to_numpy(), seg["t_end"].to_numpy()[-1]]
        exact, _ = _fit(key, tuple(edges))
        released = np.stack([np.asarray(v).reshape(M, N_OUT) for v in seg["coefficients"]])
        dist = float(np.linalg.norm(released - exact))  # orthonormal Legendre: Euclidean
        pit.append(norm_cdf(notion, released.size, float(steps["project"])).cdf(dist))
        if notion == "cgp":  # the default sampler: the exact lattice of the final step's ρ
            assert _off_lattice(released, steps["project"]) == 0.0
    # the design's power: enough merges and keeps expected, and seen
    assert sum(probs) >= 30 and len(probs) - sum(probs) >= 30
    assert sum(outcomes) >= 10 and len(outcomes) - sum(outcomes) >= 10
    assert _binned_bernoulli_pvalue(outcomes, probs) > ALPHA
    assert ks_pvalue(pit, "uniform") > ALPHA


def _off_lattice(released: np.ndarray, rho: Fraction) -> float:
    """How far the released coefficients are from the lattice γZ of a ρ-CGP draw.

    γ = 2^-20 × the power of two >= σ = 1/√(2ρ) (docs/sampling.md), computed here.
    """
    gamma = 2.0 ** (math.ceil(math.log2(1 / math.sqrt(2 * float(rho)))) - 20)
    return float(np.max(np.abs(released / gamma - np.rint(released / gamma))))


@functools.cache
def _continuity_projector(edges: tuple) -> np.ndarray:
    """The L2 projection onto continuous piecewise-linear functions, in coefficient space.

    Orthonormal Legendre per segment: coefficient space is L2, so the projection is
    I − Cᵀ(CCᵀ)⁻¹C with one row of C per interior breakpoint and output coordinate.
    """
    k = len(edges) - 1
    rows = []
    for i in range(1, k):
        left = legendre_values([edges[i]], edges[i - 1], edges[i], 1)[0]
        right = legendre_values([edges[i]], edges[i], edges[i + 1], 1)[0]
        for j in range(N_OUT):
            r = np.zeros((k, M, N_OUT))
            r[i - 1, :, j], r[i, :, j] = left, -right
            rows.append(r.ravel())
    size = k * M * N_OUT
    if not rows:
        return np.eye(size)
    c = np.array(rows)
    return np.eye(size) - c.T @ np.linalg.solve(c @ c.T, c)


def _gp_projected_cdf(x: float, dim: int, kept: int, eps: float) -> float:
    """P[R·√B/ε ≤ x], R ~ Gamma(D), B ~ Beta(D_C/2, (D − D_C)/2) (projected SLap(D))."""
    if kept == dim:
        return float(stats.gamma(a=dim, scale=1 / eps).cdf(x))
    beta = stats.beta(kept / 2, (dim - kept) / 2)
    val, _ = integrate.quad(lambda b: stats.gamma.cdf(x * eps / math.sqrt(b), dim) * beta.pdf(b),
                            0.0, 1.0, limit=200)
    return val


@pytest.mark.parametrize("notion,amount", [("gp", "1"), ("cgp", "0.02")])  # 8-32 segments
def test_continuity_is_post_processing_of_the_ledger_noise(tmp_path, notion, amount):
    key = _shape_key(LO, 3.0)
    rel, spec = _release(tmp_path, notion, amount, _SHAPES[key],
                         {"continuous": True, "reduce": False}, users=50)
    pit = []
    for user, curve in rel.curve_keys():
        seg = rel.segments_of(user, curve)
        edges = tuple(np.r_[seg["t_start"].to_numpy(), seg["t_end"].to_numpy()[-1]])
        proj = _continuity_projector(edges)
        exact, _ = _fit(key, edges)
        released = np.stack([np.asarray(v).reshape(M, N_OUT) for v in seg["coefficients"]]).ravel()
        noise = released - proj @ exact.ravel()
        assert np.allclose(proj @ noise, noise, atol=1e-6 * (1 + np.abs(noise).max()))
        dim, kept = released.size, int(round(np.trace(proj)))
        fin = float(rel.recorded(user, curve, "project"))
        dist = float(np.linalg.norm(noise))
        if notion == "gp":
            pit.append(_gp_projected_cdf(dist, dim, kept, fin))
        else:
            pit.append(norm_cdf("cgp", kept, fin).cdf(dist))
    assert ks_pvalue(pit, "uniform") > ALPHA
