"""Exact privacy amounts as integers of one fixed quantum.

Every amount the ledger stores (ε for ``gp`` and per-step ε for ``wevent``
domains, ρ for ``cgp`` domains) is an integer number of quanta in a DuckDB
``HUGEINT`` column, with

    UNITS_PER_EPSILON = lcm(1..32) * 10**6 * 2**12  (= 591476952652185600000000 ≈ 5.9e23)

quanta per unit of ε (or ρ). The quantum is chosen so that the amounts people
actually write are exact:

* every decimal with at most 6 places (``0.1``, ``0.000125``),
* every ε/w for a window w <= 32, every ε/k for k <= 32,
* every budget split by powers of two up to 2**22 combined with the above
  (e.g. ε/12, ε/16, ε/(3 * 2**20)).

So 11 charges of ``Fraction(1, 11)`` fill a cap of 1 exactly (all admitted, a
12th denied), and 10 charges of ``0.1`` fill a cap of ``1.0`` exactly.

Anything not representable is rounded in the conservative direction: a charge
is rounded **up** to the next quantum (`charge_units`) and a cap **down**
(`cap_units`), so rounding can only deny a request that is within one quantum
(1.7e-24) of the cap, never admit one above it. Inputs go through
`mechanisms.cost.exact`: floats are read through their shortest repr (``0.1`` is
1/10, not the nearest binary double) and strings may be ratios (``"1/11"``).

HUGEINT holds up to 1.7e38, i.e. about 2.8e14 units of ε per account: far above
any meaningful budget.
"""

from __future__ import annotations

import math
from fractions import Fraction

from mechanisms.cost import exact

UNITS_PER_EPSILON: int = math.lcm(*range(1, 33)) * 10**6 * 2**12
"""Quanta per unit of ε (and per unit of ρ for CGP domains)."""

MAX_UNITS: int = 2**127 - 1
"""Largest amount a HUGEINT column holds."""


def _as_fraction(x: float | int | str | Fraction) -> Fraction:
    try:
        return exact(x)
    except ValueError as err:
        raise ValueError(f"invalid privacy amount: {err}") from None


def _check_range(units: int, what: str) -> int:
    if units > MAX_UNITS:
        limit = MAX_UNITS // UNITS_PER_EPSILON
        raise ValueError(f"{what} is too large to store (more than {limit})")
    return units


def charge_units(x: float | int | str | Fraction) -> int:
    """Convert a charge to quanta, rounding **up** (conservative for charges).

    Args:
        x: the amount (ε or ρ) as a Fraction, int, float (read via its repr) or a
            decimal/ratio string.

    Returns:
        The smallest integer q with q / UNITS_PER_EPSILON >= x.

    Raises:
        ValueError: `x` is negative, non-finite or not a number.
    """
    f = _as_fraction(x)
    if f < 0:
        raise ValueError(f"a privacy charge must be >= 0, got {f}")
    return _check_range(-((-f.numerator * UNITS_PER_EPSILON) // f.denominator), "charge")


def cap_units(x: float | int | str | Fraction) -> int:
    """Convert a cap to quanta, rounding **down** (conservative for caps).

    Args:
        x: the cap (ε, ρ, or ε per window).

    Returns:
        The largest integer q with q / UNITS_PER_EPSILON <= x.

    Raises:
        ValueError: `x` is negative, non-finite or not a number.
    """
    f = _as_fraction(x)
    if f < 0:
        raise ValueError(f"a privacy cap must be >= 0, got {f}")
    return _check_range((f.numerator * UNITS_PER_EPSILON) // f.denominator, "cap")


def is_exact(x: float | int | str | Fraction) -> bool:
    """True if `x` is a whole number of quanta (stored without rounding)."""
    f = _as_fraction(x)
    return (f.numerator * UNITS_PER_EPSILON) % f.denominator == 0


def from_units(units: int) -> Fraction:
    """The exact amount a number of quanta stands for."""
    return Fraction(int(units), UNITS_PER_EPSILON)


def format_units(units: int) -> str:
    """Human text of an amount: a decimal when it is one, else ``p/q (≈ d)``.

    Examples: ``0.1``, ``1``, ``1/11 (≈0.0909091)``.
    """
    return format_fraction(from_units(units))


def format_fraction(f: Fraction) -> str:
    """Human text of an exact amount (see `format_units`)."""
    den = f.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    places = max(twos, fives)
    if den == 1 and places <= 12:
        if places == 0:
            return str(f.numerator)
        scaled = f.numerator * 10**places // f.denominator
        sign = "-" if scaled < 0 else ""
        digits = str(abs(scaled)).rjust(places + 1, "0")
        return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return f"{f.numerator}/{f.denominator} (≈{float(f):.6g})"
