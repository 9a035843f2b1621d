"""The scalar Fraction-based sampler replaced in this commit (from 8bbd391), kept for timing only.

benchmarks/sampling/bench_exact.py times it side by side with the vectorised sampler of
`mechanisms/discrete_gaussian.py`; no release uses it. Its original docstring follows.

Exact discrete Gaussian noise (Canonne, Kamath and Steinke 2020), for the CGP path.

Continuous Gaussian noise computed in floating point can leak through the
bit pattern of its output (SECURITY.md, "Floating-point attacks"). This module
samples exactly, in integer and rational arithmetic, from the discrete Gaussian

    N_Z(c, σ²):  P[y] ∝ exp(−(y − c)²/(2σ²)),  y ∈ Z,

for any rational centre c (a float is read as its exact binary value) and
rational σ², by the rejection samplers of CKS20 (Algorithms 1-3): Bernoulli(e^−γ)
from Bernoulli(γ/k) draws, a discrete Laplace proposal of integer scale
t = ⌊σ⌋ + 1, and an acceptance probability exp(−x) with x rational. The
centre's fractional part f is handled in the acceptance exponent:
x = (y − f)²/(2σ²) − |y|/t + |f|/t + σ²/(2t²) ≥ (|y − f| − σ²/t)²/(2σ²) ≥ 0,
so the accepted y has exactly P[y] ∝ exp(−(y − f)²/(2σ²)) (CKS20's Algorithm 3
is the case f = 0).

Privacy (`cgp_lattice`): releasing γ·Y_j, Y_j ~ N_Z(w_j/γ, σ_Z²) independently,
for a vector w with ‖w − w'‖₂ ≤ d is ρ-zCDP-per-d² (ρ-CGP), with

    ρ = (1 + K·σ_Z²) / (2 γ² σ_Z²),   K = sup_c |d²/dc² log Σ_y e^{−(y−c)²/(2σ_Z²)}|.

Proof sketch: completing the square, D_α(N_Z(c) ‖ N_Z(c')) = α(c − c')²/(2σ²)
+ [F(αc + (1−α)c') − αF(c) − (1−α)F(c')]/(α − 1) with F = log Z; the bracket
is the error of linear extrapolation of F, at most K·α(α−1)(c − c')²/2. By
Poisson summation Z(c) = √(2π)σ(1 + 2Σ_k e^{−2π²σ²k²} cos 2πkc), so for σ_Z ≥ 2
K·σ_Z² ≤ 100·σ_Z²·e^{−2π²σ_Z²} < 2^-100; privpipe charges the factor
κ = 1 + 2^-60 on top (`LATTICE_EXCESS`). The output lies on the lattice γZ^D
whatever the input, so no low-order bit depends on the data.

The sampler's running time depends on the draws (rejection loops); SECURITY.md
says what that does and does not expose. numpy + standard library only; the
random bits come from the injected generator (the release's keyed ChaCha20).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mechanisms.errors import MechanismParameterError
from mechanisms.safe_sampling import power_of_two_at_least

__all__ = ["LATTICE_EXCESS", "LATTICE_STEPS_PER_SIGMA", "bernoulli_exp", "cgp_lattice",
           "discrete_gaussian", "discrete_laplace", "log_partition_curvature_bound"]

#: κ: the charged ρ covers (1 + K σ_Z²)/(2γ²σ_Z²) with K σ_Z² < 2^-100 for σ_Z ≥ 2.
LATTICE_EXCESS = 1 + Fraction(1, 2**60)
#: γ = 2^-20 · (smallest power of two >= σ): the release task's snapping grid for the
#: same ρ, so snapping leaves the lattice points unchanged; σ_Z = σ/γ lies in (2^19, 2^20].
LATTICE_STEPS_PER_SIGMA = 2**20


def log_partition_curvature_bound(sigma2: float) -> float:
    """An upper bound on K = sup_c |(log Z)''(c)|, Z(c) = Σ_y exp(−(y − c)²/(2σ²)).

    Poisson summation: Z = √(2π)σ(1 + g), g(c) = 2Σ_k q^{k²} cos 2πkc with
    q = e^{−2π²σ²}; |(log Z)''| ≤ G₂/(1 − G₀) + (G₁/(1 − G₀))² with
    G_j = 2Σ_k (2πk)^j q^{k²} ≤ 2Σ_k (2πk)^j q^k (closed forms below). Valid
    while G₀ < 1 (σ² > about 0.06). Used by the tests of the Rényi bound.
    """
    q = math.exp(-2.0 * math.pi**2 * sigma2)
    g0 = 2 * q / (1 - q)
    g1 = 2 * 2 * math.pi * q / (1 - q) ** 2
    g2 = 2 * (2 * math.pi) ** 2 * q * (1 + q) / (1 - q) ** 3
    if g0 >= 1:
        raise MechanismParameterError("σ² too small for the bound")
    return g2 / (1 - g0) + (g1 / (1 - g0)) ** 2


def _randbelow(n: int, rng: np.random.Generator) -> int:
    """A uniform integer in [0, n): numpy's exact bounded integers, or rejection on bytes."""
    if n <= 0:
        raise MechanismParameterError("need n > 0")
    if n <= 2**62:
        return int(rng.integers(n))
    bits = (n - 1).bit_length()
    nbytes = (bits + 7) // 8
    mask = (1 << bits) - 1
    while True:
        r = int.from_bytes(rng.bytes(nbytes), "little") & mask
        if r < n:
            return r


