from fractions import Fraction

import numpy as np
import pytest

from mechanisms.curves import (
    LegendreBasis,
    PiecewiseBasis,
    least_squares,
    project_and_privatize,
)
from mechanisms.errors import MechanismParameterError
from mechanisms.metrics import l2_error

T = np.linspace(10.0, 60.0, 26)
V = np.c_[np.sin(T / 4.0), np.cos(T / 9.0)]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"epsilon": 1, "rho": 1}, {"epsilon": 0}, {"rho": -1}, {"epsilon": "abc"},
     {"epsilon": float("nan")}],
)
def test_exactly_one_valid_budget(kwargs):
    with pytest.raises(MechanismParameterError):
        project_and_privatize(T, V, "legendre", rng=np.random.default_rng(0), **kwargs)


def test_validation_before_data():
    # bad parameters are reported even when the data are bad too (data-independent errors)
    with pytest.raises(MechanismParameterError, match="exactly one"):
        project_and_privatize([3, 2, 1], [0, 0, 0], "legendre", rng=np.random.default_rng(0))
    with pytest.raises(MechanismParameterError, match="Generator"):
        project_and_privatize(T, V, "legendre", epsilon=1, rng=42)


def test_cost_and_shapes():
    f = project_and_privatize(T, V, "legendre", degree=3, epsilon=0.1,
                              rng=np.random.default_rng(1))
    assert f.cost.total == Fraction(1, 10) == f.cost.requested
    assert f.coefficients.shape == (1, 4, 2) and f.dim == 8
    assert f.evaluate(T).shape == (T.size, 2)
    g = project_and_privatize(T, V[:, 0], "fourier", n_terms=5, rho="1/3",
                              rng=np.random.default_rng(1))
    assert g.cost.notion == "cgp" and g.cost.total == Fraction(1, 3)
    assert g.evaluate(T).shape == (T.size, 1)


def test_huge_budget_returns_the_projection():
    fit = least_squares(T, V, "legendre", degree=5)
    f = project_and_privatize(T, V, "legendre", degree=5, epsilon=1e12,
                              rng=np.random.default_rng(2))
    assert np.allclose(f.coefficients, fit.coefficients, atol=1e-9)


def test_piecewise_basis_object_and_breakpoints():
    pb = PiecewiseBasis(LegendreBasis(1), np.array([10.0, 30.0, 60.0]))
    f = project_and_privatize(T, V, pb, epsilon=5, rng=np.random.default_rng(4))
    assert f.coefficients.shape == (2, 2, 2)
    with pytest.raises(MechanismParameterError):
        project_and_privatize(T, V, "legendre", breakpoints=[0.0, 30.0, 60.0], epsilon=1,
                              rng=np.random.default_rng(0))


def test_sinc_output_defined_on_r_and_error_metric():
    f = project_and_privatize(T, V[:, 0], "sinc", n_terms=12, spacing=5.0, first=2, epsilon=1e9,
                              rng=np.random.default_rng(5))
    assert f.evaluate([-100.0, 500.0]).shape == (2, 1)
    fit = least_squares(T, V[:, 0], "sinc", n_terms=12, spacing=5.0, first=2)
    assert l2_error(T, V[:, 0], f) == pytest.approx(l2_error(T, V[:, 0], fit), rel=1e-6)


def test_error_bound_is_data_independent():
    f1 = project_and_privatize(T, V, "legendre", degree=2, epsilon=1, rng=np.random.default_rng(0))
    f2 = project_and_privatize(T, 100 * V, "legendre", degree=2, epsilon=1,
                               rng=np.random.default_rng(1))
    assert f1.error_bound(0.1) == f2.error_bound(0.1) > 0
