"""Validation of the privacy parameter: exactly one of ε (GP) or ρ (CGP)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mechanisms.cost import exact, float_at_most, sqrt_at_most
from mechanisms.errors import MechanismParameterError


def budget(epsilon: object, rho: object) -> tuple[str, Fraction]:
    """Return (notion, exact amount) or raise MechanismParameterError."""
    if (epsilon is None) == (rho is None):
        raise MechanismParameterError(
            "give exactly one of epsilon (ε-GP) or rho (ρ-CGP), "
            f"got epsilon={'set' if epsilon is not None else 'None'}, "
            f"rho={'set' if rho is not None else 'None'}"
        )
    name, value = ("epsilon", epsilon) if epsilon is not None else ("rho", rho)
    try:
        amount = exact(value)  # type: ignore[arg-type]
    except ValueError as err:
        raise MechanismParameterError(f"{name} must be a finite number: {err}") from err
    if amount <= 0:
        raise MechanismParameterError(f"{name} must be > 0, got {value!r}")
    if not math.isfinite(float(amount)):
        raise MechanismParameterError(f"{name} is too large")
    return ("gp" if epsilon is not None else "cgp"), amount


def check_rng(rng: object) -> np.random.Generator:
    """Require an injected numpy Generator."""
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError(
            "rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed))"
        )
    return rng


def svt_epsilon(notion: str, amount: Fraction) -> float:
    """ε with which an SVT step of budget `amount` runs: ε, or √(2ρ) under CGP (Lemma C.1).

    Rounded down (the float ε never exceeds the exact one), so the SVT's
    noise scale 3K/ε is never below the exact one.
    """
    return float_at_most(amount) if notion == "gp" else sqrt_at_most(2 * amount)


def check_beta(beta: float) -> float:
    """β must lie in (0, 1)."""
    b = float(beta)
    if not 0.0 < b < 1.0:
        raise MechanismParameterError(f"beta must be in (0, 1), got {beta!r}")
    return b
