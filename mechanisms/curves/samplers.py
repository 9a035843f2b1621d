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

__all__ = ["NOISES", "correlate", "gaussian", "gaussian_rows", "laplace", "noise_sampler",
           "slap", "slap_rows"]

#: The coefficient samplers each notion offers, its default first: GP adds spherical
#: Laplace noise (floating point, rounded by the release; SECURITY.md); CGP draws the
#: exact discrete Gaussian on a lattice (`mechanisms.discrete_gaussian.cgp_lattice`) or,
#: on request, the continuous Gaussian in floating point.
NOISES = {"gp": ("spherical_laplace",), "cgp": ("discrete_gaussian", "gaussian")}


def noise_sampler(notion: str, noise: str | None) -> str:
    """The sampler a mechanism draws its coefficient noise with: `noise`, or the default.

    Raises:
        MechanismParameterError: `noise` is not one of the notion's samplers (`NOISES`).
    """
    offered = NOISES.get(notion)
    if offered is None:
        raise MechanismParameterError(f"notion must be gp or cgp, got {notion!r}")
    if noise is None:
        return offered[0]
    if noise not in offered:
        raise MechanismParameterError(
            f"noise {noise!r} is not offered under {notion}: choose "
            + " or ".join(repr(x) for x in offered))
    return noise


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
    r = rng.gamma(shape=m, scale=1.0, size=shape + (1,))
    return _on_sphere(g, norm, r)


def _on_sphere(g: np.ndarray, norm: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Z = R·G/‖G‖ (a zero G, probability 0, is left as is)."""
    return g / np.where(norm > 0, norm, 1.0) * r


def slap_rows(dims: np.ndarray, rngs: list[np.random.Generator]) -> np.ndarray:
    """One SLap(dims[c]) vector per generator, concatenated: shape (Σ dims,).

    Privacy as `slap`: vector c is one joint draw from rngs[c] (its normals,
    then its Gamma(dims[c], 1) radius, the calls `slap(dims[c])` makes);
    vectors of different generators never share a draw.
    """
    dims = np.asarray(dims, dtype=np.int64)
    if np.any(dims < 1):
        raise MechanismParameterError("every dimension must be a positive integer")
    normals, radii = [], []
    for d, rng in zip(dims.tolist(), rngs, strict=True):
        normals.append(rng.standard_normal(d))
        radii.append(rng.gamma(d))  # the draw of gamma(shape=d, scale=1.0, size=(1,))
    g = np.concatenate(normals)
    starts = np.cumsum(dims) - dims
    norm = np.sqrt(np.add.reduceat(g * g, starts))
    return _on_sphere(g, np.repeat(norm, dims), np.repeat(np.array(radii), dims))


def gaussian_rows(dims: np.ndarray, rngs: list[np.random.Generator]) -> np.ndarray:
    """One N(0, I_dims[c]) vector per generator, concatenated: shape (Σ dims,)."""
    dims = np.asarray(dims, dtype=np.int64)
    if np.any(dims < 1):
        raise MechanismParameterError("every dimension must be a positive integer")
    return np.concatenate([rng.standard_normal(d) for d, rng in zip(dims.tolist(), rngs,
                                                                    strict=True)])


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
