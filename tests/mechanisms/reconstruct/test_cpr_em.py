"""SW-aware EM, pseudo-samples and KDE mode, checked against brute force and truth."""

import numpy as np
import pytest
from scipy import stats

from mechanisms import registry
from mechanisms.cost import epsilon_per_step, exact
from mechanisms.errors import MechanismParameterError
from mechanisms.reconstruct import em_grid, kde_mode, pseudo_samples, silverman_bandwidth, sw_em
from mechanisms.streams import square_wave, square_wave_params, square_wave_pdf


def _sw_reports(x, *, epsilon, w, rng):
    """Square Wave reports at exactly ε/w per step, as a stream release randomizes them."""
    entry = registry.stream("square_wave")
    return entry.run(x, epsilon_per_step=epsilon_per_step(exact(epsilon), w), rng=rng)


def _brute_posterior(y, pi, grid, eps):
    """r_jb by explicit (m, B) likelihood tensor (independent of the fast path)."""
    lik = square_wave_pdf(y[:, None], grid[None, :], epsilon_per_step=eps)
    r = pi[None, :] * lik
    return r / r.sum(axis=1, keepdims=True)


@pytest.mark.slow
def test_em_recovers_two_point_distribution():
    rng = np.random.default_rng(0)
    grid = em_grid(100)
    x = np.where(rng.random(100_000) < 0.3, grid[20], grid[80])
    y = square_wave(x, epsilon_per_step=2.0, rng=rng)
    fit = sw_em(y, epsilon_per_step=2.0, max_iter=3000, loglik_tol=1e-6, tol=1e-9)
    pi = fit.pi[0]
    assert pi[10:31].sum() == pytest.approx(0.3, abs=0.03)
    assert pi[70:91].sum() == pytest.approx(0.7, abs=0.03)
    assert float(pi @ grid) == pytest.approx(0.3 * grid[20] + 0.7 * grid[80], abs=0.01)


def test_em_recovers_continuous_distribution_cdf():
    rng = np.random.default_rng(1)
    x = rng.beta(2.0, 5.0, 60_000)
    y = square_wave(x, epsilon_per_step=1.0, rng=rng)
    fit = sw_em(y, epsilon_per_step=1.0, smoothing=True)
    grid = fit.grid
    cdf = np.cumsum(fit.pi[0])
    truth = stats.beta(2.0, 5.0).cdf(grid + 0.5 / grid.size)
    assert np.max(np.abs(cdf - truth)) < 0.06
    assert float(fit.pi[0] @ grid) == pytest.approx(2 / 7, abs=0.02)


def test_batched_em_equals_separate_runs_and_increases_loglik():
    rng = np.random.default_rng(2)
    x = rng.random((6, 40))
    y = square_wave(x, epsilon_per_step=0.8, rng=rng)
    batched = sw_em(y, epsilon_per_step=0.8, grid_size=50)
    for g in range(6):
        alone = sw_em(y[g], epsilon_per_step=0.8, grid_size=50)
        np.testing.assert_allclose(batched.pi[g], alone.pi[0], rtol=1e-10, atol=1e-14)
        assert batched.iterations[g] == alone.iterations[0]
    lls = [sw_em(y, epsilon_per_step=0.8, grid_size=50, max_iter=k).loglik for k in (1, 2, 5, 20)]
    assert np.all(np.diff(np.array(lls), axis=0) >= -1e-9)


