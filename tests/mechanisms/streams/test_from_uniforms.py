"""The randomizers from given uniforms: the single-stream samplers' values, the registry's rows.

A chunk of streams is randomized in one call from uniforms its streams' own
generators drew (`tasks.stream_draw`); that is the same release only if
``f(x, rng=g)`` and ``f_from_uniforms(x, g.random((k, n)))`` agree value for
value, and if ``k`` is the number of uniforms the sampler really draws per value.
"""

from fractions import Fraction

import numpy as np
import pytest

from mechanisms import registry
from mechanisms.errors import MechanismParameterError
from mechanisms.streams.piecewise import PIECEWISE_UNIFORMS, piecewise, piecewise_from_uniforms
from mechanisms.streams.square_wave import (
    SQUARE_WAVE_UNIFORMS,
    square_wave,
    square_wave_from_uniforms,
    square_wave_params,
)

PAIRS = [(square_wave, square_wave_from_uniforms, SQUARE_WAVE_UNIFORMS),
         (piecewise, piecewise_from_uniforms, PIECEWISE_UNIFORMS)]


@pytest.mark.parametrize("single, batch, rows", PAIRS)
@pytest.mark.parametrize("eps", [0.01, 0.7, 5.0])
def test_from_uniforms_is_the_sampler_value_for_value(single, batch, rows, eps):
    x = np.random.default_rng(1).random(1001)
    y = single(x, epsilon_per_step=eps, rng=np.random.default_rng(7))
    z = batch(x, np.random.default_rng(7).random((rows, x.size)), epsilon_per_step=eps)
    np.testing.assert_array_equal(y.view(np.uint64), z.view(np.uint64))


@pytest.mark.parametrize("single, batch, rows", PAIRS)
def test_the_sampler_draws_exactly_its_declared_uniforms(single, batch, rows):
    """Attack: a declared count below the real one would reuse a stream's uniforms."""
    g = np.random.default_rng(11)
    single(np.full(64, 0.5), epsilon_per_step=1.0, rng=g)
    h = np.random.default_rng(11)
    h.random(rows * 64)
    assert g.random() == h.random()


def test_square_wave_from_uniforms_follows_the_three_branches_of_the_spec():
    """y = u/q − b below qx; (u − qx)/p + x − b inside; (u − qx − 2bp)/q + x + b above."""
    b, p, q = square_wave_params(1.0)
    x = 0.3
    u = np.array([[0.1 * q * x, q * x + 0.5 * 2 * b * p, q * x + 2 * b * p + 0.2 * q]])
    y = square_wave_from_uniforms(np.full(3, x), u, epsilon_per_step=1.0)
    expected = [u[0, 0] / q - b, (u[0, 1] - q * x) / p + x - b,
                (u[0, 2] - q * x - 2 * b * p) / q + x + b]
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("single, batch, rows", PAIRS)
def test_wrong_uniforms_and_values_are_refused(single, batch, rows):
    x = np.full(5, 0.5)
    with pytest.raises(MechanismParameterError, match="shape"):
        batch(x, np.zeros((rows + 1, 5)), epsilon_per_step=1.0)
    with pytest.raises(MechanismParameterError, match="shape"):
        batch(x, np.zeros((rows, 4)), epsilon_per_step=1.0)
    with pytest.raises(MechanismParameterError, match=r"\[0, 1\]"):
        batch(np.array([0.5, 1.2]), np.zeros((rows, 2)), epsilon_per_step=1.0)
    with pytest.raises(MechanismParameterError, match="epsilon"):
        batch(x, np.zeros((rows, 5)), epsilon_per_step=0.0)


@pytest.mark.parametrize("name", registry.names("streams", releasable_only=False))
def test_every_stream_entry_declares_its_uniforms(name):
    entry = registry.stream(name)
    x = np.random.default_rng(2).random(300)
    y = entry.run(x, epsilon_per_step=entry.reservation(Fraction(3), w=2),
                  rng=np.random.default_rng(5))
    z = entry.run_uniforms(x, np.random.default_rng(5).random((entry.uniforms, x.size)),
                           epsilon_per_step=entry.reservation(Fraction(3), w=2))
    np.testing.assert_array_equal(y.view(np.uint64), z.view(np.uint64))
