"""Privacy tests of mechanisms/safe_sampling.py (Mironov's snapping mechanism)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms.errors import MechanismParameterError
from mechanisms.safe_sampling import (
    power_of_two_at_least,
    snap_to_grid,
    snapping_epsilon,
    snapping_ideal_epsilon,
    snapping_laplace,
    uniform_doubles,
)


@pytest.mark.parametrize(("lam", "grid"), [(1.0, 1.0), (0.3, 0.5), (1.5, 2.0), (2.0**-10, 2.0**-10),
                                           (3 * 2.0**-20, 2.0**-18), (1000.0, 1024.0)])
def test_grid_is_the_smallest_power_of_two_at_least_lambda(lam, grid):
    assert power_of_two_at_least(lam) == grid
    assert grid >= lam > grid / 2


def test_outputs_lie_on_the_grid_within_the_bound():
    rng = np.random.default_rng(1)
    x = rng.uniform(-50, 50, 5000)
    rel = snapping_laplace(x, epsilon="1/3", sensitivity=1, bound=40, rng=rng)
    assert rel.grid == 4.0                       # λ = 3 -> Λ = 4
    assert rel.bound == 40.0                     # 40 is already a multiple of 4
    q = rel.values / rel.grid
    assert np.array_equal(q, np.round(q))
    assert np.abs(rel.values).max() <= 40.0
    assert rel.values.max() == 40.0 and rel.values.min() == -40.0   # clamped tails exist


def test_adjusted_epsilon_is_mironovs_bound():
    # Theorem 1 scaled by Δ: ε' = ε (1 + d 2^-49 B/Δ); with ε = 1, Δ = 1, B = 2^20: 1 + 2^-29
    assert snapping_epsilon(1, sensitivity=1, bound=2**20) == Fraction(2**29 + 1, 2**29)
    assert snapping_epsilon("1/2", sensitivity=2, bound=2**10, dimension=4) == \
        Fraction(1, 2) * (1 + Fraction(4 * 2**10, 2 * 2**49))
    rel = snapping_laplace(np.zeros(3), epsilon=1, sensitivity=1, bound=100,
                           rng=np.random.default_rng(0))
    assert rel.bound == 100.0 and rel.epsilon_charged == 1 + Fraction(3 * 100, 2**49)
    assert rel.epsilon_charged > rel.epsilon


def test_distribution_matches_rounded_laplace():
    # λ = 1, Λ = 1: P[out = k] = F(k + 1/2) - F(k - 1/2) for the Laplace(0, 1) cdf F
    rng = np.random.default_rng(2024)
    n = 200_000
    out = snapping_laplace(np.zeros(n), epsilon=1, sensitivity=1, bound=64, rng=rng).values
    ks = np.arange(-6, 7)
    observed = np.array([(out == k).sum() for k in ks] + [(np.abs(out) > 6).sum()])
    cdf = stats.laplace.cdf
    p = np.array([cdf(k + 0.5) - cdf(k - 0.5) for k in ks])
    expected = n * np.append(p, 1 - p.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert abs(out.mean()) < 0.02 and abs(out.var() - (2 + 1 / 12)) < 0.05


def test_neighbouring_inputs_ratio_is_e_to_the_epsilon():
    # x = 0 vs x = 1 (Δ = 1), ε = 1: every cell left of both centres has ratio exactly e.
    # Strict enough to catch a factor-2 noise bug either way (ratios e^2 or e^0.5).
    n = 400_000
    a = snapping_laplace(np.zeros(n), epsilon=1, sensitivity=1, bound=64,
                         rng=np.random.default_rng(11)).values
    b = snapping_laplace(np.ones(n), epsilon=1, sensitivity=1, bound=64,
                         rng=np.random.default_rng(12)).values
    ratios = []
    for k in range(-3, 5):
        pa, pb = (a == k).mean(), (b == k).mean()
        ratio = max(pa / pb, pb / pa)
        assert ratio <= math.e * 1.15, (k, ratio)
        ratios.append(ratio)
    assert max(ratios) >= math.e * 0.87


def test_uniform_doubles_have_random_low_bits():
    rng = np.random.default_rng(5)
    u = uniform_doubles(2**18, rng=rng)
    assert ((u > 0) & (u < 1)).all()
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    # in [2^-8, 2^-7) a double has ulp 2^-60: U* fills those bits, rng.random() cannot
    band = u[(u >= 2.0**-8) & (u < 2.0**-7)]
    assert len(band) > 700
    frac_non_grid = np.mean(band * 2.0**53 != np.round(band * 2.0**53))
    assert frac_non_grid > 0.95
    plain = np.random.default_rng(5).random(2**18)
    pband = plain[(plain >= 2.0**-8) & (plain < 2.0**-7)]
    assert np.all(pband * 2.0**53 == np.round(pband * 2.0**53))   # the weakness U* fixes


def test_snap_to_grid_is_nearest_and_idempotent():
    x = np.random.default_rng(3).normal(0, 10, 10_000)
    y = snap_to_grid(x, grid=0.25, bound=20)
    inside = np.abs(x) <= 20
    assert np.all(np.abs(y[inside] - x[inside]) <= 0.125)
    assert np.array_equal(snap_to_grid(y, grid=0.25, bound=20), y)
    assert np.array_equal(y * 4, np.round(y * 4)) and np.abs(y).max() <= 20


def test_outputs_do_not_depend_on_low_bits_of_the_input():
    # two inputs in the same rounding neighbourhood, same noise: identical snapped outputs,
    # so the low-order bits of x cannot show through (they do in x + λ ln U)
    x0, x1 = np.full(1000, 3.0), np.full(1000, 3.0 + 2.0**-30)
    r0 = snapping_laplace(x0, epsilon=1, sensitivity=1, bound=64, rng=np.random.default_rng(9))
    r1 = snapping_laplace(x1, epsilon=1, sensitivity=1, bound=64, rng=np.random.default_rng(9))
    assert np.mean(r0.values == r1.values) > 0.99
    naive0 = x0 + np.random.default_rng(9).laplace(0, 1, 1000)
    naive1 = x1 + np.random.default_rng(9).laplace(0, 1, 1000)
    assert np.mean(naive0 == naive1) < 0.5


@pytest.mark.parametrize("kwargs", [
    {"epsilon": 0}, {"epsilon": -1}, {"epsilon": "nan"}, {"sensitivity": 0},
    {"bound": 0.5},                    # B <= λ = 1
    {"bound": 2.0**47},                # B >= 2^46 λ
    {"rng": np.random.RandomState(0)},
])
def test_parameters_are_checked_before_any_noise(kwargs):
    args = {"epsilon": 1, "sensitivity": 1, "bound": 10, "rng": np.random.default_rng(0)}
    args.update(kwargs)
    with pytest.raises(MechanismParameterError):
        snapping_laplace(np.zeros(3), **args)


def test_bad_values_and_grids_are_refused():
    with pytest.raises(MechanismParameterError):
        snapping_laplace(np.array([np.nan]), epsilon=1, sensitivity=1, bound=10,
                         rng=np.random.default_rng(0))
    with pytest.raises(MechanismParameterError):
        snap_to_grid(np.zeros(2), grid=0.3, bound=1)
    with pytest.raises(MechanismParameterError):
        snap_to_grid(np.zeros(2), grid=1.0, bound=0.5)
    with pytest.raises(MechanismParameterError):
        power_of_two_at_least(0)


def test_ideal_epsilon_inverts_the_adjustment_exactly():
    # a planner reserves ε/w per step; running at the ideal ε spends exactly that
    budget = Fraction(1, 5)
    ideal = snapping_ideal_epsilon(budget, sensitivity=1, bound=2**7)
    assert ideal == budget / (1 + Fraction(2**7, 2**49))
    assert snapping_epsilon(ideal, sensitivity=1, bound=2**7) == budget
