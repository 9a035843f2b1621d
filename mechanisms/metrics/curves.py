"""Error metrics for curves: exact L2 distances, normalised errors, η and ErrBound.

Spec §1.2 and §1.12 (paper Sec. 5): the average normalised L² error is the
mean of dist₂(q̃, q)/‖q‖₂; the "L²-squared error" (functional MSE) the mean of
dist₂(q̃, q)²/‖q‖₂² [PROPOSED normalisation].
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.curves._piecewise import (
    SubPieces,
    check_curve,
    nodes_for_degree,
    squared_distance_pl,
)
from mechanisms.curves.bounds import err_bound, eta, eta_closed_form, expected_noise_norm
from mechanisms.curves.result import PrivateFunction
from mechanisms.errors import MechanismParameterError

__all__ = [
    "l2_distance",
    "l2_norm",
    "l2_error",
    "normalized_l2_error",
    "normalized_squared_error",
    "eta",
    "eta_closed_form",
    "err_bound",
    "expected_noise_norm",
]


def l2_distance(t: object, a: object, b: object) -> float:
    """Exact dist₂ between the piecewise-linear interpolants of a and b on the grid t.

    Args:
        t: sample times (N,), strictly increasing.
        a: samples (N,) or (N, n).
        b: samples of the same shape.

    Returns:
        (∫‖a(t) − b(t)‖² dt)^{1/2} over [t[0], t[-1]].
    """
    ta, aa = check_curve(t, a)
    _, bb = check_curve(ta, b)
    if aa.shape != bb.shape:
        raise MechanismParameterError(f"a and b must have the same shape: {aa.shape} vs {bb.shape}")
    return math.sqrt(max(squared_distance_pl(ta, aa, bb), 0.0))


def l2_norm(t: object, values: object) -> float:
    """Exact ‖q‖₂ of the piecewise-linear interpolant."""
    ta, va = check_curve(t, values)
    return math.sqrt(squared_distance_pl(ta, va, np.zeros_like(va)))


def l2_error(
    t: object,
    values: object,
    fn: PrivateFunction,
    *,
    nodes: int = 24,
    max_width: float | None = None,
) -> float:
    """dist₂(f, q) over the curve's domain [t[0], t[-1]] for a released function f.

    Exact (Gauss-Legendre on sub-pieces between data knots and f's
    breakpoints) when f is piecewise polynomial (Legendre, monomial). For
    sinc and Fourier functions it uses `nodes` Gauss-Legendre nodes on
    sub-pieces no wider than `max_width` (default: half the sinc spacing, or
    1/(4·max frequency) of each Fourier segment), accurate to ~1e-10 relative.

    Args:
        t: sample times (N,).
        values: samples (N,) or (N, n).
        fn: the released function.
        nodes: quadrature nodes per sub-piece for non-polynomial bases.
        max_width: largest sub-piece width for non-polynomial bases.

    Returns:
        The L2 distance.
    """
    ta, va = check_curve(t, values)
    if va.shape[1] != fn.n_outputs:
        raise MechanismParameterError("the curve and the function have different dimensions")
    lo, hi = float(ta[0]), float(ta[-1])
    bp = fn.breakpoints
    edges = np.concatenate([[lo], bp[(bp > lo) & (bp < hi)], [hi]])
    basis = fn.basis()
    degree = getattr(basis, "degree", None)
    if degree is not None:
        n_nodes = nodes_for_degree(2 * max(int(degree), 1))
    else:
        n_nodes = int(nodes)
        if max_width is None:
            if fn.basis_name == "sinc":
                max_width = 0.5 * float(fn.basis_params["spacing"])
            else:
                widths = np.diff(bp)
                freq = max(1, (int(fn.basis_params["n_terms"]) + 1) // 2)
                max_width = float(widths.min()) / (4.0 * freq)
        count = int(math.ceil((hi - lo) / max_width))
        fine = lo + (hi - lo) * np.arange(count + 1) / count
        fine[-1] = hi  # (hi − lo)·count/count may round above hi
        edges = np.union1d(edges, fine)
    pieces = SubPieces(ta, va, edges)
    node_t, weights, qv = pieces.quadrature(n_nodes)
    f = fn.evaluate(node_t.ravel()).reshape(qv.shape)
    diff = qv - f
    return math.sqrt(float(np.sum(weights[:, :, None] * diff * diff)))


def normalized_l2_error(t: object, values: object, fn: PrivateFunction) -> float:
    """dist₂(f, q)/‖q‖₂ (paper Sec. 5; spec §1.12)."""
    norm = l2_norm(t, values)
    if norm == 0:
        raise MechanismParameterError("the curve has zero L2 norm; normalised error undefined")
    return l2_error(t, values, fn) / norm


def normalized_squared_error(t: object, values: object, fn: PrivateFunction) -> float:
    """dist₂(f, q)²/‖q‖₂² (functional MSE, spec §1.12 [PROPOSED normalisation])."""
    return normalized_l2_error(t, values, fn) ** 2
