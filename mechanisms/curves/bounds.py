"""Error bounds: η(β; m, p) and ErrBound (spec §1.2; paper Lemma 3.4/3.5, Cor. B.1).

‖SLap(m)‖ ~ Gamma(m, 1) = 𝒢(1, m, 1) and ‖N(0, I_m)‖ ~ chi(m) = 𝒢(√2, m, 2).
η(β; m, p) is their (1 − β)-quantile, exact (``gammaincinv``) or the closed
upper bounds used by ReduceSeg: (e/(e−1))(m + ln(1/β)) for p = 1 and
√m + √(2 ln(1/β)) for p = 2.
"""

from __future__ import annotations

import math
from fractions import Fraction

from scipy import special

from mechanisms.cost import gaussian_scale, laplace_scale
from mechanisms.errors import MechanismParameterError

__all__ = ["eta", "eta_closed_form", "expected_noise_norm", "err_bound", "noise_scale"]


def _check(beta: float, m: int, p: int) -> None:
    if p not in (1, 2):
        raise MechanismParameterError(f"p must be 1 (GP) or 2 (CGP), got {p!r}")
    if not (isinstance(m, int) and m >= 1):
        raise MechanismParameterError(f"m must be a positive integer, got {m!r}")
    if not (0.0 < float(beta) < 1.0):
        raise MechanismParameterError(f"beta must be in (0, 1), got {beta!r}")


def eta(beta: float, m: int, p: int, *, closed_form: bool = False) -> float:
    """(1 − β)-quantile of ‖Z‖ for Z ~ SLap(m) (p = 1) or N(0, I_m) (p = 2).

    Args:
        beta: failure probability in (0, 1).
        m: dimension.
        p: 1 for GP (spherical Laplace), 2 for CGP (Gaussian).
        closed_form: use the closed upper bounds of spec §1.2 (b) instead of
            the exact quantile p^{1/p}·gammaincinv(m/p, 1 − β)^{1/p}.

    Returns:
        η, so that ‖Z‖ ≤ η with probability ≥ 1 − β.
    """
    _check(beta, m, p)
    if closed_form:
        return eta_closed_form(beta, m, p)
    g = float(special.gammaincinv(m / p, 1.0 - beta))
    return p ** (1.0 / p) * g ** (1.0 / p)


def eta_closed_form(beta: float, m: int, p: int) -> float:
    """Closed upper bounds on η: (e/(e−1))(m + ln 1/β) (p=1), √m + √(2 ln 1/β) (p=2)."""
    _check(beta, m, p)
    if p == 1:
        return math.e / (math.e - 1.0) * (m + math.log(1.0 / beta))
    return math.sqrt(m) + math.sqrt(2.0 * math.log(1.0 / beta))


def expected_noise_norm(m: int, p: int) -> float:
    """E‖Z‖: m for SLap(m), √2·Γ((m+1)/2)/Γ(m/2) for N(0, I_m) (Cor. B.1)."""
    _check(0.5, m, p)
    if p == 1:
        return float(m)
    return math.sqrt(2.0) * math.exp(math.lgamma((m + 1) / 2.0) - math.lgamma(m / 2.0))


def noise_scale(notion: str, budget: Fraction | float) -> float:
    """Distance per unit of ‖Z‖: 1/ε (GP) or 1/√(2ρ) (CGP), never below the exact value.

    Every noise scale of the curve mechanisms comes from here (conservative
    floats): `budget` is the exact amount charged for the step (a Fraction),
    or a float read as its exact binary value (e.g. ``float_at_most(ε)``);
    the result is the smallest double >= 1/ε, or >= 1/√(2ρ) checked exactly
    (`mechanisms.cost.laplace_scale`, `gaussian_scale`).
    """
    if isinstance(budget, bool) or not isinstance(budget, Fraction | float | int):
        raise MechanismParameterError(f"the privacy budget must be a number, got {budget!r}")
    if not budget > 0 or (isinstance(budget, float) and not math.isfinite(budget)):
        raise MechanismParameterError("the privacy budget must be finite and > 0")
    if notion == "gp":
        return laplace_scale(1, budget)
    if notion == "cgp":
        return gaussian_scale(1, budget)
    raise MechanismParameterError(f"notion must be 'gp' or 'cgp', got {notion!r}")


def err_bound(
    approx_error: float,
    dim: int,
    *,
    notion: str,
    budget: float,
    beta: float = 0.1,
    closed_form: bool = False,
) -> float:
    """ErrBound = dist₂(f_a, q) + η(β; dim, p)·scale (paper Sec. 3.4; spec §1.2).

    Args:
        approx_error: dist₂(f_a, q), the projection error (0 for the
            data-independent noise part only).
        dim: dimension of the privatized function space.
        notion: ``"gp"`` (p = 1, scale 1/ε) or ``"cgp"`` (p = 2, scale 1/√(2ρ)).
        budget: ε or ρ of the Project-and-Privatize step.
        beta: failure probability.
        closed_form: use the closed-form η.

    Returns:
        A bound that holds with probability ≥ 1 − β.
    """
    p = 1 if notion == "gp" else 2
    return float(approx_error) + eta(beta, dim, p, closed_form=closed_form) * noise_scale(
        notion, budget
    )
