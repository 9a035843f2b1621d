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


def test_query_function_is_asked_once_per_query_and_draws_are_fixed():
    # The documented draw order: one Lap(1) slot for W and one per query, drawn up
    # front whether or not the SVT halts before a query (so many SVTs vectorise).
    seen = []

    def g(j):
        seen.append(j)
        return 100.0 if j == 3 else -100.0

    rng = np.random.default_rng(2)
    res = svt(g, threshold=0.0, epsilon=1e3, rng=rng, n_queries=10)
    assert res.index == 3 and res.halted and seen == list(range(10))
    after = np.random.default_rng(2)
    after.laplace(0.0, 3e-3, size=11)
    assert rng.random() == after.random()


def svt_scale(eps):
    from mechanisms.cost import laplace_scale

    return laplace_scale(3, eps)


def test_first_crossing_rows_equal_single_svts():
    from mechanisms.curves.svt import first_crossing

    rng = np.random.default_rng(9)
    queries = rng.normal(0, 3, (200, 7))
    lengths = rng.integers(1, 8, 200)
    seeds = rng.integers(0, 2**63, 200)
    scale = svt_scale(1.0)
    noise = np.stack([np.random.default_rng(int(s)).laplace(0.0, scale, 8) for s in seeds])
    index, halted = first_crossing(queries, lengths, noise, threshold=1.0)
    for c in range(200):
        one = svt(queries[c, :lengths[c]], threshold=1.0, epsilon=1.0,
                  rng=np.random.default_rng(int(seeds[c])))
        assert (one.index, one.halted) == (index[c], halted[c])


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
