"""Exact discrete Gaussian noise (Canonne, Kamath and Steinke 2020), for every CGP path.

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

Every coordinate of a vector runs the same loops side by side (numpy arrays of
the still-pending coordinates, each round one bulk draw from the generator);
a coordinate's draws are fresh uniforms, so the law of each coordinate is the
sequential algorithm's. The only big numbers are the acceptance exponent x as
an exact fraction N/D; a Bernoulli(a/b) with big a, b compares a uniform
64-bit word u with ⌊2^64·a/b⌋ and, on equality (probability < 2^-63), the
next word with the remainder: exactly U < a/b for U uniform in [0, 1).

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
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from mechanisms.errors import MechanismParameterError
from mechanisms.safe_sampling import power_of_two_at_least

__all__ = ["LATTICE_EXCESS", "LATTICE_STEPS_PER_SIGMA", "bernoulli_exp", "cgp_lattice",
           "cgp_lattice_rows", "discrete_gaussian", "discrete_laplace", "lattice_step",
           "log_partition_curvature_bound"]

#: κ: the charged ρ covers (1 + K σ_Z²)/(2γ²σ_Z²) with K σ_Z² < 2^-100 for σ_Z ≥ 2.
LATTICE_EXCESS = 1 + Fraction(1, 2**60)
#: γ = 2^-20 · (smallest power of two >= σ): the release task's snapping grid for the
#: same ρ, so snapping leaves the lattice points unchanged; σ_Z = σ/γ lies in (2^19, 2^20].
LATTICE_STEPS_PER_SIGMA = 2**20
_WORD = 64
_TRIES = 2


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


def _bernoulli_exp_small(num: np.ndarray, den: int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(−num/den)) per element, int64 0 <= num <= den (CKS20 Algorithm 1).

    Draw Bernoulli(num/(den·k)) for k = 1, 2, … until one is 0 (uniform
    integers below den·k, numpy's exact bounded integers); the count is odd
    with probability e^−num/den. Round k draws for the elements still going.
    """
    k = 1
    odd = np.ones(num.size, dtype=bool)
    going = np.arange(num.size)
    while going.size:
        going = going[rng.integers(0, den * k, size=going.size) < num[going]]
        k += 1
        odd[going] = k % 2 == 1
    return odd


