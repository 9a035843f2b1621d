"""Piecewise Mechanism through the stream release task, against the ε₀ the ledger recorded.

`privatize_stream_chunk` randomizes every step with the registry's
``piecewise`` entry at ε/w (ledger seeds, release snapping). For inputs 0 and
1 (t = −1 and t = 1 on the paper's [−1, 1]) the released reports must follow
the PM law of Wang et al. (ICDE 2019, Algorithm 2; written here from the paper)
at the recorded ε₀ (KS), the two output densities must stay within e^{ε₀} in
every bin (Bonferroni lower confidence bound of the log ratio ≤ ε₀) and reach it
(observed ≥ 0.85 ε₀), and the reports must be unbiased with the paper's
variance (Lemma 1). A randomizer run at ε instead of ε/w (4x here) or at 2ε₀
or ε₀/2 fails the KS test and the ratio or variance checks by far.
8 users × 2 streams × 10 000 steps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from laws import ALPHA, ks_pvalue
from release_path import release_streams
from scipy import stats

from tasks.privatize import StreamSpec

STEPS = 10_000

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("piecewise",)


def _pm_cdf(y: np.ndarray, x: float, eps: float) -> np.ndarray:
    """CDF of a report (y = (s + 1)/2, s the paper's output) for input x, from the paper."""
    h = math.exp(eps / 2)
    c = (h + 1) / (h - 1)
    p_high = (math.exp(eps) - h) / (2 * h + 2)
    p_low = p_high / math.exp(eps)
    t = 2 * x - 1
    left = (c + 1) / 2 * t - (c - 1) / 2
    right = left + c - 1
    s = np.clip(2 * np.asarray(y) - 1, -c, c)
    return (p_low * (np.clip(s, -c, left) + c) + p_high * (np.clip(s, left, right) - left)
            + p_low * (np.clip(s, right, c) - right))


def _log_ratio_bounds(a: np.ndarray, b: np.ndarray, edges: np.ndarray) -> tuple[float, float]:
    c0, _ = np.histogram(a, bins=edges)
    c1, _ = np.histogram(b, bins=edges)
    keep = (c0 >= 100) & (c1 >= 100)
    assert keep.sum() >= 10
    c0, c1 = c0[keep].astype(float), c1[keep].astype(float)
    ratio = np.abs(np.log(c0 / c1))
    z = stats.norm.isf(ALPHA / (2 * keep.sum()))
    return float(np.max(ratio - z * np.sqrt(1 / c0 + 1 / c1))), float(ratio.max())


def test_piecewise_release_law_at_the_ledger_epsilon(tmp_path):
    spec = StreamSpec("4", 4, "piecewise", "none")  # ε = 4 per window of w = 4: ε₀ = 1
    streams = {(f"m{u}", f"s{s}"): np.full(STEPS, float(u % 2))
               for u in range(8) for s in range(2)}
    rel = release_streams(tmp_path, spec, streams)
    amounts = {run[2] for runs in rel.ledger.step_runs.values() for run in runs}
    covered = sum(b - a for runs in rel.ledger.step_runs.values() for a, b, _ in runs)
    assert len(amounts) == 1 and covered == len(streams) * STEPS  # every step charged
    eps0 = float(amounts.pop())
    assert math.isclose(eps0, 1.0)
    s = rel.samples
    y0 = s.loc[s["user_id"].isin(["m0", "m2", "m4", "m6"]), "y"].to_numpy()
    y1 = s.loc[s["user_id"].isin(["m1", "m3", "m5", "m7"]), "y"].to_numpy()
    assert ks_pvalue(y0, lambda y: _pm_cdf(y, 0.0, eps0)) > ALPHA
    assert ks_pvalue(y1, lambda y: _pm_cdf(y, 1.0, eps0)) > ALPHA
    for wrong in (2 * eps0, eps0 / 2, 4 * eps0):  # the test has the power to see these
        assert ks_pvalue(y0, lambda y, e=wrong: _pm_cdf(y, 0.0, e)) < ALPHA
    h = math.exp(eps0 / 2)
    c = (h + 1) / (h - 1)
    lower, observed = _log_ratio_bounds(y0, y1, np.linspace((1 - c) / 2, (1 + c) / 2, 25))
    assert lower <= eps0, f"density ratio above e^ε₀: lower bound {lower:.3f} > {eps0}"
    assert observed >= 0.85 * eps0
    var = (1 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2)) / 4  # Lemma 1 at t = ±1, on [0, 1]
    for y, x in ((y0, 0.0), (y1, 1.0)):
        assert abs(y.mean() - x) < 6 * math.sqrt(var / y.size)  # unbiased
        assert y.var() == pytest.approx(var, rel=0.05)
