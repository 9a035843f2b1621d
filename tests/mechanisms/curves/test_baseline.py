from fractions import Fraction

import numpy as np
import pytest

from mechanisms.curves import baseline_points, moving_average
from mechanisms.errors import MechanismParameterError


def test_moving_average_truncated_ends():
    y = np.arange(5.0)[:, None]
    assert np.allclose(moving_average(y, 3)[:, 0], [0.5, 1, 2, 3, 3.5])
    assert np.allclose(moving_average(y, 1), y)


def test_interpolates_points_with_huge_budget():
    t = np.linspace(10, 60, 101)
    v = np.c_[np.sin(t), t]
    f = baseline_points(t, v, 11, epsilon=1e12, rng=np.random.default_rng(0))
    times = np.linspace(10, 60, 11)
    assert np.allclose(f.evaluate(times), np.c_[np.interp(times, t, v[:, 0]), times], atol=1e-6)
    assert f.cost.total == Fraction(10**12)


def test_validation():
    t = np.linspace(0, 1, 10)
    with pytest.raises(MechanismParameterError):
        baseline_points(t, t, 1, epsilon=1, rng=np.random.default_rng(0))
    with pytest.raises(MechanismParameterError):
        baseline_points(t, t, 5, epsilon=1, smooth=0, rng=np.random.default_rng(0))
