"""The Piecewise Mechanism randomizer against Wang et al. (ICDE 2019), Sec. III-B."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mechanisms.errors import MechanismParameterError
from mechanisms.streams.piecewise import (
    piecewise,
    piecewise_cdf,
    piecewise_estimate,
    piecewise_output_bound,
    piecewise_params,
    piecewise_pdf,
    piecewise_variance,
    piecewise_worst_variance,
)


def _paper_constants(eps: float) -> tuple[float, float]:
    """C and p as printed in the paper (Algorithm 2), from e^{ε/2} directly."""
    h = math.exp(eps / 2)
    return (h + 1) / (h - 1), (math.exp(eps) - h) / (2 * h + 2)


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 4.0])
def test_constants_match_the_paper(eps):
    c, p, _ = piecewise_params(eps)
    c_ref, p_ref = _paper_constants(eps)
    assert c == pytest.approx(c_ref, rel=1e-9) and p == pytest.approx(p_ref, rel=1e-9)
    assert piecewise_output_bound(eps) == pytest.approx(c_ref / 2, rel=1e-9)


@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
def test_density_integrates_to_one_and_its_ratio_is_at_most_e_eps(eps):
    c, _ = _paper_constants(eps)
    y = np.linspace((1 - c) / 2, (1 + c) / 2, 200_001)[1:-1]  # inside the range
    xs = np.linspace(0, 1, 11)
    dens = np.array([piecewise_pdf(y, x, epsilon_per_step=eps) for x in xs])
    mass = np.trapezoid(dens, y, axis=1)
    assert np.allclose(mass, 1.0, atol=1e-3)
    ratio = dens.max(axis=0) / dens.min(axis=0)
    assert ratio.max() == pytest.approx(math.exp(eps), rel=1e-9)  # reached, never exceeded
    assert ratio.max() <= math.exp(eps) * (1 + 1e-12)


@pytest.mark.parametrize("x", [0.0, 0.3, 1.0])
def test_sampler_follows_the_law_and_is_unbiased_with_the_closed_form_variance(x):
    eps = 1.0
    y = piecewise(np.full(200_000, x), epsilon_per_step=eps, rng=np.random.default_rng(7))
    assert stats.kstest(y, lambda v: piecewise_cdf(v, x, epsilon_per_step=eps)).pvalue > 1e-6
    h = math.exp(eps / 2)
    t = 2 * x - 1
    var_ref = (t**2 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2)) / 4  # Lemma 1, on [0, 1]
    assert float(piecewise_variance(x, epsilon_per_step=eps)) == pytest.approx(var_ref)
    assert abs(y.mean() - x) < 6 * math.sqrt(var_ref / y.size)
    assert y.var() == pytest.approx(var_ref, rel=0.02)
    c, _ = _paper_constants(eps)
    assert np.all(np.abs(y - 0.5) <= c / 2)
    assert np.array_equal(piecewise_estimate(y, epsilon_per_step=eps), y)


def test_worst_variance_is_at_the_ends():
    xs = np.linspace(0, 1, 101)
    v = piecewise_variance(xs, epsilon_per_step=0.7)
    assert piecewise_worst_variance(0.7) == pytest.approx(v.max())
    assert v.max() == pytest.approx(v[0]) and v.max() == pytest.approx(v[-1])


def test_same_seed_same_reports():
    x = np.linspace(0, 1, 50)
    a = piecewise(x, epsilon_per_step=0.5, rng=np.random.default_rng(3))
    b = piecewise(x, epsilon_per_step=0.5, rng=np.random.default_rng(3))
    assert np.array_equal(a, b)


@pytest.mark.parametrize(("kw", "match"), [
    ({"epsilon_per_step": 0.0}, "finite and > 0"),
    ({"epsilon_per_step": float("nan")}, "finite and > 0"),
    ({"epsilon_per_step": 800.0}, "overflows"),
])
def test_bad_epsilon_is_refused(kw, match):
    with pytest.raises(MechanismParameterError, match=match):
        piecewise([0.5], rng=np.random.default_rng(0), **kw)


def test_values_outside_the_unit_interval_are_refused_before_any_draw():
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(MechanismParameterError, match=r"\[0, 1\]"):
        piecewise([0.5, 1.5], epsilon_per_step=1.0, rng=rng)
    assert rng.bit_generator.state == state
    with pytest.raises(MechanismParameterError, match="Generator"):
        piecewise([0.5], epsilon_per_step=1.0, rng=None)  # type: ignore[arg-type]
