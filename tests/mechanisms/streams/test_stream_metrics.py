"""Stream metrics: cosine, correlation distance, period accuracy."""

import math

import numpy as np
import pytest

from mechanisms.errors import MechanismParameterError
from mechanisms.metrics import (
    correlation_distance,
    cosine_distance,
    minmax_normalize,
    period_accuracy,
    period_match,
    period_tolerance,
)


def test_cosine_distance_closed_forms():
    assert cosine_distance([1, 0], [0, 1]) == pytest.approx(1.0)
    assert cosine_distance([1, 2, 3], [2, 4, 6]) == pytest.approx(0.0, abs=1e-15)
    assert cosine_distance([1, 1], [-1, -1]) == pytest.approx(2.0)
    assert cosine_distance([1, 0], [1, 1]) == pytest.approx(1 - 1 / math.sqrt(2))
    assert cosine_distance([0, 0], [1, 2]) == 1.0


def test_cosine_is_dominated_by_level_but_correlation_is_not():
    t = np.arange(400)
    x = 0.6 + 0.1 * np.sin(2 * np.pi * t / 40)
    const = np.full_like(x, x.mean())
    # closed form: 1 - mean(x)·sqrt(n)/‖x‖ with ‖x‖² = n(0.36 + 0.005)
    assert cosine_distance(x, const) == pytest.approx(1 - 0.6 / math.sqrt(0.365), rel=1e-9)
    assert correlation_distance(x, const) == 1.0
    assert correlation_distance(x, 3 * x + 7) == pytest.approx(0.0, abs=1e-12)
    assert correlation_distance(x, -x) == pytest.approx(2.0)


def test_minmax_normalize():
    np.testing.assert_allclose(minmax_normalize([2, 4, 3]), [0, 1, 0.5])
    np.testing.assert_allclose(minmax_normalize([5, 5]), [0.5, 0.5])
    assert cosine_distance([0, 1, 0.5], [10, 30, 20], normalize=True) == pytest.approx(0.0)


def test_period_accuracy_exact_and_tolerant():
    assert period_tolerance(40, tau=0.05) == 2
    assert period_tolerance(10, tau=0.05) == 1
    assert period_match(40, 40) and not period_match(41, 40)
    assert period_match(42, 40, tau=0.05) and not period_match(43, 40, tau=0.05)
    assert period_accuracy([40, 41, 40, 80], 40) == 0.5
    assert period_accuracy([40, 41, 40, 80], 40, tau=0.05) == 0.75
    assert period_accuracy([24, 48], [24, 47]) == 0.5


def test_metric_validation():
    with pytest.raises(MechanismParameterError):
        cosine_distance([1, 2], [1, 2, 3])
    with pytest.raises(MechanismParameterError):
        correlation_distance([np.nan, 1], [1, 2])
    with pytest.raises(MechanismParameterError):
        period_accuracy([], 3)
