"""SVT halting laws: AboveThreshold directly, and the unbounded-domain SVT of Sec. 4.3.

`laws.svt_index_law` integrates the exact law of the halting index over the
threshold noise W ~ Lap(3K/ε) with query noise ν ~ Lap(3K/ε) (ε₁ = ε/3,
ε₂ = 2ε/3; spec §1.3). χ² goodness of fit at α = 1e-6.

* AboveThreshold on 20 equal queries, 20 000 runs: the index law depends on
  W's scale through the whole tail (threshold noise at 2K/ε instead of 3K/ε:
  expected χ² ≈ 600, computed from the exact laws).
* The unbounded-domain SVT (privfuncseg_unbounded, not a release mechanism, so
  run directly with its returned cost): queries g_T = ‖q·1_[−T,T]‖ − ‖q‖,
  T = 2^(i+1), K = 2, threshold −1/ε (CGP −1/√(2ρ)), ε_svt = the returned
  ``svt_domain`` amount (CGP √(2ρ_svt)); 800 runs. K = 1 instead of 2: expected
  χ² ≈ 160-200.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from laws import ALPHA, chi2_gof_pvalue, l2_norm, svt_index_law

from mechanisms.curves import privfuncseg_unbounded, svt


def test_above_threshold_index_law():
    eps, k, threshold, runs = 1.5, 2.0, 3.0 * 4.0 / 3.0, 20_000
    queries = np.zeros(20)
    rng = np.random.default_rng(31)
    idx = [svt(queries, threshold=threshold, epsilon=eps, sensitivity=k, rng=rng).index
           for _ in range(runs)]
    b = 3 * k / eps
    probs = svt_index_law(queries, threshold, threshold_scale=b, query_scale=b)
    assert chi2_gof_pvalue(np.bincount(idx, minlength=queries.size), probs) > ALPHA


def _curve():
    t = np.linspace(-600.0, 600.0, 601)
    return t, np.c_[40.0 / (1.0 + np.abs(t) / 20.0), 20.0 * np.exp(-np.abs(t - 10.0) / 60.0)]


@pytest.mark.parametrize("notion,amount", [("gp", 1.0), ("cgp", 0.5)])
def test_unbounded_domain_svt_law(notion, amount):
    t, v = _curve()
    total = l2_norm(t, v, -np.inf, np.inf)
    max_power = 40
    queries = np.array([l2_norm(t, v, -(2.0 ** (i + 1)), 2.0 ** (i + 1)) - total
                        for i in range(max_power)])
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
    rng = np.random.default_rng(17)
    counts = np.zeros(max_power, dtype=int)
    svt_amounts = set()
    for _ in range(800):
        f = privfuncseg_unbounded(t, v, rng=rng, max_power=max_power, **kw)
        counts[int(round(math.log2(f.diagnostics["t_bar"]))) - 1] += 1
        svt_amounts |= {float(i.amount) for i in f.cost.items if i.step == "svt_domain"}
        assert f.breakpoints[0] == -f.diagnostics["t_bar"]  # the released domain shows T̄
    (eps_svt,) = svt_amounts
    if notion == "gp":
        threshold, eps_run = -1.0 / amount, eps_svt
    else:
        threshold, eps_run = -1.0 / math.sqrt(2 * amount), math.sqrt(2 * eps_svt)
    b = 3 * 2 / eps_run
    probs = svt_index_law(queries, threshold, threshold_scale=b, query_scale=b)
    assert max(probs) < 0.5
    assert chi2_gof_pvalue(counts, probs) > ALPHA, (counts[:16], np.round(probs[:16] * 800))
