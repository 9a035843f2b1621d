"""Noise samplers for geo-privacy (spec §1.1, §1.2; paper Lemma 2.2, Thm 3.2/3.3).

* `slap(dim)`: the spherical Laplace distribution SLap(m), density ∝ e^{−‖z‖}:
  radius R ~ Gamma(m, 1), direction a normalised Gaussian (uniform on the
  sphere). Adding SLap(m)/ε to a 1-Lipschitz map into R^m is ε-GP.
* `gaussian(dim)`: N(0, I_m). Adding N(0, I)/√(2ρ) to a 1-Lipschitz map is ρ-CGP.
* `correlate(z, chol)`: Σ^{1/2}Z through the Cholesky factor L of the Gram
  matrix G = L Lᵀ (A = L^{-T}, A Aᵀ = G⁻¹ = Σ), so (A z)ᵀ G (A z) = ‖z‖².
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from mechanisms.errors import MechanismParameterError

__all__ = ["slap", "gaussian", "laplace", "correlate"]


def _dim(dim: object) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or int(dim) < 1:
        raise MechanismParameterError(f"dim must be a positive integer, got {dim!r}")
    return int(dim)


def slap(dim: int, *, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
    """Draw from the spherical Laplace distribution SLap(dim) (density ∝ e^{−‖z‖}).

    Privacy: z/ε added to a 1-Lipschitz (Euclidean) statistic gives ε-GP
    (paper Lemma 2.2). The whole vector is one joint draw: for piecewise
    functions all segments must share one draw (paper Sec. 4.1.1).

    Args:
        dim: dimension m.
        rng: injected generator.
        size: number of independent draws (None for one).

    Returns:
        Array (dim,) or (size, dim); ‖Z‖ ~ Gamma(dim, 1).
    """
    m = _dim(dim)
    shape = () if size is None else (int(size),)
    g = rng.standard_normal(shape + (m,))
    norm = np.linalg.norm(g, axis=-1, keepdims=True)
    norm = np.where(norm > 0, norm, 1.0)
    r = rng.gamma(shape=m, scale=1.0, size=shape + (1,))
    return g / norm * r


def gaussian(dim: int, *, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
    """Draw N(0, I_dim); /√(2ρ) on a 1-Lipschitz statistic gives ρ-CGP (Lemma 2.2)."""
    m = _dim(dim)
    shape = () if size is None else (int(size),)
    return rng.standard_normal(shape + (m,))


def laplace(*, rng: np.random.Generator, scale: float, size: int | None = None) -> np.ndarray:
    """Scalar Laplace noise Lap(scale) (SLap(1) times scale); used by SVT and ReduceSeg."""
    return rng.laplace(0.0, scale, size=size)


def correlate(z: np.ndarray, chol: np.ndarray) -> np.ndarray:
    """Return Σ^{1/2}z via A = L^{-T} for the Gram matrix G = L Lᵀ (spec §1.2).

    Args:
        z: array (m,) or (m, n) (columns are output coordinates, G = I_n ⊗ G₀).
        chol: lower Cholesky factor L of the (m, m) Gram matrix.

    Returns:
        L^{-T} z, with the same shape as z.
    """
    return solve_triangular(chol.T, z, lower=False)
