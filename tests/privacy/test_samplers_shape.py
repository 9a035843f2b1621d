"""The samplers' shape, checked directly (moved here from tests/mechanisms).

The release-path tests (test_release_project.py) check the same properties on
released outputs; these check the building blocks with many more draws:
the spherical Laplace direction is uniform (Archimedes: in R³ the projection of
a uniform direction onto an axis is Uniform(−1, 1)), `correlate` gives
(A z)ᵀ G (A z) = ‖z‖² and covariance G⁻¹, and Project-and-Privatize on a
non-orthonormal basis has dist₂(f̃, f_a) ~ Gamma(D, 1/ε). α = 1e-6.
"""

import numpy as np
from laws import ALPHA, gram, ks_pvalue, projection
from scipy import stats

from mechanisms.curves import correlate, gaussian, project_and_privatize, slap

T = np.linspace(10.0, 60.0, 26)
V = np.c_[np.sin(T / 4.0), np.cos(T / 9.0)]


def test_slap_direction_is_uniform_on_sphere():
    z = slap(3, rng=np.random.default_rng(5), size=20_000)
    u = z[:, 2] / np.linalg.norm(z, axis=1)
    assert ks_pvalue(u, stats.uniform(loc=-1, scale=2).cdf) > ALPHA


def test_correlate_gives_gram_norm_and_inverse_gram_covariance():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    g = a @ a.T + 4 * np.eye(4)
    chol = np.linalg.cholesky(g)
    z = rng.standard_normal((4, 3))
    x = correlate(z, chol)
    assert np.allclose(np.einsum("ic,ij,jc->c", x, g, x), np.sum(z * z, axis=0))
    zz = gaussian(4, rng=rng, size=100_000).T
    xx = correlate(zz, chol)
    assert np.allclose(np.cov(xx), np.linalg.inv(g), atol=5e-3)


def test_noise_distance_equals_norm_of_z_for_monomials():
    """Non-orthonormal Gram: (ã − a)ᵀ G (ã − a) = ‖Z‖²/ε², so dist ~ Gamma(D = 4·2, 1/ε)."""
    rng = np.random.default_rng(3)
    exact = projection(T, V, [10.0, 60.0], 3, "monomial")[0][0]
    g = gram("monomial", 10.0, 60.0, 3)
    d = []
    for _ in range(600):
        f = project_and_privatize(T, V, "monomial", degree=3, epsilon=2.0, rng=rng)
        delta = f.coefficients[0] - exact
        d.append(np.sqrt(np.einsum("ic,ij,jc->", delta, g, delta)))
    assert ks_pvalue(d, stats.gamma(a=8, scale=0.5).cdf) > ALPHA
