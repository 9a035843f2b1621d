"""Population view: bias and coverage on synthetic populations with a known truth."""

import numpy as np
import pytest

from mechanisms.errors import MechanismParameterError
from mechanisms.reconstruct import sw_em
from mechanisms.reconstruct.population import (
    grid_quantiles,
    population_distribution,
    population_mean,
)
from mechanisms.streams import square_wave, square_wave_params

E0 = 1.0  # ε = 5 per window of w = 5


def _long(y, first_step=0):
    """Long form of a (users, steps) report array with NaN for missing: (reports, steps)."""
    present = ~np.isnan(y)
    return y[present], np.nonzero(present)[1].astype(np.int64) + first_step


def _population(seed, users=400, steps=24, missing=0.1):
    """Households with heterogeneous levels and a daily shape; some reports missing."""
    rng = np.random.default_rng(seed)
    level = rng.beta(2.0, 5.0, users)[:, None]
    shape = 0.25 * np.sin(2 * np.pi * (np.arange(steps) / 24.0 + rng.uniform(0, 0.1, (users, 1))))
    x = np.clip(level + shape * rng.uniform(0.5, 1.0, (users, 1)), 0.0, 1.0)
    y = square_wave(x, epsilon_per_step=E0, rng=rng)
    gone = rng.random(x.shape) < missing
    y[gone] = np.nan
    return x, y, ~gone


def _true_step_means(x, present):
    return np.nansum(np.where(present, x, 0.0), axis=0) / present.sum(axis=0)


@pytest.mark.slow
def test_step_mean_is_unbiased_and_its_band_covers_the_truth():
    trials = 200
    errors, covered, inside_pointwise, widths = [], [], [], []
    for seed in range(trials):
        x, y, present = _population(seed)
        truth = _true_step_means(x, present)
        rep, st = _long(y)
        res = population_mean(rep, steps=st, epsilon_per_step=E0)
        errors.append(res.mean - truth)
        hit = (res.lower <= truth) & (truth <= res.upper)
        inside_pointwise.append(hit)
        covered.append(hit[5])  # one fixed step across the seeded trials
        widths.append(res.upper - res.lower)
    err = np.array(errors)
    # bias: the average error over 200 x 24 estimates is within 3 of its SEs of 0
    se = err.std() / np.sqrt(err.size)
    assert abs(err.mean()) < 3 * se
    # the nominal 95 % band covers the true mean in >= 90 % of the trials ...
    assert np.mean(covered) >= 0.90
    rate = np.mean(inside_pointwise)
    assert 0.92 <= rate <= 0.98  # ... and is not wider than it needs to be
    # its width matches the error actually made: 2 * 1.96 * sd(error)
    assert np.mean(widths) == pytest.approx(2 * 1.96 * err.std(), rel=0.1)


@pytest.mark.slow
def test_phase_mean_band_covers_the_daily_profile_over_days():
    trials, hits = 150, []
    for seed in range(trials):
        x, y, present = _population(1000 + seed, users=150, steps=96)
        rep, st = _long(y, first_step=48)
        res = population_mean(rep, steps=st, epsilon_per_step=E0, period=24)
        phase = (np.arange(96) + 48) % 24
        truth = np.array([x[:, phase == p][present[:, phase == p]].mean() for p in range(24)])
        assert np.array_equal(res.cells, np.arange(24))
        assert res.reports.sum() == present.sum()
        hits.append((res.lower <= truth) & (truth <= res.upper))
    assert np.mean(np.array(hits)[:, 7]) >= 0.90
    assert 0.92 <= np.mean(hits) <= 0.98


@pytest.mark.slow
def test_simultaneous_band_covers_every_step_at_once():
    hits = []
    for seed in range(120):
        x, y, present = _population(5000 + seed, users=200)
        truth = _true_step_means(x, present)
        rep, st = _long(y)
        res = population_mean(rep, steps=st, epsilon_per_step=E0, confidence=0.9,
                              family_size=24)
        assert res.family_size == 24
        hits.append(bool(np.all((res.lower <= truth) & (truth <= res.upper))))
    assert np.mean(hits) >= 0.85  # nominal >= 90 % (Bonferroni is conservative)


def test_band_shrinks_with_the_number_of_users_and_steps_without_reports_drop_out():
    _, y, _ = _population(3, users=100)
    _, y4, _ = _population(3, users=400)
    rep1, st1 = _long(y)
    rep4, st4 = _long(y4)
    se1 = population_mean(rep1, steps=st1, epsilon_per_step=E0).std_error.mean()
    se4 = population_mean(rep4, steps=st4, epsilon_per_step=E0).std_error.mean()
    assert se4 == pytest.approx(se1 / 2, rel=0.15)
    y[:, 4] = np.nan
    rep, st = _long(y, first_step=100)
    res = population_mean(rep, steps=st, epsilon_per_step=E0)
    assert 104 not in res.cells and res.cells.size == 23
    # cells are independent: the first half of the steps alone gives the same rows
    half = population_mean(rep[st < 112], steps=st[st < 112], epsilon_per_step=E0)
    np.testing.assert_array_equal(half.mean, res.mean[: half.cells.size])


