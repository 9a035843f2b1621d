"""Square Wave randomizer: constants, distribution, moments, estimator, validation."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from mechanisms.errors import MechanismParameterError
from mechanisms.streams import (
    square_wave,
    square_wave_cdf,
    square_wave_estimate,
    square_wave_estimate_variance,
    square_wave_moments,
    square_wave_params,
    square_wave_pdf,
    square_wave_worst_variance,
)


@pytest.mark.parametrize(
    ("eps", "b", "p", "q"),
    [(0.2, 0.4376, 0.5904, 0.4833), (1.0, 0.2561, 1.1363, 0.4180)],  # spec §2.2 table
)
def test_params_match_spec_table(eps, b, p, q):
    bb, pp, qq = square_wave_params(eps)
    assert bb == pytest.approx(b, abs=1e-4)
    assert pp == pytest.approx(p, abs=1e-4)
    assert qq == pytest.approx(q, abs=1e-4)


@pytest.mark.parametrize("eps", [1e-7, 1e-3, 0.3, 0.4999, 0.5, 1.0, 3.0, 10.0, 50.0])
def test_params_normalise_and_ratio(eps):
    b, p, q = square_wave_params(eps)
    assert 2 * b * p + q == pytest.approx(1.0, rel=1e-12)
    assert p / q == pytest.approx(math.exp(eps), rel=1e-12)
    assert 0 < b <= 0.5


def test_small_epsilon_series_is_continuous_with_closed_form():
    # the two branches (series below 0.5, closed form above) agree at the seam
    e = math.exp(0.5)
    closed = (0.5 * e - e + 1) / (2 * e * (e - 1 - 0.5))
    assert square_wave_params(0.5 - 1e-12)[0] == pytest.approx(closed, rel=1e-9)
    assert square_wave_params(1e-9)[0] == pytest.approx(0.5, abs=1e-8)


@pytest.mark.parametrize("x", [0.0, 0.3, 1.0])
def test_pdf_integrates_to_one_and_cdf_is_its_integral(x):
    eps = 0.8
    b, _, _ = square_wave_params(eps)
    pts = sorted({-b, x - b, x + b, 1 + b})
    total = sum(
        integrate.quad(lambda y: float(square_wave_pdf(y, x, epsilon_per_step=eps)), lo, hi)[0]
        for lo, hi in zip(pts[:-1], pts[1:], strict=True)
    )
    assert total == pytest.approx(1.0, abs=1e-10)
    for y in np.linspace(-b, 1 + b, 9):
        part = sum(
            integrate.quad(lambda u: float(square_wave_pdf(u, x, epsilon_per_step=eps)), lo,
                           min(hi, y))[0]
            for lo, hi in zip(pts[:-1], pts[1:], strict=True) if lo < y
        )
        assert float(square_wave_cdf(y, x, epsilon_per_step=eps)) == pytest.approx(part, abs=1e-9)


@pytest.mark.parametrize("x", [0.0, 0.37, 1.0])
@pytest.mark.parametrize("eps", [0.2, 1.0, 4.0])
def test_sampler_matches_exact_cdf_ks(x, eps):
    rng = np.random.default_rng(11)
    y = square_wave(np.full(50_000, x), epsilon_per_step=eps, rng=rng)
    res = stats.kstest(y, lambda v: square_wave_cdf(v, x, epsilon_per_step=eps))
    assert res.pvalue > 1e-3


def test_sampler_ks_detects_wrong_distribution():
    # power check: samples for x = 0.37 are rejected against the CDF of x = 0.5
    rng = np.random.default_rng(12)
    y = square_wave(np.full(50_000, 0.37), epsilon_per_step=1.0, rng=rng)
    res = stats.kstest(y, lambda v: square_wave_cdf(v, 0.5, epsilon_per_step=1.0))
    assert res.pvalue < 1e-6


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0])
def test_closed_form_moments_match_numeric_integration_and_samples(eps):
    b, _, _ = square_wave_params(eps)
    rng = np.random.default_rng(5)
    for x in (0.0, 0.25, 0.9):
        mean, second = square_wave_moments(x, epsilon_per_step=eps)
        pts = sorted({-b, x - b, x + b, 1 + b})

        def moment(k, x=x, pts=pts, eps=eps):
            return sum(
                integrate.quad(
                    lambda v, k=k, x=x: v**k * float(square_wave_pdf(v, x, epsilon_per_step=eps)),
                    lo, hi)[0]
                for lo, hi in zip(pts[:-1], pts[1:], strict=True)
            )

        assert float(mean) == pytest.approx(moment(1), abs=1e-9)
        assert float(second) == pytest.approx(moment(2), abs=1e-9)
        y = square_wave(np.full(400_000, x), epsilon_per_step=eps, rng=rng)
        var = float(second - mean**2)
        se = math.sqrt(var / y.size)
        assert abs(y.mean() - float(mean)) < 5 * se
        assert abs(np.mean(y**2) - float(second)) < 5 * np.std(y**2) / math.sqrt(y.size)


def test_estimator_unbiased_with_spec_variances():
    # spec §2.2: 33.38 at x in {0,1}, eps 0.2; 1.379 at eps 1; 30.96 / 0.949 at x = 0.5
    assert square_wave_worst_variance(0.2) == pytest.approx(33.38, abs=0.01)
    assert square_wave_worst_variance(1.0) == pytest.approx(1.379, abs=0.001)
    assert float(square_wave_estimate_variance(1.0, epsilon_per_step=0.2)) == pytest.approx(
        33.38, abs=0.01)
    assert float(square_wave_estimate_variance(0.5, epsilon_per_step=0.2)) == pytest.approx(
        30.96, abs=0.01)
    assert float(square_wave_estimate_variance(0.5, epsilon_per_step=1.0)) == pytest.approx(
        0.949, abs=0.001)
    rng = np.random.default_rng(9)
    for x in (0.0, 0.6):
        y = square_wave(np.full(300_000, x), epsilon_per_step=1.0, rng=rng)
        xh = square_wave_estimate(y, epsilon_per_step=1.0)
        var = float(square_wave_estimate_variance(x, epsilon_per_step=1.0))
        assert abs(xh.mean() - x) < 5 * math.sqrt(var / y.size)
        assert xh.var() == pytest.approx(var, rel=0.02)


def test_output_support_and_shape():
    rng = np.random.default_rng(1)
    x = rng.random((7, 11))
    y = square_wave(x, epsilon_per_step=2.0, rng=rng)
    b, _, _ = square_wave_params(2.0)
    assert y.shape == x.shape
    assert y.min() >= -b and y.max() <= 1 + b


@pytest.mark.parametrize("bad", [np.nan, np.inf, -0.01, 1.0001])
def test_bad_values_rejected_before_any_draw(bad):
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    with pytest.raises(MechanismParameterError):
        square_wave(np.array([0.5, bad]), epsilon_per_step=1.0, rng=rng)
    assert rng.bit_generator.state == before


@pytest.mark.parametrize("eps", [0, -1, np.nan, np.inf, "a", True, 1000.0])
def test_bad_epsilon_rejected(eps):
    with pytest.raises(MechanismParameterError):
        square_wave(np.array([0.5]), epsilon_per_step=eps, rng=np.random.default_rng(0))


def test_rng_must_be_a_generator():
    with pytest.raises(MechanismParameterError):
        square_wave(np.array([0.5]), epsilon_per_step=1.0, rng=np.random.RandomState(0))
