"""Floating-point-safe noise: Mironov's snapping mechanism and grid snapping.

Textbook samplers compute ``x + λ·ln(U)`` (or ``x + σ·Z``) in double precision.
The set of doubles such a computation can produce depends on ``x``, so one
output can rule out neighbouring inputs entirely (Mironov 2012, "On
significance of the least significant bits for differential privacy", CCS:
the attack recovers the input from the low-order bits of Laplace outputs of
common libraries). The fix implemented here (Mironov 2012, §5):

    M(x) = clamp_B( round_Λ( clamp_B(x) + S·λ·ln(U*) ) )

with ``U*`` uniform over the doubles in (0, 1) (each double drawn with
probability proportional to the gap it covers, so all 52 mantissa bits are
random at every magnitude), ``S`` a fair sign, ``Λ`` the smallest power of two
``>= λ`` (so rounding to ``ΛZ`` is exact in binary floating point) and ``B`` a
public bound on the released values. Theorem 1 of the paper: for a function of
sensitivity 1 and ``λ < B < 2^46·λ`` the snapping mechanism is
``(1/λ + 2^-49·B/λ)``-DP. Scaling by the sensitivity Δ (λ = Δ/ε): a scalar
release is ``ε·(1 + 2^-49·B/Δ)``-DP; a d-coordinate release with L1
sensitivity Δ and independent per-coordinate snapping is
``ε·(1 + d·2^-49·B/Δ)``-DP (the coordinates' losses |Δ_i|/λ sum to at most
ε, and each coordinate adds at most the excess 2^-49·B/λ).

`snap_to_grid` is the same clamp + power-of-two rounding as pure
post-processing, for outputs of other samplers (Square Wave, Gaussian): it
removes the low-order bit pattern through which those samplers can leak, and
as post-processing never weakens their ideal (real-arithmetic) guarantee; it
does not by itself prove a bound for their floating-point implementation
(see SECURITY.md).

This module is numpy + standard library only; every sampler takes an injected
``rng: np.random.Generator`` (seeded by the ledger's HMAC seed in a release).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mechanisms.cost import exact
from mechanisms.errors import MechanismParameterError

#: 2^-49: Mironov 2012, Theorem 1 (excess privacy loss per unit of B/λ).
SNAPPING_EXCESS = Fraction(1, 2**49)
#: Theorem 1 needs B < 2^46·λ.
MAX_BOUND_OVER_SCALE = 2**46


@dataclass(frozen=True)
class SnappedRelease:
    """Output of `snapping_laplace`.

    Attributes:
        values: released values, each a multiple of `grid` in [-bound, bound].
        grid: Λ, the power of two the values are rounded to.
        bound: B actually used (the declared bound rounded up to a multiple of Λ).
        epsilon: the ε the caller asked for (ideal Laplace with λ = Δ/ε).
        epsilon_charged: exact ε to charge: ε·(1 + d·2^-49·B/Δ) for d coordinates.
    """

    values: np.ndarray
    grid: float
    bound: float
    epsilon: Fraction
    epsilon_charged: Fraction


def power_of_two_at_least(x: float) -> float:
    """The smallest power of two ``2^k >= x`` (k may be negative), for x > 0 finite.

    Raises:
        MechanismParameterError: x is not a positive finite number.
    """
    if not (isinstance(x, int | float | Fraction) and math.isfinite(x) and x > 0):
        raise MechanismParameterError(f"need a positive finite number, got {x!r}")
    m, e = math.frexp(float(x))        # x = m·2^e with 0.5 <= m < 1
    return math.ldexp(1.0, e - 1) if m == 0.5 else math.ldexp(1.0, e)


def snapping_epsilon(epsilon: Fraction | float | str, *, sensitivity: Fraction | float | str,
                     bound: Fraction | float | str, dimension: int = 1) -> Fraction:
    """Exact ε to charge for `snapping_laplace` (Mironov 2012, Theorem 1, scaled).

    ``ε' = ε·(1 + dimension·2^-49·B/Δ)``: the snapping mechanism with λ = Δ/ε
    is ``(1/λ + 2^-49·B/λ)``-DP for a sensitivity-1 scalar after scaling by Δ;
    over d coordinates the |Δ_i|/λ sum to at most ε (L1 sensitivity Δ) and the
    excesses add up.

    Args:
        epsilon: ε of the ideal Laplace mechanism (> 0).
        sensitivity: Δ, the L1 sensitivity of the released vector (> 0).
        bound: B, the public bound of the released values (> 0).
        dimension: number of coordinates released (>= 1).

    Returns:
        The adjusted ε as an exact Fraction (ε' > ε).

    Raises:
        MechanismParameterError: a parameter is not positive.
    """
    eps, delta, b = (_positive(v, n) for v, n in ((epsilon, "epsilon"),
                                                   (sensitivity, "sensitivity"),
                                                   (bound, "bound")))
    if not isinstance(dimension, int) or dimension < 1:
        raise MechanismParameterError(f"dimension must be an integer >= 1, got {dimension!r}")
    return eps * (1 + dimension * SNAPPING_EXCESS * b / delta)


def snapping_ideal_epsilon(budget: Fraction | float | str, *,
                           sensitivity: Fraction | float | str,
                           bound: Fraction | float | str, dimension: int = 1) -> Fraction:
    """The ideal ε to run `snapping_laplace` with so that it costs exactly `budget`.

    Inverse of `snapping_epsilon`: ``ε = budget / (1 + dimension·2^-49·B/Δ)``,
    so a planner that reserved `budget` (e.g. ε/w per stream step) spends
    exactly that; the noise scale grows by a factor ``1 + d·2^-49·B/Δ``.
    Mironov 2012, Theorem 1 (see `snapping_epsilon`).

    Args:
        budget: the ε' that will be charged (> 0).
        sensitivity: Δ, the L1 sensitivity of the released vector (> 0).
        bound: B, the public bound of the released values (> 0), as passed to
            `snapping_laplace` after rounding up to the grid (its ``bound``).
        dimension: number of coordinates released (>= 1).

    Returns:
        The exact ε (< budget) to pass as ``epsilon``.

    Raises:
        MechanismParameterError: a parameter is not positive.
    """
    total = _positive(budget, "budget")
    return total / (snapping_epsilon(1, sensitivity=sensitivity, bound=bound,
                                     dimension=dimension))


def snap_to_grid(values: np.ndarray, *, grid: float, bound: float) -> np.ndarray:
    """Clamp to [-B, B] and round to the nearest multiple of a power-of-two grid Λ.

    Pure post-processing (no randomness, no privacy cost): the result depends
    on the input only through the grid cell it falls in, so the low-order bits
    of a floating-point sampler's output are not released. B is rounded down
    to a multiple of Λ so every output lies on the grid.

    Args:
        values: array of finite floats (released values of any sampler).
        grid: Λ, a power of two (e.g. `power_of_two_at_least` of the noise scale).
        bound: B > 0, the public bound of the released values.

    Returns:
        A float64 array of multiples of `grid` in [-B, B].

    Raises:
        MechanismParameterError: grid is not a power of two, bound < grid, or a
            value is NaN.
    """
    g = _grid(grid)
    b = _bound_on_grid(bound, g, up=False)
    x = np.asarray(values, dtype=np.float64)
    if np.isnan(x).any():
        raise MechanismParameterError("values to snap must not be NaN")
    y = np.rint(np.clip(x, -b, b) / g) * g
    return np.clip(y, -b, b)


def uniform_doubles(size: int | tuple[int, ...], *, rng: np.random.Generator) -> np.ndarray:
    """U* of Mironov 2012: uniform on (0, 1), every double drawn with its exact probability.

    ``rng.random()`` returns multiples of 2^-53, so small values have few
    random bits; here U = (1 + M·2^-52)·2^-(E+1) with M uniform on 52 bits and
    E geometric (P[E = k] = 2^-(k+1)), i.e. the real uniform variable rounded
    down to a double: all mantissa bits are random at every magnitude.

    Args:
        size: output shape.
        rng: the injected generator.

    Returns:
        float64 array in (0, 1).
    """
    _check_rng(rng)
    e = np.minimum(rng.geometric(0.5, size=size) - 1, 1021)
    m = rng.integers(0, 2**52, size=size, dtype=np.int64)
    return np.ldexp(1.0 + np.ldexp(m.astype(np.float64), -52), -(e + 1).astype(np.int64))


def snapping_laplace(values: np.ndarray | float, *, epsilon: Fraction | float | str,
                     sensitivity: Fraction | float | str, bound: Fraction | float | str,
                     rng: np.random.Generator) -> SnappedRelease:
    """Mironov's snapping mechanism: Laplace noise safe under floating point.

    Guarantee: for neighbouring inputs whose values differ by at most Δ
    (`sensitivity`) in L1 norm (sum of absolute differences over the d
    coordinates of `values`), the release is ε'-DP (pure, w.r.t. that
    neighbouring relation) with ε' = `snapping_epsilon(ε, Δ, B, d)`, provided
    λ = Δ/ε < B < 2^46·λ (checked). Call it once per independently charged
    release (e.g. once per stream step for w-event, d = 1). Cost: charge
    ``epsilon_charged`` (exact) instead of ε. Reference: Mironov 2012, §5.2,
    Theorem 1; SECURITY.md "Floating-point attacks on samplers".

    Args:
        values: the exact (pre-noise) values, any shape; clamped to [-B, B].
        epsilon: ε of the ideal Laplace mechanism (scale λ = Δ/ε per coordinate).
        sensitivity: Δ > 0.
        bound: B, the public bound on released values; rounded up to a multiple of Λ.
        rng: the injected generator (a release seeds it from the ledger's HMAC seed).

    Returns:
        A `SnappedRelease` (values on the grid Λ = smallest power of two >= λ).

    Raises:
        MechanismParameterError: a parameter is out of range or a value is NaN
            (checked before any noise is drawn).
    """
    eps = _positive(epsilon, "epsilon")
    delta = _positive(sensitivity, "sensitivity")
    b_in = _positive(bound, "bound")
    _check_rng(rng)
    lam = float(delta / eps)
    if Fraction(lam) < delta / eps:     # never less noise than Δ/ε because of rounding
        lam = float(np.nextafter(lam, np.inf))
    g = power_of_two_at_least(lam)
    b = _bound_on_grid(float(b_in), g, up=True)
    if not lam < b < MAX_BOUND_OVER_SCALE * lam:
        raise MechanismParameterError(
            f"the snapping mechanism needs λ < B < 2^46·λ; got λ = {lam:g}, B = {b:g}")
    x = np.asarray(values, dtype=np.float64)
    if np.isnan(x).any():
        raise MechanismParameterError("values must not be NaN")
    u = uniform_doubles(x.shape, rng=rng)
    sign = np.where(rng.integers(0, 2, size=x.shape) == 1, 1.0, -1.0)
    noisy = np.clip(x, -b, b) + sign * lam * np.log(u)
    out = np.clip(np.rint(noisy / g) * g, -b, b)
    return SnappedRelease(out, g, b, eps, snapping_epsilon(eps, sensitivity=delta,
                                                           bound=Fraction(b),
                                                           dimension=max(1, x.size)))


def _positive(value: Fraction | float | str, name: str) -> Fraction:
    try:
        v = exact(value)
    except (ValueError, TypeError) as err:
        raise MechanismParameterError(f"{name} must be a positive number: {err}") from None
    if v <= 0:
        raise MechanismParameterError(f"{name} must be > 0, got {value!r}")
    return v


def _grid(grid: float) -> float:
    g = float(grid)
    if not (math.isfinite(g) and g > 0 and math.frexp(g)[0] == 0.5):
        raise MechanismParameterError(f"grid must be a positive power of two, got {grid!r}")
    return g


def _bound_on_grid(bound: float, grid: float, *, up: bool) -> float:
    b = float(bound)
    if not (math.isfinite(b) and b > 0):
        raise MechanismParameterError(f"bound must be a positive finite number, got {bound!r}")
    k = math.ceil(b / grid) if up else math.floor(b / grid)
    if k < 1:
        raise MechanismParameterError(f"bound {b:g} is smaller than the grid {grid:g}")
    return k * grid


def _check_rng(rng: np.random.Generator) -> None:
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("rng must be a numpy.random.Generator (seeded by the caller)")
