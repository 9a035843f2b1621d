"""The Piecewise Mechanism (PM) local randomizer, for one value in [0, 1].

Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, "Collecting and Analyzing
Multidimensional Data with Local Differential Privacy", ICDE 2019, Sec. III-B
(Algorithm 2). PM randomizes t ∈ [−1, 1] at budget ε₀ into y ∈ [−C, C],
C = (e^{ε₀/2} + 1)/(e^{ε₀/2} − 1), with the density

    f(y | t) = p           if l(t) ≤ y ≤ r(t),
               p / e^{ε₀}  otherwise on [−C, C],

l(t) = (C + 1)t/2 − (C − 1)/2, r(t) = l(t) + C − 1, p = (e^{ε₀} − e^{ε₀/2})/(2e^{ε₀/2} + 2).
Any two inputs give densities within a factor e^{ε₀}: ε₀-LDP, neighbouring
relation "any two values of the domain". The output is unbiased, E[y | t] = t,
with Var[y | t] = t²/(e^{ε₀/2} − 1) + (e^{ε₀/2} + 3)/(3(e^{ε₀/2} − 1)²) (their Lemma 1).

Here the stream's [0, 1]-normalised value x is mapped to t = 2x − 1 and the
report back to (y + 1)/2 (public affine maps: post-processing), so a report
is an unbiased estimate of x in [(1 − C)/2, (1 + C)/2]. Applied at every step
with ε₀ = ε/w it is ε-w-event LDP by sequential composition over any window
of w steps.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.errors import MechanismParameterError
from mechanisms.streams.square_wave import _check_epsilon, _check_uniforms, _check_unit_interval

__all__ = [
    "PIECEWISE_UNIFORMS",
    "piecewise",
    "piecewise_from_uniforms",
    "piecewise_cdf",
    "piecewise_estimate",
    "piecewise_output_bound",
    "piecewise_params",
    "piecewise_pdf",
    "piecewise_variance",
    "piecewise_worst_variance",
]


def piecewise_params(epsilon: float) -> tuple[float, float, float]:
    """Return the PM constants (C, p, e^{ε₀/2} − 1) for a per-step budget ε₀ (on [−1, 1]).

    e^{ε₀/2} − 1 is computed with ``expm1`` so small ε₀ keep their precision.
    Privacy: the randomizer built from them is ε₀-LDP (Wang et al. ICDE'19, Lemma 1).

    Args:
        epsilon: per-step privacy parameter ε₀ > 0.

    Returns:
        (C, p, e^{ε₀/2} − 1) as floats: output range [−C, C], density p on the
        high band (p·e^{−ε₀} elsewhere).

    Raises:
        MechanismParameterError: if ε₀ is not a finite positive number <= 700.
    """
    eps = _check_epsilon(epsilon, "epsilon")
    em1 = math.expm1(eps / 2.0)
    c = (em1 + 2.0) / em1
    half = em1 + 1.0
    p = half * em1 / (2.0 * half + 2.0)  # (e^ε − e^{ε/2}) / (2e^{ε/2} + 2)
    return c, p, em1


def piecewise(x: object, *, epsilon_per_step: float, rng: np.random.Generator) -> np.ndarray:
    """Privatize every value of `x` in [0, 1] independently with the Piecewise Mechanism.

    Privacy: each output is ε₀-LDP for its input, neighbouring relation "any two
    values in [0, 1]" (output densities within e^{ε₀}); at ε₀ = ε/w per step of
    a stream it is ε-w-event LDP by composition over any w consecutive steps.
    Cost: ε₀ per privatized value. Reference: Wang et al. ICDE'19, Algorithm 2.

    Two uniforms per value: the first picks the high band with probability
    e^{ε₀/2}/(e^{ε₀/2} + 1), the second places the report uniformly in it.

    Args:
        x: values in [0, 1] (any shape).
        epsilon_per_step: ε₀ > 0 spent on each value.
        rng: injected generator.

    Returns:
        Array of the same shape, in [(1 − C)/2, (1 + C)/2]; E[output | x] = x.

    Raises:
        MechanismParameterError: bad ε₀ or generator (checked first), then
            non-finite values or values outside [0, 1] (before any draw).
    """
    piecewise_params(epsilon_per_step)
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("rng must be a numpy.random.Generator")
    arr = _check_unit_interval(x)
    return piecewise_from_uniforms(arr, rng.random((PIECEWISE_UNIFORMS, *arr.shape)),
                                   epsilon_per_step=epsilon_per_step)


#: Uniforms `piecewise` draws per value: a block of n for the bands, then a block of n.
PIECEWISE_UNIFORMS = 2


def piecewise_from_uniforms(x: object, u: np.ndarray, *, epsilon_per_step: float
                            ) -> np.ndarray:
    """The Piecewise Mechanism's reports of `x` from its uniforms `u` (two rows), at ε₀.

    The randomizer of `piecewise` with its draws made by the caller:
    ``piecewise(x, rng=g)`` is ``piecewise_from_uniforms(x, g.random((2, n)))``,
    value for value (`u[0]` picks the band, `u[1]` places the report in it),
    so a batch of streams, each with its own generator, is randomized in one
    call. Privacy: ε₀-LDP per value provided the uniforms are independent of
    the data and of other values' (the caller's duty); cost ε₀ per value.
    Reference: Wang et al. ICDE'19, Algorithm 2.

    Args:
        x: values in [0, 1] (any shape).
        u: (2, *x.shape) uniforms in [0, 1) (`PIECEWISE_UNIFORMS` rows).
        epsilon_per_step: ε₀ > 0 spent on each value.

    Returns:
        Array shaped like `x`, in [(1 − C)/2, (1 + C)/2]; E[output | x] = x.

    Raises:
        MechanismParameterError: bad ε₀ (checked first), `u` of the wrong
            shape, then non-finite values or values outside [0, 1].
    """
    c, _, em1 = piecewise_params(epsilon_per_step)
    arr = _check_unit_interval(x)
    draws = _check_uniforms(u, arr.shape, PIECEWISE_UNIFORMS)
    t = 2.0 * arr - 1.0
    high = draws[0] < (em1 + 1.0) / (em1 + 2.0)
    u = draws[1]
    left = (c + 1.0) / 2.0 * t - (c - 1.0) / 2.0
    outside = u * (c + 1.0) - c  # uniform on [−C, 1), then the band [l, r) is skipped
    outside = np.where(outside >= left, outside + (c - 1.0), outside)
    y = np.where(high, left + u * (c - 1.0), outside)
    return (y + 1.0) / 2.0


def piecewise_pdf(y: object, x: object, *, epsilon_per_step: float) -> np.ndarray:
    """Exact density of a report y (on the [0, 1] scale) for input x (broadcasting).

    Describes the ε₀-LDP randomizer of `piecewise`; spends nothing.

    Args:
        y: reports, on the [0, 1] scale of `piecewise`'s output.
        x: inputs in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        The density (2p on the band, 2p·e^{−ε₀} elsewhere in range, 0 outside).
    """
    c, p, em1 = piecewise_params(epsilon_per_step)
    t = 2.0 * _check_unit_interval(x) - 1.0
    s = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    left = (c + 1.0) / 2.0 * t - (c - 1.0) / 2.0
    low = p / (em1 + 1.0) ** 2  # p·e^{−ε₀}
    dens = np.where((s >= left) & (s <= left + c - 1.0), p, low)
    return 2.0 * np.where(np.abs(s) <= c, dens, 0.0)


def piecewise_cdf(y: object, x: object, *, epsilon_per_step: float) -> np.ndarray:
    """Exact CDF of a report y (on the [0, 1] scale) for input x (broadcasting).

    Describes the ε₀-LDP randomizer of `piecewise`; spends nothing.

    Args:
        y: reports, on the [0, 1] scale.
        x: inputs in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        F(y | x) in [0, 1].
    """
    c, p, em1 = piecewise_params(epsilon_per_step)
    t = 2.0 * _check_unit_interval(x) - 1.0
    s = np.clip(2.0 * np.asarray(y, dtype=np.float64) - 1.0, -c, c)
    left = (c + 1.0) / 2.0 * t - (c - 1.0) / 2.0
    right = left + c - 1.0
    low = p / (em1 + 1.0) ** 2
    below = np.clip(s, -c, left) + c
    band = np.clip(s, left, right) - left
    above = np.clip(s, right, c) - right
    return np.clip(low * below + p * band + low * above, 0.0, 1.0)


def piecewise_estimate(y: object, *, epsilon_per_step: float) -> np.ndarray:
    """Unbiased estimate of each report's input: the report itself (on the [0, 1] scale).

    PM is unbiased on [−1, 1] and the maps to and from [0, 1] are affine, so
    E[y | x] = x. Post-processing: spends nothing.

    Args:
        y: reports of `piecewise`.
        epsilon_per_step: the ε₀ they were made with (checked; the estimate does not
            depend on it).

    Returns:
        The reports as float64 (not clipped; may leave [0, 1]).
    """
    piecewise_params(epsilon_per_step)
    return np.array(y, dtype=np.float64)


def piecewise_variance(x: object, *, epsilon_per_step: float) -> np.ndarray:
    """Var[y | x] of a report on the [0, 1] scale: a quarter of Wang et al.'s Lemma 1.

    Args:
        x: inputs in [0, 1].
        epsilon_per_step: ε₀ > 0.

    Returns:
        (t²/(e^{ε₀/2} − 1) + (e^{ε₀/2} + 3)/(3(e^{ε₀/2} − 1)²)) / 4 with t = 2x − 1.
    """
    _, _, em1 = piecewise_params(epsilon_per_step)
    t = 2.0 * _check_unit_interval(x) - 1.0
    return (t**2 / em1 + (em1 + 4.0) / (3.0 * em1**2)) / 4.0


def piecewise_worst_variance(epsilon_per_step: float) -> float:
    """Max over x ∈ [0, 1] of the report variance (at x ∈ {0, 1}); spends nothing.

    Args:
        epsilon_per_step: ε₀ > 0.

    Returns:
        The worst-case variance of one report.
    """
    return float(piecewise_variance(0.0, epsilon_per_step=epsilon_per_step))


def piecewise_output_bound(epsilon_per_step: float) -> float:
    """Half-width C/2 of the report range [(1 − C)/2, (1 + C)/2] around 1/2; spends nothing.

    Args:
        epsilon_per_step: ε₀ > 0.

    Returns:
        C(ε₀)/2.
    """
    return piecewise_params(epsilon_per_step)[0] / 2.0
