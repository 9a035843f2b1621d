"""The paper's baseline [LY23]: k evenly spaced noisy points (spec §1.11; paper Sec. 5).

y_i = q(t_i) + (k/ε)·Z_i with Z_i ~ SLap(n) independently (GPBasic), or
y_i = q(t_i) + N(0, I_n)/√(2ρ/k) (CGPBasic); optionally a centred moving
average of window s over the y_i; the output is the piecewise-linear
interpolation of (t_i, y_i).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from mechanisms.cost import Cost, CostItem, float_at_most
from mechanisms.curves._budget import budget, check_rng
from mechanisms.curves._piecewise import check_curve, interpolate
from mechanisms.curves.bounds import noise_scale
from mechanisms.curves.result import PrivateFunction
from mechanisms.curves.samplers import gaussian, noise_sampler, slap
from mechanisms.discrete_gaussian import cgp_lattice
from mechanisms.errors import MechanismParameterError

__all__ = ["baseline_points", "moving_average"]


def moving_average(y: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average over axis 0, window truncated at the ends [PROPOSED].

    Row i averages rows [i − (s−1)//2, i + s//2] ∩ [0, k−1].
    """
    if window <= 1:
        return y.copy()
    k = y.shape[0]
    c = np.concatenate([np.zeros((1,) + y.shape[1:]), np.cumsum(y, axis=0)])
    i = np.arange(k)
    lo = np.clip(i - (window - 1) // 2, 0, k)
    hi = np.clip(i + window // 2 + 1, 0, k)
    return (c[hi] - c[lo]) / (hi - lo)[:, None]


def baseline_points(
    t: object,
    values: object,
    k: int,
    *,
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    smooth: int | None = None,
    rng: np.random.Generator,
    noise: str | None = None,
) -> PrivateFunction:
    """Baseline: privatize k evenly spaced points with basic composition, interpolate.

    Privacy: each point costs ε/k (ρ/k) and is privatized with SLap(n)·k/ε
    (ρ/k-CGP: the exact discrete Gaussian on the lattice of ρ/k,
    `cgp_lattice`, or N(0, I_n)/√(2ρ/k) with ``noise="gaussian"``); by basic
    composition the k points are ε-GP (ρ-CGP) w.r.t.
    dist_∞(q, q') = sup_t ‖q(t) − q'(t)‖, NOT w.r.t. dist₂ (paper Sec. 5: the
    two metrics are incomparable). It is a reference
    for utility only. Cost: one step ``"points"`` = ε (k shares of ε/k).
    Smoothing is post-processing. Paper Sec. 5 [LY23] (GPBasic/CGPBasic);
    spec §1.11.

    Args:
        t: sample times (N,), strictly increasing.
        values: samples (N,) or (N, n).
        k: number of points (>= 2), at t_i = t₀ + i(T − t₀)/(k − 1).
        epsilon: ε (exactly one of epsilon / rho).
        rho: ρ.
        smooth: moving-average window s (None or 1: no smoothing).
        rng: injected generator.
        noise: the point sampler (`samplers.NOISES`, default per notion).

    Returns:
        A PrivateFunction (piecewise linear, k − 1 segments). Diagnostics
        (public): ``k``, ``smooth``, ``per_point_budget``. `error_bound(β)`
        bounds the L2 norm of the interpolated point noise (union bound).
    """
    notion, amount = budget(epsilon, rho)
    check_rng(rng)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 2:
        raise MechanismParameterError(f"k must be an integer >= 2, got {k!r}")
    k = int(k)
    if smooth is not None and (
        isinstance(smooth, bool) or not isinstance(smooth, (int, np.integer)) or int(smooth) < 1
    ):
        raise MechanismParameterError(f"smooth must be None or an integer >= 1, got {smooth!r}")
    window = 1 if smooth is None else int(smooth)
    ta, va = check_curve(t, values)
    n = va.shape[1]
    times = ta[0] + (ta[-1] - ta[0]) * (np.arange(k) / (k - 1))
    times[-1] = ta[-1]
    per_point = amount / k
    exact_points = interpolate(ta, va, times)
    y = moving_average(_noisy_points(exact_points, notion, per_point,
                                     noise_sampler(notion, noise), rng), window)
    length = np.diff(times)
    # linear piece from y_i to y_{i+1} in orthonormal Legendre coordinates
    coef = np.empty((k - 1, 2, n))
    coef[:, 0, :] = 0.5 * (y[:-1] + y[1:]) * np.sqrt(length)[:, None]
    coef[:, 1, :] = 0.5 * (y[1:] - y[:-1]) * np.sqrt(length / 3.0)[:, None]
    cost = Cost(notion=notion, requested=amount, items=(CostItem("points", notion, amount),))
    return PrivateFunction(
        breakpoints=times,
        coefficients=coef,
        basis_name="legendre",
        basis_params={"degree": 1},
        cost=cost,
        dim=k * n,
        noise_notion=notion,
        noise_budget=float_at_most(per_point),
        diagnostics={"k": k, "smooth": window, "per_point_budget": str(per_point)},
        bound_kind="points",
    )


def _noisy_points(points: np.ndarray, notion: str, per_point: Fraction, sampler: str,
                  rng: np.random.Generator) -> np.ndarray:
    """The k points (k, n) with their noise: each point ε/k-GP or ρ/k-CGP (dist_∞)."""
    if sampler == "discrete_gaussian":  # the k·n coordinates at ρ/k each: ρ/k per point
        return cgp_lattice(points, rho=per_point, rng=rng)[0]
    scale = noise_scale(notion, per_point)  # k/ε or 1/√(2ρ/k), never below the exact one
    draw = slap if notion == "gp" else gaussian
    return points + draw(points.shape[1], rng=rng, size=points.shape[0]) * scale
