"""Server-side smoothing of released streams: known values, edges, option checks."""

import numpy as np
import pytest

from mechanisms.errors import MechanismParameterError
from mechanisms.streams import filter_smooth, moving_average


def test_moving_average_known_values_and_edges():
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    out = moving_average(y, window=3)
    np.testing.assert_allclose(out, [1.5, 2.0, 3.0, 4.0, 5.0, 5.5])
    np.testing.assert_allclose(moving_average(y, window=1), y)
    with pytest.raises(MechanismParameterError):
        moving_average(y, window=0)


def test_filters_preserve_what_they_should():
    t = np.linspace(-1, 1, 101)
    quad = 3 * t**2 - t + 0.2
    np.testing.assert_allclose(filter_smooth(quad, kind="savgol", window=11, order=2), quad,
                               atol=1e-10)
    step = np.r_[np.zeros(50), np.ones(51)]
    np.testing.assert_allclose(filter_smooth(step, kind="median", window=5), step)
    slow = np.sin(2 * np.pi * np.arange(400) / 200)
    out = filter_smooth(slow, kind="butterworth", order=4, cutoff=0.2)
    assert np.max(np.abs(out - slow)[20:-20]) < 0.01
    with pytest.raises(MechanismParameterError):
        filter_smooth(quad, kind="savgol", window=10)
    with pytest.raises(MechanismParameterError):
        filter_smooth(quad, kind="kalman")
