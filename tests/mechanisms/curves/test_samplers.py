import numpy as np
import pytest
from scipy import stats

from mechanisms.curves import slap
from mechanisms.errors import MechanismParameterError


@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_slap_moments(m):
    rng = np.random.default_rng(11 + m)
    z = slap(m, rng=rng, size=40_000)
    r = np.linalg.norm(z, axis=1)
    # E‖Z‖ = m, E‖Z‖² = m(m+1); E[Z Zᵀ] = (m+1) I by symmetry
    assert abs(r.mean() - m) < 5 * np.sqrt(m) / np.sqrt(40_000)
    assert abs((r**2).mean() - m * (m + 1)) < 5 * np.sqrt(m * (m + 1) * (4 * m + 6)) / 200
    cov = z.T @ z / z.shape[0]
    assert np.allclose(cov, (m + 1) * np.eye(m), atol=0.1 * (m + 1))
    assert stats.kstest(r, stats.gamma(a=m).cdf).pvalue > 1e-3


def test_slap_1d_is_laplace():
    z = slap(1, rng=np.random.default_rng(3), size=20_000)[:, 0]
    assert stats.kstest(z, stats.laplace().cdf).pvalue > 1e-3


def test_bad_dim():
    with pytest.raises(MechanismParameterError):
        slap(0, rng=np.random.default_rng(0))
