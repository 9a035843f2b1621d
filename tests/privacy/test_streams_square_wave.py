"""Statistical privacy checks of the per-step stream randomizers (inputs 0 and 1).

For the two most distant inputs of [0, 1] the output densities must stay within
a factor e^ε0 everywhere. We histogram 2·10^6 draws for each input and require,
in every bin, that a Bonferroni-corrected lower confidence bound on
|log(count_0 / count_1)| is at most ε0. At the bins where the true ratio is
exactly e^ε0 this bound sits just under ε0, so a sampler spending 2ε0 (true log
ratio 2ε0) fails by a wide margin.
"""

import numpy as np
import pytest
from scipy import stats

from benchmarks.streams.baselines import laplace_release
from mechanisms.streams import square_wave, square_wave_params

N = 2_000_000
ALPHA = 1e-3


def _max_lower_bound(a, b, edges):
    c0, _ = np.histogram(a, bins=edges)
    c1, _ = np.histogram(b, bins=edges)
    keep = (c0 >= 100) & (c1 >= 100)
    assert keep.sum() >= 10, "too few populated bins for a meaningful test"
    c0, c1 = c0[keep].astype(float), c1[keep].astype(float)
    log_ratio = np.abs(np.log(c0 / c1))
    se = np.sqrt(1.0 / c0 + 1.0 / c1)
    z = stats.norm.isf(ALPHA / (2 * keep.sum()))
    lower = log_ratio - z * se
    return float(lower.max()), float(log_ratio.max())


@pytest.mark.slow
@pytest.mark.parametrize("eps0", [0.5, 1.0, 2.0])
def test_square_wave_density_ratio_within_e_eps(eps0):
    rng = np.random.default_rng(20261130)
    b, _, _ = square_wave_params(eps0)
    y0 = square_wave(np.zeros(N), epsilon_per_step=eps0, rng=rng)
    y1 = square_wave(np.ones(N), epsilon_per_step=eps0, rng=rng)
    edges = np.linspace(-b, 1 + b, 41)
    lower, observed = _max_lower_bound(y0, y1, edges)
    assert lower <= eps0, f"density ratio exceeds e^eps: lower bound {lower} > {eps0}"
    # the bound is tight: the observed worst log ratio is close to eps0 (the
    # mechanism does not waste budget, and the test has power near eps0)
    assert observed > 0.9 * eps0


@pytest.mark.slow
def test_laplace_step_density_ratio_within_e_eps():
    eps, w = 3.0, 3  # eps0 = 1
    rng = np.random.default_rng(7)
    y0 = laplace_release(np.zeros(N), epsilon=eps, w=w, rng=rng).y
    y1 = laplace_release(np.ones(N), epsilon=eps, w=w, rng=rng).y
    edges = np.linspace(-4, 5, 61)
    lower, observed = _max_lower_bound(y0, y1, edges)
    assert lower <= 1.0
    assert observed > 0.9