def _bernoulli_exp_unit(num: int, den: int, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(−num/den)) for 0 <= num <= den: Bernoulli(g/k), k = 1, 2, … until a 0."""
    k = 1
    while _randbelow(den * k, rng) < num:
        k += 1
    return k % 2 == 1


def bernoulli_exp(gamma: Fraction, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(−γ)) for a rational γ ≥ 0, exactly (CKS20 Algorithm 1).

    For γ ≤ 1: draw Bernoulli(γ/k) for k = 1, 2, … until one is 0; the count
    is odd with probability e^−γ. For γ > 1: ⌊γ⌋ draws of e^−1, then e^−(γ−⌊γ⌋).
    """
    g = Fraction(gamma)
    if g < 0:
        raise MechanismParameterError("bernoulli_exp needs γ >= 0")
    whole, rest = divmod(g.numerator, g.denominator)
    for _ in range(whole):
        if not _bernoulli_exp_unit(1, 1, rng):
            return False
    return _bernoulli_exp_unit(rest, g.denominator, rng)


def discrete_laplace(t: int, rng: np.random.Generator) -> int:
    """Y with P[Y = y] ∝ exp(−|y|/t), y ∈ Z, for an integer scale t ≥ 1 (CKS20 Algorithm 2)."""
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise MechanismParameterError("discrete_laplace needs an integer scale t >= 1")
    while True:
        u = _randbelow(t, rng)
        if not _bernoulli_exp_unit(u, t, rng):
            continue
        v = 0
        while _bernoulli_exp_unit(1, 1, rng):
            v += 1
        x = u + t * v
        negative = _randbelow(2, rng) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_gaussian(center: Fraction | float, sigma2: Fraction,
                      rng: np.random.Generator) -> int:
    """One exact draw of N_Z(center, σ²): P[y] ∝ exp(−(y − center)²/(2σ²)), y ∈ Z.

    Privacy: see the module docstring (`cgp_lattice` is the mechanism); this
    is the sampler. Exact for any rational centre (floats read exactly) and
    rational σ² > 0.
    """
    c = Fraction(center)
    s2 = Fraction(sigma2)
    if s2 <= 0:
        raise MechanismParameterError("σ² must be > 0")
    m = math.floor(c + Fraction(1, 2))
    f = c - m                                   # |f| <= 1/2
    t = math.isqrt(s2.numerator // s2.denominator) + 1   # ⌊σ⌋ + 1 >= σ
    shift = abs(f) / t + s2 / (2 * t * t)
    while True:
        y = discrete_laplace(t, rng)
        x = (y - f) ** 2 / (2 * s2) - Fraction(abs(y), t) + shift
        if bernoulli_exp(x, rng):
            return m + y


def cgp_lattice(w: np.ndarray, *, rho: Fraction, rng: np.random.Generator,
                ) -> tuple[np.ndarray, float]:
    """Release a vector w with ℓ2 sensitivity 1 per unit distance, ρ-CGP, on a lattice.

    Privacy: ρ-CGP (for ‖w − w'‖₂ ≤ d, every Rényi divergence of order α is at
    most α·ρ·d²) with the exact Rényi bound of the module docstring: the
    lattice step γ is 2^-20 times the smallest power of two >= σ (σ_Z = σ/γ
    in (2^19, 2^20]: the release task's snapping grid for this ρ), and
    σ_Z² = κ/(2ργ²) (κ = `LATTICE_EXCESS`) is an exact rational, so the
    guarantee holds with the charged ρ itself. Cost: ρ. The output is on γZ^D
    for every input (no data-dependent low-order bits). The continuous
    equivalent is w + N(0, I)/√(2ρ); the extra variance is a factor κ.

    Args:
        w: the exact (whitened) coordinates, any shape, finite.
        rho: the ρ charged for this draw (exact, > 0).
        rng: the injected generator.

    Returns:
        (the released lattice points, float array shaped like w; the lattice step γ).

    Raises:
        MechanismParameterError: ρ is not positive or w is not finite.
    """
    r = Fraction(rho)
    if r <= 0:
        raise MechanismParameterError("rho must be > 0")
    x = np.asarray(w, dtype=np.float64)
    if not np.isfinite(x).all():
        raise MechanismParameterError("the coordinates must be finite")
    sigma = math.sqrt(float(LATTICE_EXCESS / (2 * r)))
    gamma = Fraction(power_of_two_at_least(sigma)) / LATTICE_STEPS_PER_SIGMA
    sigma2_z = LATTICE_EXCESS / (2 * r * gamma * gamma)
    if sigma2_z < 4:  # the bound on K needs σ_Z >= 2
        raise MechanismParameterError("rho is outside the range of the lattice rule")
    out = np.empty(x.size)
    for j, value in enumerate(x.ravel()):
        out[j] = float(discrete_gaussian(Fraction(value) / gamma, sigma2_z, rng) * gamma)
    return out.reshape(x.shape), float(gamma)
