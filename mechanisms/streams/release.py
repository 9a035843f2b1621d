"""How a release runs each stream mechanism (the registry's stream targets)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from mechanisms.cost import float_at_most
from mechanisms.streams.square_wave import square_wave

__all__ = ["run_square_wave"]


def run_square_wave(values: np.ndarray, *, epsilon_per_step: Fraction,
                    rng: np.random.Generator) -> np.ndarray:
    """Square Wave at ε/w on every step of one stream (values in [0, 1]).

    Privacy: each report is ε₀-LDP for its step with ε₀ = `epsilon_per_step` (the
    exact ε/w the ledger reserved, rounded down to a float so the float mechanism
    never spends more); any w consecutive steps cost at most ε (w-event LDP).
    Cost: ε₀ per step.
    """
    return square_wave(values, epsilon_per_step=float_at_most(epsilon_per_step), rng=rng)
