import math

import numpy as np
import pytest

from mechanisms.curves import eta, eta_closed_form, expected_noise_norm, gaussian, slap
from mechanisms.errors import MechanismParameterError


@pytest.mark.parametrize("m", [1, 2, 4, 16, 100, 800])
@pytest.mark.parametrize("beta", [0.1, 0.05, 0.01])
def test_closed_form_dominates_exact(m, beta):
    for p in (1, 2):
        assert eta_closed_form(beta, m, p) >= eta(beta, m, p)


@pytest.mark.parametrize("m", [2, 9])
def test_eta_is_the_monte_carlo_quantile(m):
    rng = np.random.default_rng(m)
    r1 = np.linalg.norm(slap(m, rng=rng, size=100_000), axis=1)
    r2 = np.linalg.norm(gaussian(m, rng=rng, size=100_000), axis=1)
    assert np.mean(r1 <= eta(0.1, m, 1)) == pytest.approx(0.9, abs=0.005)
    assert np.mean(r2 <= eta(0.1, m, 2)) == pytest.approx(0.9, abs=0.005)


def test_expected_norm_closed_forms():
    assert expected_noise_norm(7, 1) == 7
    # chi mean for m = 1 is sqrt(2/pi), for m = 2 is sqrt(pi/2)
    assert expected_noise_norm(1, 2) == pytest.approx(math.sqrt(2 / math.pi))
    assert expected_noise_norm(2, 2) == pytest.approx(math.sqrt(math.pi / 2))


def test_eta_validation():
    with pytest.raises(MechanismParameterError):
        eta(0.0, 3, 1)
    with pytest.raises(MechanismParameterError):
        eta(0.1, 3, 3)
