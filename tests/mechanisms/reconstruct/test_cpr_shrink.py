"""Shrinkage and risk-chosen smoothing of Square Wave reports (CPR fallback)."""

import numpy as np
import pytest
from scipy import signal

from mechanisms.errors import MechanismParameterError
from mechanisms.reconstruct.shrink import (
    savgol_trace,
    shrink_periodic,
    sure_smooth,
    sw_noise_variance,
)
from mechanisms.streams import square_wave, square_wave_estimate, square_wave_estimate_variance


def test_noise_variance_estimate_is_unbiased_for_the_mean_sw_variance():
    rng = np.random.default_rng(0)
    x = rng.random(200_000)
    y = square_wave(x, epsilon_per_step=0.5, rng=rng)
    truth = float(np.mean(square_wave_estimate_variance(x, epsilon_per_step=0.5)))
    est = sw_noise_variance(y, epsilon_per_step=0.5)
    assert est == pytest.approx(truth, rel=0.01)
    # the empirical variance of the debiased reports around the truth agrees
    emp = float(np.mean((square_wave_estimate(y, epsilon_per_step=0.5) - x) ** 2))
    assert emp == pytest.approx(truth, rel=0.02)


@pytest.mark.parametrize(("n", "window"), [(60, 11), (40, 21), (25, 5)])
def test_savgol_trace_matches_the_smoothing_matrix(n, window):
    mat = signal.savgol_filter(np.eye(n), window, 2, mode="interp", axis=0)
    assert savgol_trace(n, window, 2) == pytest.approx(float(np.trace(mat)), rel=1e-10)
    with pytest.raises(MechanismParameterError):
        savgol_trace(n, window + 1, 2)


def test_sure_smooth_returns_the_constant_on_pure_noise():
    rng = np.random.default_rng(1)
    x = np.full(3000, 0.4)
    y = square_wave(x, epsilon_per_step=1.0, rng=rng)
    xh = square_wave_estimate(y, epsilon_per_step=1.0)
    rec, info = sure_smooth(xh, sw_noise_variance(y, epsilon_per_step=1.0), level=0.4)
    assert info["window"] is None and info["lambda"] == 0.0
    np.testing.assert_array_equal(rec, np.full(3000, 0.4))


def test_sure_smooth_recovers_a_slow_signal_and_beats_the_constant():
    rng = np.random.default_rng(2)
    t = np.arange(3000)
    x = 0.5 + 0.35 * np.sin(2 * np.pi * t / 1700.0) * np.exp(-t / 4000.0)
    y = square_wave(x, epsilon_per_step=1.0, rng=rng)
    xh = square_wave_estimate(y, epsilon_per_step=1.0)
    rec, info = sure_smooth(xh, sw_noise_variance(y, epsilon_per_step=1.0))
    assert info["window"] is not None and 0.0 < info["lambda"] <= 1.0
    const = np.full(x.size, np.clip(xh.mean(), 0, 1))
    assert np.mean((rec - x) ** 2) < 0.5 * np.mean((const - x) ** 2)


def test_shrink_periodic_keeps_a_real_template_and_kills_a_noise_template():
    rng = np.random.default_rng(3)
    cycle = np.array([0.1, 0.3, 0.9, 0.7, 0.4, 0.2, 0.6, 0.5])
    x = np.tile(cycle, 300)
    y = square_wave(x, epsilon_per_step=1.0, rng=rng)
    xh = square_wave_estimate(y, epsilon_per_step=1.0)
    tiled = np.tile(xh.reshape(-1, 8).mean(axis=0), 300)
    _, info = shrink_periodic(xh, tiled, 8, level=0.46)
    assert info["lambda"] > 0.9
    # reports of a constant: whatever template is tiled, λ must be ~0
    y0 = square_wave(np.full(2400, 0.46), epsilon_per_step=1.0, rng=rng)
    xh0 = square_wave_estimate(y0, epsilon_per_step=1.0)
    rec0, info0 = shrink_periodic(xh0, np.tile(cycle, 300), 8, level=0.46)
    assert info0["lambda"] < 0.05
    assert np.max(np.abs(rec0 - 0.46)) < 0.05


@pytest.mark.parametrize("window", [5, 11, 41, 321])
def test_savgol_smooth_is_scipys_interp_mode(window):
    from scipy import signal

    from mechanisms.reconstruct.shrink import savgol_smooth

    x = np.random.default_rng(window).normal(size=500)
    np.testing.assert_allclose(savgol_smooth(x, window, 2),
                               signal.savgol_filter(x, window, 2, mode="interp"), atol=1e-12)
    with pytest.raises(MechanismParameterError):
        savgol_smooth(x[:4], window, 2)
