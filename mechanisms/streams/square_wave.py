"""The Square Wave (SW) local randomizer for one value in [0, 1].

Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, "Estimating Numerical Distributions
under Local Differential Privacy", SIGMOD 2020 (arXiv 1912.01051); used per time
step by CPR (arXiv 2605.02724, Sec. II-D). Spec: ``docs/mechanisms.md`` §2.2.

For a per-step budget ε₀ the output density is

    f(y | x) = p  if |y − x| ≤ b,   q  otherwise,   y ∈ [−b, 1 + b],

with p / q = e^{ε₀} and 2bp + q = 1, so any two inputs x, x' ∈ [0, 1] give
densities within a factor e^{ε₀} of each other: ε₀-LDP, neighbouring relation
"any two values of the domain [0, 1]".
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.errors import MechanismParameterError

__all__ = [
    "SQUARE_WAVE_UNIFORMS",
    "square_wave",
    "square_wave_from_uniforms",
    "square_wave_params",
    "square_wave_pdf",
    "square_wave_cdf",
    "square_wave_moments",
    "square_wave_estimate",
    "square_wave_estimate_variance",
    "square_wave_output_bound",
    "square_wave_worst_variance",
]


def _check_epsilon(epsilon: float, name: str = "epsilon_per_step") -> float:
    if isinstance(epsilon, bool):
        raise MechanismParameterError(f"{name} must be a number, got {epsilon!r}")
    try:
        eps = float(epsilon)
    except (TypeError, ValueError) as err:
        raise MechanismParameterError(f"{name} must be a number, got {epsilon!r}") from err
    if not math.isfinite(eps) or eps <= 0:
        raise MechanismParameterError(f"{name} must be finite and > 0, got {epsilon!r}")
    if eps > 700:
        raise MechanismParameterError(f"{name} = {eps} overflows e^ε; use a value <= 700")
    return eps


def _check_unit_interval(x: object, name: str = "x") -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.size == 0:
        return arr
    lo, hi = float(arr.min()), float(arr.max())  # NaN propagates through min/max
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise MechanismParameterError(f"{name} must be finite (found NaN or inf)")
    if lo < 0.0 or hi > 1.0:
        raise MechanismParameterError(
            f"{name} must lie in [0, 1]; normalise the stream with its public range first"
        )
    return arr


def square_wave_params(epsilon: float) -> tuple[float, float, float]:
    """Return the Square Wave constants (b, p, q) for a per-step budget ε₀.

    b = (ε₀e^{ε₀} − e^{ε₀} + 1) / (2e^{ε₀}(e^{ε₀} − 1 − ε₀)), p = e^{ε₀}/(2be^{ε₀} + 1),
    q = 1/(2be^{ε₀} + 1). For small ε₀ both numerator and denominator are computed
    from their Taylor series, so b → 1/2 without cancellation.

    Privacy: the randomizer built from these constants is ε₀-LDP on [0, 1]
    (p/q = e^{ε₀}). Reference: Li et al. SIGMOD'20, Sec. 4; spec §2.2.

    Args:
        epsilon: per-step privacy parameter ε₀ > 0.

    Returns:
        (b, p, q) as floats.

    Raises:
        MechanismParameterError: if ε₀ is not a finite positive number.
    """
    eps = _check_epsilon(epsilon, "epsilon")
    if eps < 0.5:
        # numerator = Σ_{k≥2} ε^k (k−1)/k!, e^ε − 1 − ε = Σ_{k≥2} ε^k/k!
        num = 0.0
        den = 0.0
        term = eps  # ε^k / k! for k = 1
        for k in range(2, 30):
            term *= eps / k
            num += term * (k - 1)
            den += term
        b = num / (2.0 * math.exp(eps) * den)
    else:
        e = math.exp(eps)
        b = (eps * e - e + 1.0) / (2.0 * e * (e - 1.0 - eps))
    e = math.exp(eps)
    q = 1.0 / (2.0 * b * e + 1.0)
    p = e * q
    return b, p, q


def _inverse_cdf(x: np.ndarray, u: np.ndarray, b: float, p: float, q: float) -> np.ndarray:
    """Map uniforms u to SW outputs for inputs x (vectorised inverse CDF, spec §2.2).

    The three branches of the spec (u ≤ qx; u ≤ qx + 2bp; else) are one
    expression: y = u/q − b − ((p − q)/q)·clip((u − qx)/p, 0, 2b). Below qx the
    clip is 0 (y = u/q − b); inside, y = (u − qx)/p + x − b; above, the clip is
    2b and y = (u − qx − 2bp)/q + x + b. Computed in place, no branch masks.
    """
    t = np.multiply(x, -q)
    t += u
    t *= 1.0 / p
    np.clip(t, 0.0, 2.0 * b, out=t)
    t *= -(p - q) / q
    t += u * (1.0 / q)
    t -= b
    return t


def square_wave(x: object, *, epsilon_per_step: float, rng: np.random.Generator) -> np.ndarray:
    """Privatize every value of `x` independently with the Square Wave randomizer.

    Privacy: each output is ε₀-LDP for its input, neighbouring relation "any two
    values in [0, 1]" (output densities within e^{ε₀}); applied at every step of a
    stream with ε₀ = ε/w it is ε-w-event LDP by basic composition over any w
    consecutive steps. Cost: ε₀ per privatized value. Reference: Li et al.
    SIGMOD'20 (inverse-CDF sampler of their code); CPR paper Sec. II-C/II-D;
    spec §2.1-§2.2.

    Args:
        x: values in [0, 1] (any shape).
        epsilon_per_step: ε₀ > 0 spent on each value.
        rng: injected generator.

    Returns:
        Array of the same shape with values in [−b, 1 + b].

    Raises:
        MechanismParameterError: bad ε₀ or generator (checked first), then
            non-finite values or values outside [0, 1] (before any draw).
    """
    square_wave_params(epsilon_per_step)
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("rng must be a numpy.random.Generator")
    arr = _check_unit_interval(x)
    return square_wave_from_uniforms(arr, rng.random((1, *arr.shape)),
                                     epsilon_per_step=epsilon_per_step)


def square_wave_from_uniforms(x: object, u: np.ndarray, *, epsilon_per_step: float
                              ) -> np.ndarray:
    """The Square Wave reports of `x` from its uniforms `u[0]` (one per value), at ε₀.

    The randomizer of `square_wave` with its draws made by the caller:
    ``square_wave(x, rng=g)`` is ``square_wave_from_uniforms(x, g.random((1, n)))``,
    value for value, and a batch of streams, each with its own generator,
    is randomized in one call once ``u[0]`` holds each stream's draws at its
    values' positions. Privacy: each output is ε₀-LDP for its input provided
    its uniform is independent of the data and of every other value's uniform
    (the caller's duty: a fresh keyed draw per value); cost ε₀ per value.
    Reference: as `square_wave`.

    Args:
        x: values in [0, 1] (any shape).
        u: (1, *x.shape) uniforms in [0, 1), one per value
            (`SQUARE_WAVE_UNIFORMS` rows).
        epsilon_per_step: ε₀ > 0 spent on each value.

    Returns:
        Array shaped like `x` with values in [−b, 1 + b].

    Raises:
        MechanismParameterError: bad ε₀ (checked first), `u` of the wrong
            shape, then non-finite values or values outside [0, 1].
    """
    b, p, q = square_wave_params(epsilon_per_step)
    arr = _check_unit_interval(x)
    draws = _check_uniforms(u, arr.shape, SQUARE_WAVE_UNIFORMS)
    return _inverse_cdf(arr, draws[0], b, p, q)


#: Uniforms `square_wave` draws per value (one block of n, in value order).
SQUARE_WAVE_UNIFORMS = 1


def _check_uniforms(u: object, shape: tuple[int, ...], rows: int) -> np.ndarray:
    """`u` as a float64 array of shape (rows, *shape), else MechanismParameterError."""
    arr = np.asarray(u, dtype=np.float64)
    if arr.shape != (rows, *shape):
        raise MechanismParameterError(
            f"the uniforms must have shape {(rows, *shape)}, got {arr.shape}")
    return arr


def square_wave_pdf(y: object, x: object, *, epsilon_per_step: float) -> np.ndarray:
    """Exact output density f(y | x) of the Square Wave randomizer (broadcasting).

    Privacy: describes the ε₀-LDP randomizer of `square_wave` (spec §2.2); a
    density, it spends nothing.

    Args:
        y: output values.
        x: input values in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        p where |y − x| ≤ b, q elsewhere on [−b, 1 + b], 0 outside.
    """
    b, p, q = square_wave_params(epsilon_per_step)
    xa = _check_unit_interval(x)
    ya = np.asarray(y, dtype=np.float64)
    dens = np.where(np.abs(ya - xa) <= b, p, q)
    return np.where((ya >= -b) & (ya <= 1.0 + b), dens, 0.0)


def square_wave_cdf(y: object, x: object, *, epsilon_per_step: float) -> np.ndarray:
    """Exact output CDF F(y | x) of the Square Wave randomizer (broadcasting).

    Privacy: describes the ε₀-LDP randomizer of `square_wave` (spec §2.2); spends
    nothing. Used by the KS test of the sampler.

    Args:
        y: output values.
        x: input values in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        F(y | x) in [0, 1].
    """
    b, p, q = square_wave_params(epsilon_per_step)
    xa = _check_unit_interval(x)
    ya = np.clip(np.asarray(y, dtype=np.float64), -b, 1.0 + b)
    left = np.clip(ya, -b, xa - b) - (-b)
    mid = np.clip(ya, xa - b, xa + b) - (xa - b)
    right = np.clip(ya, xa + b, 1.0 + b) - (xa + b)
    return np.clip(q * left + p * mid + q * right, 0.0, 1.0)


def square_wave_moments(x: object, *, epsilon_per_step: float) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form E[y | x] and E[y² | x] of the Square Wave output (spec §2.2).

    E[y|x] = q(1+2b)/2 + 2b(p−q)x,  E[y²|x] = q((1+b)³ + b³)/3 + (p−q)(2bx² + 2b³/3).
    Privacy: a property of the ε₀-LDP randomizer; spends nothing.

    Args:
        x: inputs in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        (mean, second moment) arrays shaped like `x`.
    """
    b, p, q = square_wave_params(epsilon_per_step)
    xa = _check_unit_interval(x)
    mean = q * (1.0 + 2.0 * b) / 2.0 + 2.0 * b * (p - q) * xa
    second = q * ((1.0 + b) ** 3 + b**3) / 3.0 + (p - q) * (2.0 * b * xa**2 + 2.0 * b**3 / 3.0)
    return mean, second


def square_wave_estimate(y: object, *, epsilon_per_step: float) -> np.ndarray:
    """Unbiased estimate x̂ = (y − q(b + 1/2)) / (2b(p − q)) of the input of each report.

    Post-processing of ε₀-LDP reports: spends nothing. E[x̂ | x] = x exactly
    (spec §2.2).

    Args:
        y: Square Wave outputs.
        epsilon_per_step: the ε₀ the reports were made with.

    Returns:
        Array of estimates (not clipped; may leave [0, 1]).
    """
    b, p, q = square_wave_params(epsilon_per_step)
    ya = np.asarray(y, dtype=np.float64)
    return (ya - q * (b + 0.5)) / (2.0 * b * (p - q))


def square_wave_estimate_variance(x: object, *, epsilon_per_step: float) -> np.ndarray:
    """Variance of the unbiased estimate for input x: Var[y | x] / (2b(p − q))² (spec §2.2).

    Args:
        x: inputs in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        Array of variances (33.38 at x ∈ {0, 1}, ε₀ = 0.2; 1.379 at ε₀ = 1).
    """
    b, p, q = square_wave_params(epsilon_per_step)
    mean, second = square_wave_moments(x, epsilon_per_step=epsilon_per_step)
    return (second - mean**2) / (2.0 * b * (p - q)) ** 2


def square_wave_worst_variance(epsilon_per_step: float) -> float:
    """Worst-case (over x ∈ [0, 1]) variance of the unbiased SW estimate.

    The variance is a concave-up quadratic in x with the same value at 0 and 1,
    so the worst case is at x = 0. Used by LBD (spec §2.7, Var_i worst case).

    Args:
        epsilon_per_step: ε₀ > 0.

    Returns:
        max_x Var[x̂ | x].
    """
    return float(square_wave_estimate_variance(0.0, epsilon_per_step=epsilon_per_step))


def square_wave_output_bound(epsilon_per_step: float) -> float:
    """Half-width B = 1/2 + b of the output range [−b, 1 + b] around its centre 1/2.

    Every Square Wave report at ε₀ lies in [1/2 − B, 1/2 + B]; the release
    snaps reports to a grid within this public bound. Spends nothing.

    Args:
        epsilon_per_step: ε₀ > 0.

    Returns:
        1/2 + b(ε₀).
    """
    return 0.5 + square_wave_params(epsilon_per_step)[0]
