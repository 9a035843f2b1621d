"""Square Wave through the stream release task, against the per-step ε₀ the ledger recorded.

`privatize_stream_chunk` randomizes every step of every stream (with the
ledger's seeds and the release snapping); the ledger records runs of per-step
amounts. For inputs 0 and 1 (the two most distant values of [0, 1]) the
released samples must follow the Square Wave law at the recorded ε₀ (KS
against the paper's CDF, own implementation), and the two output densities
must stay within e^{ε₀} in every bin (Bonferroni lower confidence bound of
the log ratio ≤ ε₀) while reaching it (observed ≥ 0.85 ε₀: the randomizer does
not run at a smaller ε₀ either). 8 users × 2 streams × 10 000 steps.
"""

from __future__ import annotations

import math

import numpy as np
from laws import ALPHA, ks_pvalue, square_wave_cdf, square_wave_constants
from release_path import release_streams
from scipy import stats

from tasks.privatize import StreamSpec

STEPS = 10_000

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("square_wave",)


def _log_ratio_bounds(a: np.ndarray, b: np.ndarray, edges: np.ndarray) -> tuple[float, float]:
    c0, _ = np.histogram(a, bins=edges)
    c1, _ = np.histogram(b, bins=edges)
    keep = (c0 >= 100) & (c1 >= 100)
    assert keep.sum() >= 10
    c0, c1 = c0[keep].astype(float), c1[keep].astype(float)
    ratio = np.abs(np.log(c0 / c1))
    z = stats.norm.isf(ALPHA / (2 * keep.sum()))
    return float(np.max(ratio - z * np.sqrt(1 / c0 + 1 / c1))), float(ratio.max())


def test_square_wave_release_law_at_the_ledger_epsilon(tmp_path):
    spec = StreamSpec("4", 4)  # ε = 4 per window of w = 4: ε₀ = 1 per step
    streams = {(f"m{u}", f"s{s}"): np.full(STEPS, float(u % 2))
               for u in range(8) for s in range(2)}
    rel = release_streams(tmp_path, spec, streams)
    amounts = {run[2] for runs in rel.ledger.step_runs.values() for run in runs}
    covered = sum(b - a for runs in rel.ledger.step_runs.values() for a, b, _ in runs)
    assert len(amounts) == 1 and covered == len(streams) * STEPS  # every step charged
    eps0 = float(amounts.pop())
    s = rel.samples
    y0 = s.loc[s["user_id"].isin(["m0", "m2", "m4", "m6"]), "y"].to_numpy()
    y1 = s.loc[s["user_id"].isin(["m1", "m3", "m5", "m7"]), "y"].to_numpy()
    assert ks_pvalue(y0, lambda y: square_wave_cdf(y, 0.0, eps0)) > ALPHA
    assert ks_pvalue(y1, lambda y: square_wave_cdf(y, 1.0, eps0)) > ALPHA
    b = square_wave_constants(eps0)[0]
    lower, observed = _log_ratio_bounds(y0, y1, np.linspace(-b, 1 + b, 25))
    assert lower <= eps0, f"density ratio above e^ε₀: lower bound {lower:.3f} > {eps0}"
    assert observed >= 0.85 * eps0
    assert math.isclose(eps0, 1.0)
