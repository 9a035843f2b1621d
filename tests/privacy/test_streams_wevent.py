"""w-event budgets: every window of w steps of every baseline costs at most ε.

Checked by brute force over the expanded per-step list (independent of
`mechanisms.cost.max_window_sum`), with exact Fractions.
"""

from fractions import Fraction

import numpy as np
import pytest

from benchmarks.streams.baselines import BASELINES, lbd_release, run_baseline
from benchmarks.streams.baselines import sw_release as release_stream


def _expand(cost, start, n):
    per = [Fraction(0)] * (start + n)
    for run in cost.runs:
        for t in range(run.start, run.stop):
            per[t] += run.epsilon
    return per


def _brute_max_window(per, w):
    return max(sum(per[s : s + w], Fraction(0)) for s in range(0, max(1, len(per) - w + 1)))


def _stream(n, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return np.clip(0.5 + 0.4 * np.sin(2 * np.pi * t / 17) + rng.normal(0, 0.05, n), 0, 1)


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize(("epsilon", "w"), [("1", 1), (0.7, 3), ("5/3", 5), (2.5, 10)])
def test_every_window_within_epsilon(name, epsilon, w):
    n = 300
    start = 17
    res = run_baseline(name, _stream(n, 1), epsilon=epsilon, w=w, rng=np.random.default_rng(2),
                       start_step=start)
    cost = res.release.cost
    eps = Fraction(str(epsilon))
    assert cost.epsilon == eps
    per = _expand(cost, start, n)
    assert all(c == 0 for c in per[:start])
    assert all(c > 0 for c in per[start:])  # every released step is charged
    assert _brute_max_window(per, w) <= eps
    # the float budgets the samplers used never exceed the exact charges
    for t in range(n):
        assert Fraction(float(res.release.epsilon_per_step[t])) <= per[start + t]


@pytest.mark.parametrize("quantum", [Fraction(1, 10**6), None, Fraction(1, 7)])
@pytest.mark.parametrize(("epsilon", "w"), [("1", 1), ("3/7", 4), (5.0, 5), (1.0, 20)])
def test_lbd_windows_brute_force_and_budget_use(epsilon, w, quantum):
    n = 400
    x = np.concatenate([np.full(100, 0.1), np.full(100, 0.9), _stream(200, 4)])
    rel = lbd_release(x, epsilon=epsilon, w=w, rng=np.random.default_rng(3), quantum=quantum)
    eps = Fraction(str(epsilon))
    per = _expand(rel.cost, 0, n)
    eps1 = eps / (2 * w)
    assert _brute_max_window(per, w) <= eps
    assert per[0] == eps1 + eps / 4  # t = 1 always publishes with ε/4
    assert rel.published[0]
    # publication budgets alone stay within ε/2 per window
    pub = [c - eps1 for c in per]
    assert all(c >= 0 for c in pub)
    assert _brute_max_window(pub, w) <= eps / 2
    # steps that did not publish spend exactly the dissimilarity budget
    for t in range(n):
        assert (pub[t] > 0) == bool(rel.published[t])
        if quantum is not None and t > 0:
            assert (pub[t] / quantum).denominator == 1  # whole quanta (rounded down)


def test_lbd_publications_follow_changes():
    # a stream that jumps: LBD must republish after the jump at a generous ε
    x = np.concatenate([np.full(200, 0.05), np.full(200, 0.95)])
    rel = lbd_release(x, epsilon=40, w=4, rng=np.random.default_rng(8))
    assert rel.published[200:230].any()
    assert abs(np.median(rel.y[300:]) - 0.95) < 0.2
    assert abs(np.median(rel.y[:150]) - 0.05) < 0.2


def test_uniform_release_cost_is_one_exact_run():
    rel = release_stream(np.full(10, 0.5), epsilon=0.1, w=3, rng=np.random.default_rng(0),
                         start_step=1000)
    (run,) = rel.cost.runs
    assert (run.start, run.stop, run.epsilon) == (1000, 1010, Fraction(1, 30))
    assert Fraction(float(rel.epsilon_per_step[0])) <= Fraction(1, 30)
    assert rel.cost.max_window_sum() == Fraction(1, 10)
