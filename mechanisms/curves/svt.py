"""Algorithm 1: the sparse vector technique, "above threshold" (spec §1.3).

SVT(x, (ε₁, ε₂), 𝒯, K, g₁, g₂, …) with the paper's split (ε₁, ε₂) = (ε/3, 2ε/3):
W ~ Lap(K/ε₁) = Lap(3K/ε) once, then ν_j ~ Lap(2K/ε₂) = Lap(3K/ε) per query;
halt at the first j with g_j(x) + ν_j ≥ 𝒯 + W. If the finite query list is
exhausted the last index is returned [PROPOSED].

The noise of every query slot is drawn up front, so the halting index of many
query lists (one per curve, each with its own generator's draws) is one
vectorised comparison (`first_crossing`); `svt` is that with one list.
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

__all__ = ["svt", "SVTResult", "first_crossing"]


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
            (then `n_queries` is required; every query is evaluated).
        threshold: the public threshold 𝒯.
        epsilon: the SVT budget ε (> 0).
        rng: injected generator.
        sensitivity: the Lipschitz constant K (> 0).
        n_queries: number of queries when `queries` is a callable.

    Returns:
        The halting index (0-based) and whether a query crossed.

    Draws: one call ``rng.laplace(0, 3K/ε, count + 1)`` (W, then ν_j for
    every query, whether or not the SVT halts before it).
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
        values = np.array([float(queries(j)) for j in range(count)])
    else:
        values = np.asarray(queries, dtype=np.float64)
        if values.ndim != 1 or values.size < 1:
            raise MechanismParameterError("SVT needs a non-empty 1-D list of queries")
        count = values.size
    # K/ε₁ with ε₁ = ε/3, and 2K/ε₂ with ε₂ = 2ε/3; never below the exact 3K/ε
    scale = laplace_scale(3 * Fraction(k), epsilon if isinstance(epsilon, Fraction) else eps)
    noise = rng.laplace(0.0, scale, size=count + 1)
    index, halted = first_crossing(values[None, :], np.array([count]), noise[None, :],
                                   threshold=float(threshold))
    j = int(index[0])
    return SVTResult(index=j, halted=bool(halted[0]), evaluated=j + 1)


def first_crossing(
    queries: np.ndarray,
    lengths: np.ndarray,
    noise: np.ndarray,
    *,
    threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Above-threshold SVT on many query lists at once, given their Laplace noise.

    Row c halts at the first j < lengths[c] with
    queries[c, j] + noise[c, 1 + j] >= threshold + noise[c, 0] (W = noise[c, 0],
    ν_j = noise[c, 1 + j]), else returns lengths[c] − 1. Privacy as `svt` when
    every slot is an independent Lap(3K/ε) draw and every query is
    K-Lipschitz; the noise of row c must come from row c's own generator.

    Args:
        queries: (C, Q) query values; entries at j >= lengths[c] are ignored.
        lengths: (C,) number of queries of each row (>= 1).
        noise: (C, >= Q + 1) Lap(3K/ε) draws, W first.
        threshold: the public threshold 𝒯.

    Returns:
        (index (C,), halted (C,)).
    """
    count = queries.shape[1]
    noisy_threshold = threshold + noise[:, :1]
    hits = queries + noise[:, 1 : count + 1] >= noisy_threshold
    hits &= np.arange(count)[None, :] < lengths[:, None]
    halted = hits.any(axis=1)
    index = np.where(halted, np.argmax(hits, axis=1), lengths - 1)
    return index.astype(np.int64), halted