def _bernoulli_ratio(a: list[int], b: list[int], rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(a_i/b_i) per element, Python ints 0 <= a_i < b_i: U < a/b, U uniform.

    U is read 64 bits at a time: with q = ⌊2^64·a/b⌋, a word u < q decides
    U < a/b, u > q decides U > a/b, and u = q moves on to the next word with
    the remainder 2^64·a − q·b in place of a.
    """
    out = np.zeros(len(a), dtype=bool)
    rest = list(a)
    todo = np.arange(len(a))
    while todo.size:
        q = [(rest[i] << _WORD) // b[i] for i in todo.tolist()]
        u = rng.integers(0, 2**_WORD, size=todo.size, dtype=np.uint64)
        qa = np.array(q, dtype=np.uint64)
        out[todo] = u < qa
        tie = u == qa
        for i, qi in zip(todo[tie].tolist(), np.asarray(q, dtype=object)[tie], strict=True):
            rest[i] = (rest[i] << _WORD) - qi * b[i]
        todo = todo[tie]
    return out


def _bernoulli_exp_fraction(num: list[int], den: list[int], rng: np.random.Generator
                            ) -> np.ndarray:
    """Bernoulli(exp(−num_i/den_i)) per element for exact fractions num/den >= 0.

    CKS20 Algorithm 1: ⌊x⌋ draws of Bernoulli(e^−1) (all must be 1), then
    Bernoulli(exp(−r)) for the fractional part r from Bernoulli(r/k) draws.
    """
    n = len(num)
    whole_rest = [divmod(a, b) for a, b in zip(num, den, strict=True)]
    ok = np.ones(n, dtype=bool)
    going = np.array([i for i in range(n) if whole_rest[i][0] > 0], dtype=np.int64)
    done = 0
    while going.size:  # round `done`: one more e^−1 for those that need more than `done`
        ok[going] = _bernoulli_exp_small(np.ones(going.size, dtype=np.int64), 1, rng)
        done += 1
        going = np.array([i for i in going[ok[going]].tolist() if whole_rest[i][0] > done],
                         dtype=np.int64)
    k = np.ones(n, dtype=np.int64)
    going = np.flatnonzero(ok)
    while going.size:
        hit = _bernoulli_ratio([whole_rest[i][1] for i in going.tolist()],
                               [den[i] * int(k[i]) for i in going.tolist()], rng)
        going = going[hit]
        k[going] += 1
    return ok & (k % 2 == 1)


def discrete_laplace(t: int, rng: np.random.Generator, size: int | None = None
                     ) -> int | np.ndarray:
    """Y with P[Y = y] ∝ exp(−|y|/t), y ∈ Z, for an integer scale t ≥ 1 (CKS20 Algorithm 2).

    Args:
        t: the scale.
        rng: injected generator.
        size: number of independent draws (None for one, returned as an int).
    """
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise MechanismParameterError("discrete_laplace needs an integer scale t >= 1")
    out = _discrete_laplace(t, 1 if size is None else int(size), rng)
    return int(out[0]) if size is None else out


def _discrete_laplace(t: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` independent discrete Laplace draws of scale t, int64 (CKS20 Algorithm 2).

    Each round proposes twice as many candidates as are missing (plus 8) and
    keeps the first accepted ones in order: accepted candidates are
    independent draws of the law, whichever of them are used.
    """
    out = np.zeros(size, dtype=np.int64)
    have = 0
    while have < size:
        n = 2 * (size - have) + 8
        u = rng.integers(0, t, size=n)
        u = u[_bernoulli_exp_small(u, t, rng)]
        v = np.zeros(u.size, dtype=np.int64)
        going = np.arange(u.size)
        while going.size:  # v: how many Bernoulli(e^−1) in a row come out 1
            going = going[_bernoulli_exp_small(np.ones(going.size, dtype=np.int64), 1, rng)]
            v[going] += 1
        x = u + t * v
        negative = rng.integers(0, 2, size=u.size) == 1
        good = (np.where(negative, -x, x))[~(negative & (x == 0))]  # −0 is drawn again
        take = good[: size - have]
        out[have : have + take.size] = take
        have += take.size
    return out


def _centre_parts(centres: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """Split float centres c into m = ⌊c + 1/2⌋ (floats) and f = c − m as exact num/den."""
    m = np.floor(centres)
    f = centres - m  # exact: c and ⌊c⌋ share their binary exponent range
    up = f > 0.5
    m[up] += 1.0
    f[up] -= 1.0
    ratios = [x.as_integer_ratio() for x in f.tolist()]
    return m, [r[0] for r in ratios], [r[1] for r in ratios]


def _offsets(num: list[int], den: list[int], sigma2: Fraction, rng: np.random.Generator
             ) -> np.ndarray:
    """y_i ~ N_Z(f_i, σ²) for f_i = num_i/den_i, |f_i| <= 1/2 (CKS20 Algorithm 3, shifted).

    The acceptance exponent over the common denominator D = 2·Sn·Sd·t²·den²
    (σ² = Sn/Sd):  N = (y·den − num)²·Sd²t² − |y|·2SnSd·t·den² + |num|·2SnSd·t·den
    + Sn²·den², i.e. x = (y − f)²/(2σ²) − |y|/t + |f|/t + σ²/(2t²) = N/D ≥ 0.
    Each round tries `_TRIES` proposals per pending coordinate and keeps its
    first accepted one (each proposal is an independent run of the algorithm).
    """
    sn, sd = sigma2.numerator, sigma2.denominator
    t = math.isqrt(sn // sd) + 1  # ⌊σ⌋ + 1 > σ
    a, b, c = sd * sd * t * t, 2 * sn * sd * t, sn * sn
    out = np.zeros(len(num), dtype=np.int64)
    todo = np.arange(len(num))
    while todo.size:
        y = _discrete_laplace(t, _TRIES * todo.size, rng).reshape(_TRIES, todo.size)
        exps, dens = [], []
        for yi, i in zip(y.ravel().tolist(), np.tile(todo, _TRIES).tolist(), strict=True):
            p, q = num[i], den[i]
            exps.append((yi * q - p) ** 2 * a - abs(yi) * b * q * q + abs(p) * b * q
                        + c * q * q)
            dens.append(b * t * q * q)
        accept = _bernoulli_exp_fraction(exps, dens, rng).reshape(_TRIES, todo.size)
        done = accept.any(axis=0)
        first = accept.argmax(axis=0)[done]
        out[todo[done]] = y[first, np.flatnonzero(done)]
        todo = todo[~done]
    return out


def bernoulli_exp(gamma: Fraction, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(−γ)) for a rational γ ≥ 0, exactly (CKS20 Algorithm 1).

    For γ ≤ 1: draw Bernoulli(γ/k) for k = 1, 2, … until one is 0; the count
    is odd with probability e^−γ. For γ > 1: ⌊γ⌋ draws of e^−1, then e^−(γ−⌊γ⌋).
    """
    g = Fraction(gamma)
    if g < 0:
        raise MechanismParameterError("bernoulli_exp needs γ >= 0")
    return bool(_bernoulli_exp_fraction([g.numerator], [g.denominator], rng)[0])


def _sigma2(sigma2: Fraction | int) -> Fraction:
    s2 = Fraction(sigma2)
    if s2 <= 0:
        raise MechanismParameterError("σ² must be > 0")
    return s2


def discrete_gaussian(center: Fraction | float, sigma2: Fraction, rng: np.random.Generator,
                      size: int | None = None) -> int | list[int]:
    """Exact draws of N_Z(center, σ²): P[y] ∝ exp(−(y − center)²/(2σ²)), y ∈ Z.

    Privacy: see the module docstring (`cgp_lattice` is the mechanism); this
    is the sampler. Exact for any rational centre (floats read exactly) and
    rational σ² > 0.

    Returns:
        One int (size None) or a list of `size` independent ints.
    """
    c, s2 = Fraction(center), _sigma2(sigma2)
    m = math.floor(c + Fraction(1, 2))
    f = c - m  # |f| <= 1/2
    n = 1 if size is None else int(size)
    y = _offsets([f.numerator] * n, [f.denominator] * n, s2, rng)
    return m + int(y[0]) if size is None else [m + int(v) for v in y.tolist()]


def lattice_step(rho: Fraction) -> tuple[float, Fraction]:
    """The lattice step γ and the lattice variance σ_Z² of a ρ-CGP draw (exact, public).

    γ is 2^-20 times the smallest power of two P with P² >= σ² = κ/(2ρ)
    (compared exactly), σ_Z² = σ²/γ² in (2^38, 2^40]. The release task rounds
    to a grid of 2^-20 times the power of two >= its float noise scale, which
    is at most γ: rounding leaves the lattice points as they are.

    Raises:
        MechanismParameterError: ρ is not positive.
    """
    r = Fraction(rho)
    if r <= 0:
        raise MechanismParameterError("rho must be > 0")
    sigma2 = LATTICE_EXCESS / (2 * r)
    p = Fraction(power_of_two_at_least(math.sqrt(float(sigma2))))  # a first guess, then exact
    while p * p < sigma2:
        p *= 2
    while (p / 2) ** 2 >= sigma2:
        p /= 2
    gamma = p / LATTICE_STEPS_PER_SIGMA
    return float(gamma), sigma2 / (gamma * gamma)


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
    gamma, sigma2_z = lattice_step(rho)
    x = np.asarray(w, dtype=np.float64)
    if not np.isfinite(x).all():
        raise MechanismParameterError("the coordinates must be finite")
    m, num, den = _centre_parts(x.ravel() / gamma)  # γ is a power of two: w/γ is exact
    y = _offsets(num, den, sigma2_z, rng)
    return ((m + y) * gamma).reshape(x.shape), gamma


def cgp_lattice_rows(w: np.ndarray, dims: np.ndarray, rhos: Sequence[Fraction],
                     rngs: Sequence[np.random.Generator]) -> np.ndarray:
    """`cgp_lattice` of consecutive blocks of w: block c has dims[c] entries, ρ_c, rngs[c].

    Privacy: block c is ρ_c-CGP (`cgp_lattice`) and drawn from rngs[c] only,
    blocks in order (a generator shared by several blocks is drawn block after
    block, as sequential calls). Cost: ρ_c for block c.

    Returns:
        The released lattice points, shape (Σ dims,).
    """
    x = np.asarray(w, dtype=np.float64)
    ends = np.cumsum(np.asarray(dims, dtype=np.int64))
    if ends.size != len(rhos) or ends.size != len(rngs) or (ends.size and ends[-1] != x.size):
        raise MechanismParameterError("need one ρ and one generator per block, covering w")
    out = np.empty_like(x)
    start = 0
    for end, rho, rng in zip(ends.tolist(), rhos, rngs, strict=True):
        out[start:end] = cgp_lattice(x[start:end], rho=rho, rng=rng)[0]
        start = end
    return out