def test_distribution_matches_the_population_quantiles():
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.beta(2, 6, (3000, 3)), rng.beta(6, 2, (3000, 3))], axis=1)
    y = square_wave(x, epsilon_per_step=2.0, rng=rng)
    y[rng.random(y.shape) < 0.2] = np.nan
    rep, st = _long(y)
    res = population_distribution(rep, steps=st, epsilon_per_step=2.0,
                                  quantile_levels=(0.25, 0.5, 0.75))
    truth = np.quantile(x, [0.25, 0.5, 0.75], axis=0).T
    assert np.abs(res.quantiles - truth).max() < 0.06
    assert np.allclose(res.pi.sum(axis=1), 1.0)
    assert np.abs(res.mean - x.mean(axis=0)).max() < 0.03
    # folded by a period of 3 the two halves become 3 phases of 2 steps each
    ph = population_distribution(rep, steps=st, epsilon_per_step=2.0, period=3)
    assert np.array_equal(ph.cells, [0, 1, 2])
    assert ph.reports.sum() == np.sum(~np.isnan(y))


def test_ragged_groups_fit_exactly_what_full_groups_fit():
    rng = np.random.default_rng(2)
    y = square_wave(rng.random((3, 50)), epsilon_per_step=1.0, rng=rng)
    full = sw_em(y, epsilon_per_step=1.0, grid_size=32)
    flat = sw_em(y.ravel(), epsilon_per_step=1.0, grid_size=32,
                 groups=np.repeat(np.arange(3), 50))
    np.testing.assert_allclose(flat.pi, full.pi, rtol=1e-12, atol=1e-15)
    with pytest.raises(MechanismParameterError):
        sw_em(y.ravel(), epsilon_per_step=1.0, groups=np.repeat([0, 2, 3], 50))


def test_grid_quantiles_of_a_uniform_and_a_point_mass():
    pi = np.vstack([np.full(10, 0.1), np.eye(10)[3]])
    q = grid_quantiles(pi, [0.0, 0.5, 1.0])
    np.testing.assert_allclose(q[0], [0.0, 0.5, 1.0])
    np.testing.assert_allclose(q[1], [0.3, 0.35, 0.4])


def test_bad_inputs_are_refused_before_anything_is_computed():
    b = square_wave_params(E0)[0]
    st = np.arange(4)
    with pytest.raises(MechanismParameterError):
        population_mean(np.array([0.1, np.nan, 0.2, 0.3]), steps=st, epsilon_per_step=E0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.full(4, 1 + b + 0.1), steps=st, epsilon_per_step=E0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.zeros((2, 4)), steps=st, epsilon_per_step=E0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.zeros(4), steps=st[:3], epsilon_per_step=E0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.zeros(4), steps=st - 1, epsilon_per_step=E0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.zeros(4), steps=st, epsilon_per_step=E0, confidence=1.0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.zeros(4), steps=st, epsilon_per_step=E0, family_size=0)
    with pytest.raises(MechanismParameterError):
        population_mean(np.zeros(4), steps=st, epsilon_per_step=E0, period=0)
    with pytest.raises(MechanismParameterError):
        population_distribution(np.zeros(4), steps=st, epsilon_per_step=E0,
                                quantile_levels=(1.5,))


def test_mean_stays_unbiased_at_the_edge_of_the_range():
    # households that use (almost) nothing: a clipped estimate would be biased upward
    rng = np.random.default_rng(21)
    x = rng.uniform(0.0, 0.04, (60, 200))
    y = square_wave(x, epsilon_per_step=E0, rng=rng)
    res = population_mean(y.ravel(), steps=np.tile(np.arange(200), 60), epsilon_per_step=E0)
    err = res.mean - x.mean(axis=0)
    assert abs(err.mean()) < 3 * err.std() / np.sqrt(err.size)
    assert res.mean.min() < 0.0  # not clipped: the band is, the estimate is not
    assert res.lower.min() == 0.0


def test_cells_of_sorted_reports_are_np_unique_without_the_sort():
    from mechanisms.reconstruct.population import _cells_of

    rng = np.random.default_rng(3)
    for cell in (np.sort(rng.integers(0, 50, 1000)), rng.integers(0, 50, 1000),
                 np.array([7], np.int64), np.zeros(0, np.int64), np.arange(5) % 2):
        cells, idx = _cells_of(cell)
        want_cells, want_idx = np.unique(cell, return_inverse=True)
        assert cells.dtype == want_cells.dtype and idx.dtype == want_idx.dtype
        assert np.array_equal(cells, want_cells) and np.array_equal(idx, want_idx)
