from fractions import Fraction

import numpy as np
import pytest

from mechanisms.curves import privfuncselect
from mechanisms.errors import MechanismParameterError


def test_selects_the_terms_of_a_low_degree_curve():
    # q = 5·P̃_0 + 3·P̃_2 in the orthonormal Legendre basis of [10, 60]: exactly 2 terms
    t = np.linspace(10, 60, 4001)
    s = 2 * (t - 10) / 50 - 1
    v = 5 / np.sqrt(50) + 3 * np.sqrt(5 / 50) * (3 * s**2 - 1) / 2
    f = privfuncselect(t, v, epsilon=1e5, rng=np.random.default_rng(0), max_terms=10)
    assert f.diagnostics["selected_terms"] == [0, 2]
    assert f.dim == 2
    assert np.allclose(f.coefficients[0, [0, 2], 0], [5, 3], atol=1e-3)


def test_costs_and_validation():
    t = np.linspace(0, 100, 501)
    v = np.exp(-((t - 40) ** 2) / 50)
    f = privfuncselect(t, v, rho="1/7", rng=np.random.default_rng(1))
    assert f.cost.total == Fraction(1, 7) and len(f.cost.items) == 4
    assert all(i.amount == Fraction(1, 28) for i in f.cost.items)
    assert f.coefficients.shape == (1, 33, 1)
    with pytest.raises(MechanismParameterError):
        privfuncselect(t, v, epsilon=1, max_terms=0, rng=np.random.default_rng(1))
