import numpy as np
import pytest

from mechanisms.curves import svt
from mechanisms.errors import MechanismParameterError


def test_validation_before_use():
    rng = np.random.default_rng(0)
    with pytest.raises(MechanismParameterError):
        svt([0.0], threshold=0.0, epsilon=0.0, rng=rng)
    with pytest.raises(MechanismParameterError):
        svt([0.0], threshold=0.0, epsilon=1.0, rng=rng, sensitivity=-1)
    with pytest.raises(MechanismParameterError):
        svt(lambda j: 0.0, threshold=0.0, epsilon=1.0, rng=rng)
    with pytest.raises(MechanismParameterError):
        svt([0.0], threshold=0.0, epsilon=1.0, rng=None)


def test_large_epsilon_halts_at_first_crossing():
    res = svt([-5.0, -1.0, 2.0, 10.0], threshold=0.0, epsilon=1e6, rng=np.random.default_rng(1))
    assert res.index == 2 and res.halted


def test_exhausted_returns_last_index():
    res = svt([-50.0, -60.0], threshold=0.0, epsilon=1e6, rng=np.random.default_rng(1))
    assert res.index == 1 and not res.halted


def test_lazy_queries_are_evaluated_only_until_halt():
    seen = []

    def g(j):
        seen.append(j)
        return 100.0 if j == 3 else -100.0

    res = svt(g, threshold=0.0, epsilon=1e3, rng=np.random.default_rng(2), n_queries=10)
    assert res.index == 3 and seen == [0, 1, 2, 3]


def test_lemma_2_4_utility():
    # g_t ≥ T + 6K ln(2/β)/ε ⇒ w.p. ≥ 1−β: k̄ ≤ t and g_k̄ ≥ T − (3K/ε)(ln(2t/β) + ln(2/β))
    eps, beta, t = 1.0, 0.1, 5
    g = np.linspace(-40, 0, t)
    g[-1] = 6 * np.log(2 / beta) / eps
    low = -(3 / eps) * (np.log(2 * t / beta) + np.log(2 / beta))
    rng = np.random.default_rng(3)
    ok = 0
    for _ in range(2000):
        r = svt(g, threshold=0.0, epsilon=eps, rng=rng)
        ok += r.index <= t - 1 and g[r.index] >= low
    assert ok / 2000 >= 1 - beta