def test_fast_e_step_matches_brute_force_posterior():
    rng = np.random.default_rng(3)
    eps = 0.7
    y = square_wave(rng.random(300), epsilon_per_step=eps, rng=rng)
    fit = sw_em(y, epsilon_per_step=eps, grid_size=64, max_iter=7)
    r = _brute_posterior(y, fit.pi[0], fit.grid, eps)
    z = pseudo_samples(y, fit, epsilon_per_step=eps)[0]
    np.testing.assert_allclose(z, r @ fit.grid, rtol=1e-10)
    zmap = pseudo_samples(y, fit, epsilon_per_step=eps, kind="map")[0]
    np.testing.assert_allclose(zmap, fit.grid[np.argmax(r, axis=1)])
    # one EM step by brute force: π' = mean_j r_j
    one = sw_em(y, epsilon_per_step=eps, grid_size=64, max_iter=1).pi[0]
    r0 = _brute_posterior(y, np.full(64, 1 / 64), fit.grid, eps)
    np.testing.assert_allclose(one, r0.mean(axis=0), rtol=1e-10)


def test_sampled_pseudo_samples_follow_pi():
    rng = np.random.default_rng(4)
    y = square_wave(np.full((2, 20_000), 0.3), epsilon_per_step=3.0, rng=rng)
    fit = sw_em(y, epsilon_per_step=3.0)
    z = pseudo_samples(y, fit, epsilon_per_step=3.0, kind="sample", rng=rng)
    assert z.shape == y.shape
    for g in range(2):
        counts = np.array([(z[g] == v).sum() for v in fit.grid])
        assert np.max(np.abs(counts / z.shape[1] - fit.pi[g])) < 0.02
    with pytest.raises(MechanismParameterError):
        pseudo_samples(y, fit, epsilon_per_step=3.0, kind="sample")


def test_kde_mode_matches_brute_force_and_truth():
    rng = np.random.default_rng(5)
    z = np.clip(rng.normal(0.3, 0.05, (3, 400)), 0, 1)
    z[1] = np.round(z[1], 2)  # many repeated values exercise the distinct-value path
    h = silverman_bandwidth(z)
    xs = np.linspace(0, 1, 512)
    for g in range(3):
        dens = np.exp(-0.5 * ((xs[:, None] - z[g][None, :]) / h[g]) ** 2).sum(axis=1)
        assert kde_mode(z, grid_points=512)[g] == xs[np.argmax(dens)]
    assert np.all(np.abs(kde_mode(z) - 0.3) < 0.03)


def test_silverman_closed_form():
    z = np.array([[0.0, 0.25, 0.5, 0.75, 1.0]])
    sd = np.std(z[0], ddof=1)
    iqr = (0.75 - 0.25) / 1.349
    assert silverman_bandwidth(z)[0] == pytest.approx(0.9 * min(sd, iqr) * 5 ** -0.2)
    assert silverman_bandwidth(np.full((1, 5), 0.4))[0] == 1e-3


def test_em_rejects_reports_of_another_epsilon():
    b, _, _ = square_wave_params(5.0)
    with pytest.raises(MechanismParameterError):
        sw_em(np.array([-b - 0.2, 0.5]), epsilon_per_step=5.0)
    with pytest.raises(MechanismParameterError):
        em_grid(1)


def test_reports_snapped_just_beyond_the_support_are_accepted_and_others_refused():
    from mechanisms.reconstruct import cpr
    from mechanisms.reconstruct.population import population_mean

    b = square_wave_params(1.0)[0]
    y = _sw_reports(np.tile([0.2, 0.9], 100), epsilon=5, w=5, rng=np.random.default_rng(0))
    edge = y.copy()
    edge[3] = 1 + b + 2.0**-25  # half a 2^-24 release grid step above the support
    assert cpr(edge, epsilon_per_step=1.0).reconstruction.size == y.size
    sw_em(edge, epsilon_per_step=1.0)
    population_mean(edge, steps=np.arange(y.size), epsilon_per_step=1.0)
    edge[3] = 1 + b + 1e-3
    for call in (lambda: cpr(edge, epsilon_per_step=1.0),
                 lambda: sw_em(edge, epsilon_per_step=1.0),
                 lambda: population_mean(edge, steps=np.arange(y.size), epsilon_per_step=1.0)):
        with pytest.raises(MechanismParameterError):
            call()
