"""The streams benchmarks' baselines: parameter validation, exact costs, reconstructions."""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from benchmarks.streams.baselines import (
    laplace_release,
    run_baseline,
    sw_moving_baseline,
    sw_release,
)
from mechanisms.cost import float_at_most
from mechanisms.errors import MechanismParameterError
from mechanisms.streams import square_wave_params


def test_sw_release_uses_exact_eps_over_w():
    x = np.linspace(0, 1, 50)
    rel = sw_release(x, epsilon="1/3", w=7, rng=np.random.default_rng(0), start_step=5)
    assert rel.cost.epsilon == Fraction(1, 3)
    assert rel.cost.runs[0].epsilon == Fraction(1, 21)
    assert (rel.cost.runs[0].start, rel.cost.runs[0].stop) == (5, 55)
    assert rel.y.shape == x.shape
    b, _, _ = square_wave_params(float_at_most(Fraction(1, 21)))
    assert rel.y.min() >= -b and rel.y.max() <= 1 + b
    assert rel.published.all()


def test_same_seed_same_output_and_continuation_indices():
    x = np.random.default_rng(1).random(30)
    a = sw_release(x, epsilon=1, w=2, rng=np.random.default_rng(42))
    b = sw_release(x, epsilon=1, w=2, rng=np.random.default_rng(42))
    np.testing.assert_array_equal(a.y, b.y)
    day2 = sw_release(x, epsilon=1, w=2, rng=np.random.default_rng(1), start_step=30)
    assert day2.cost.runs[0].start == 30 and day2.cost.runs[0].stop == 60


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": 0, "w": 2},
        {"epsilon": -1, "w": 2},
        {"epsilon": float("nan"), "w": 2},
        {"epsilon": 1, "w": 0},
        {"epsilon": 1, "w": 2.5},
        {"epsilon": 1, "w": True},
        {"epsilon": 1, "w": 2, "start_step": -1},
        {"epsilon": "abc", "w": 2},
    ],
)
def test_bad_parameters_rejected_before_data(kwargs):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    # the data is also bad: the parameter error must come first, with no draw
    with pytest.raises(MechanismParameterError) as err:
        sw_release(np.array([np.nan]), rng=rng, **kwargs)
    assert "finite (found" not in str(err.value)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("x", [np.array([]), np.zeros((2, 2)), np.array([0.2, 1.5]),
                               np.array([0.1, np.inf])])
def test_bad_streams_rejected(x):
    with pytest.raises(MechanismParameterError):
        sw_release(x, epsilon=1, w=1, rng=np.random.default_rng(0))


def test_uniform_cost_per_step():
    rng = np.random.default_rng(0)
    cost = sw_release(np.full(10, 0.5), epsilon="2", w=4, rng=rng, start_step=3).cost
    assert cost.per_step(13)[3:] == [Fraction(1, 2)] * 10
    with pytest.raises(MechanismParameterError):
        sw_release(np.full(0, 0.5), epsilon=1, w=4, rng=rng)


def test_laplace_noise_scale_is_w_over_eps():
    rel = laplace_release(np.full(200_000, 0.5), epsilon=2, w=4, rng=np.random.default_rng(3))
    noise = rel.y - 0.5
    # Laplace(scale 2): KS against the exact law
    assert stats.kstest(noise, stats.laplace(scale=2.0).cdf).pvalue > 1e-3
    assert rel.cost.runs[0].epsilon == Fraction(1, 2)


@pytest.mark.parametrize("name", ["laplace", "sw", "sw_moving", "sw_filter", "lbd"])
def test_baselines_improve_with_epsilon(name):
    # generous budgets reconstruct a slow sine much better than tight ones
    t = np.arange(2000)
    x = 0.5 + 0.4 * np.sin(2 * np.pi * t / 200)
    errs = []
    for eps in (0.5, 50.0):
        rec = run_baseline(name, x, epsilon=eps, w=5, rng=np.random.default_rng(6)).reconstruction
        errs.append(abs(1 - np.corrcoef(rec, x)[0, 1]))
    assert errs[1] < errs[0]
    assert errs[1] < 0.1


def test_baseline_options_validated_before_release():
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(MechanismParameterError):
        sw_moving_baseline(np.full(10, 0.5), epsilon=1, w=1, rng=rng, window=0)
    assert rng.bit_generator.state == state
    with pytest.raises(MechanismParameterError):
        run_baseline("nope", np.full(10, 0.5), epsilon=1, w=1, rng=rng)
