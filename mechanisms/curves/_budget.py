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


#: The smallest failure probability β an option may give (2^-40, about 9.1e-13).
#: Below it the (1 − β) bounds it sets (log 1/β margins) are meaningless in
#: doubles, and values like 1e-320 are subnormal: refused, not computed with.
BETA_MIN = 2.0**-40


def check_beta(beta: object) -> float:
    """β, a failure probability: a real number in [`BETA_MIN`, 1) (not a bool or a string)."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise MechanismParameterError(f"beta must be a number, got {beta!r}")
    b = float(beta)
    if not BETA_MIN <= b < 1.0:
        raise MechanismParameterError(
            f"beta must be in [2^-40, 1) (a failure probability; 2^-40 ≈ 9.1e-13 is the "
            f"smallest the bounds are computed for), got {beta!r}")
    return b


def check_flag(name: str, value: object) -> bool:
    """A boolean option: True or False only (1, 0.5 or "yes" are refused, not read as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise MechanismParameterError(f"{name} must be true or false, got {value!r}")
    return bool(value)
