"""Algorithm 1: the sparse vector technique, "above threshold" (spec §1.3).

SVT(x, (ε₁, ε₂), 𝒯, K, g₁, g₂, …) with the paper's split (ε₁, ε₂) = (ε/3, 2ε/3):
W ~ Lap(K/ε₁) = Lap(3K/ε) once, then ν_j ~ Lap(2K/ε₂) = Lap(3K/ε) per query;
halt at the first j with g_j(x) + ν_j ≥ 𝒯 + W. If the finite query list is
exhausted the last index is returned [PROPOSED].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mechanisms.cost import laplace_scale
from mechanisms.curves._budget import check_rng
from mechanisms.errors import MechanismParameterError

__all__ = ["svt", "SVTResult"]


@dataclass(frozen=True)
class SVTResult:
    """Outcome of one SVT run.

    Attributes:
        index: the halting index (0-based position in the query list), a
            private output.
        halted: False when no query crossed and the last index was returned.
        evaluated: number of queries evaluated (= index + 1).
    """

    index: int
    halted: bool
    evaluated: int


def svt(
    queries: Sequence[float] | Callable[[int], float],
    *,
    threshold: float,
    epsilon: float | Fraction,
    rng: np.random.Generator,
    sensitivity: float = 1.0,
    n_queries: int | None = None,
) -> SVTResult:
    """Above-threshold SVT with budget ε split (ε/3 threshold, 2ε/3 queries).

    Privacy: ε-GP w.r.t. any metric d for which every g_j is K-Lipschitz
    (|g_j(x) − g_j(x')| ≤ K·d(x, x')), [LY23]; under CGP a step of budget ρ_s
    calls this with ε = √(2ρ_s) (Lemma C.1). Cost: ε. Paper Algorithm 1 and
    App. D.1; spec §1.3.

    Args:
        queries: the query values g_j(x) in order, or a function j -> g_j(x)
            evaluated lazily (then `n_queries` is required).
        threshold: the public threshold 𝒯.
        epsilon: the SVT budget ε (> 0).
        rng: injected generator.
        sensitivity: the Lipschitz constant K (> 0).
        n_queries: number of queries when `queries` is a callable.

    Returns:
        The halting index (0-based) and whether a query crossed.
    """
    check_rng(rng)
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise MechanismParameterError("SVT epsilon must be finite and > 0")
    k = float(sensitivity)
    if not (math.isfinite(k) and k > 0):
        raise MechanismParameterError("SVT sensitivity must be finite and > 0")
    if not math.isfinite(float(threshold)):
        raise MechanismParameterError("SVT threshold must be finite")
    if callable(queries):
        if n_queries is None or int(n_queries) < 1:
            raise MechanismParameterError("n_queries >= 1 is required with a query function")
        count = int(n_queries)
        get = queries
    else:
        values = np.asarray(queries, dtype=np.float64)
        if values.ndim != 1 or values.size < 1:
            raise MechanismParameterError("SVT needs a non-empty 1-D list of queries")
        count = values.size

        def get(j: int) -> float:
            return float(values[j])

    # K/ε₁ with ε₁ = ε/3, and 2K/ε₂ with ε₂ = 2ε/3; never below the exact 3K/ε
    scale = laplace_scale(3 * Fraction(k), epsilon if isinstance(epsilon, Fraction) else eps)
    noisy_threshold = float(threshold) + rng.laplace(0.0, scale)
    for j in range(count):
        if get(j) + rng.laplace(0.0, scale) >= noisy_threshold:
            return SVTResult(index=j, halted=True, evaluated=j + 1)
    return SVTResult(index=count - 1, halted=False, evaluated=count)
