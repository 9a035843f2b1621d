"""Privacy checks of SVT (spec §1.3) and of the ReduceSeg checks (spec §1.9)."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms.curves import DyadicTree, reduce_seg, svt


def _binomial_ok(successes, trials, p):
    return stats.binomtest(successes, trials, p).pvalue > 1e-3


def test_svt_noise_calibration():
    """P[halt at the single query] = P[ν − W ≥ 𝒯 − g] with ν, W iid Lap(3K/ε).

    The difference of two iid Laplace(b) has tail ¼e^{−y/b}(2 + y/b) (y ≥ 0).
    With 6000 draws, a factor-2 scale error moves the probability from 0.144
    to 0.287 or 0.055: rejected.
    """
    eps, k, gap = 1.5, 2.0, 6.0  # threshold − g = 6, b = 3K/ε = 4
    b = 3 * k / eps
    p = 0.25 * math.exp(-gap / b) * (2 + gap / b)
    rng = np.random.default_rng(21)
    hits = sum(
        svt([0.0, 1e9], threshold=gap, epsilon=eps, rng=rng, sensitivity=k).index == 0
        for _ in range(6000)
    )
    assert _binomial_ok(hits, 6000, p)


def _hist(queries, eps, draws, seed):
    rng = np.random.default_rng(seed)
    idx = [svt(queries, threshold=0.0, epsilon=eps, rng=rng).index for _ in range(draws)]
    return np.bincount(idx, minlength=len(queries)) / draws


def test_svt_neighbouring_histograms_respect_e_eps_d():
    """Queries 1-Lipschitz with shift d: every halting index obeys P ≤ e^{εd}·P' (+ margin).

    x: (c, c, c, big); x': (c−d, c−d, c+d, big−d), i.e. |g(x) − g(x')| ≤ d.
    The margin is 4 standard errors of the difference (Bonferroni over 8 checks).
    """
    eps, d, draws = 1.0, 2.0, 30_000
    c = 2.0
    p = _hist([c, c, c, 50.0], eps, draws, 1)
    q = _hist([c - d, c - d, c + d, 50.0 - d], eps, draws, 2)
    bound = math.exp(eps * d)
    for a, b in ((p, q), (q, p)):
        se = np.sqrt(a * (1 - a) / draws + bound**2 * b * (1 - b) / draws)
        assert np.all(a <= bound * b + 4 * se + 1e-12), (a, b)
    # the loss is substantial (not trivially satisfied): index 2 moves by > e^{εd/2}
    assert q[2] / p[2] > math.exp(eps * d / 2)


def _line_tree():
    t = np.linspace(10.0, 60.0, 64)
    return DyadicTree(t, np.c_[2 * t, 5 - t], 1, 3)


@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_reduce_seg_check_noise_calibration(notion):
    """On a straight line d = 0, so one check merges iff noise + margin ≤ τ.

    GP: noise Lap(2/ε'), CGP: N(0,1)·√2/√(2ρ'); τ and the margin follow spec §1.9.
    """
    tree = _line_tree()
    share, beta, k1 = Fraction(1, 2), 0.05, 1
    big_b = Fraction(1, 5) if notion == "gp" else Fraction(1, 80)
    mn = 4
    h = 2
    if notion == "gp":
        scale = 2 / float(share)
        tau = (h / 2) * (math.e / (math.e - 1)) * mn / (2 * float(big_b))
        slack = scale * math.log(2**k1 / beta)
        p = stats.laplace(scale=scale).cdf(tau - slack)
    else:
        scale = math.sqrt(2) / math.sqrt(2 * float(share))
        tau = (math.sqrt(h * mn) - math.sqrt(h * mn / 2)) / math.sqrt(4 * float(big_b))
        slack = scale * math.sqrt(2 * math.log(2**k1 / beta))
        p = stats.norm(scale=scale).cdf(tau - slack)
    assert 0.15 < p < 0.85
    rng = np.random.default_rng(5)
    merged = 0
    for _ in range(4000):
        out = reduce_seg(tree, node=(0, 0), seg_depth=1, k1=k1, level=1, beta=beta,
                         big_b=big_b, share=share, notion=notion, rng=rng)
        assert out.spent == share / 2 and out.checks == 1
        merged += out.reductions
    assert _binomial_ok(merged, 4000, p)
