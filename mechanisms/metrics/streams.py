"""Stream reconstruction and period-detection metrics (spec §2.6 and §5).

Post-processing comparisons of a reconstruction with the (public or synthetic)
original; they spend no budget and are for evaluation, never for production
reports on private data.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.errors import MechanismParameterError

__all__ = [
    "cosine_distance",
    "correlation_distance",
    "minmax_normalize",
    "period_tolerance",
    "period_match",
    "period_accuracy",
]


def _pair(a: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(a, dtype=np.float64).ravel()
    xb = np.asarray(b, dtype=np.float64).ravel()
    if xa.shape != xb.shape or xa.size == 0:
        raise MechanismParameterError("metrics need two non-empty arrays of the same length")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(xb))):
        raise MechanismParameterError("metrics need finite values")
    return xa, xb


def minmax_normalize(a: object) -> np.ndarray:
    """Map `a` affinely onto [0, 1] (a constant maps to 0.5).

    Args:
        a: 1-D values.

    Returns:
        (a − min) / (max − min).
    """
    x = np.asarray(a, dtype=np.float64)
    lo, hi = float(np.min(x)), float(np.max(x))
    if hi <= lo:
        return np.full_like(x, 0.5)
    return (x - lo) / (hi - lo)


def _cos_dist(xa: np.ndarray, xb: np.ndarray) -> float:
    na = math.sqrt(float(np.einsum("i,i->", xa, xa)))
    nb = math.sqrt(float(np.einsum("i,i->", xb, xb)))
    if na == 0.0 or nb == 0.0:
        return 1.0
    cos = float(np.einsum("i,i->", xa, xb)) / (na * nb)
    return float(1.0 - min(1.0, max(-1.0, cos)))


def cosine_distance(a: object, b: object, *, normalize: bool = False) -> float:
    """Cosine distance CD(a, b) = 1 − ⟨a, b⟩ / (‖a‖‖b‖), in [0, 2] (CPR paper Sec. IV-C).

    With `normalize`, both arrays are min-max normalised to [0, 1] first (spec
    §2.6 [PROPOSED]). A zero vector has no direction: the distance is then 1.
    Note (spec §5): on [0, 1] signals this is dominated by the mean level; report
    `correlation_distance` next to it.

    Args:
        a: original.
        b: reconstruction (same length).
        normalize: min-max normalise both first.

    Returns:
        The distance as a float.
    """
    xa, xb = _pair(a, b)
    if normalize:
        xa, xb = minmax_normalize(xa), minmax_normalize(xb)
    return _cos_dist(xa, xb)


def correlation_distance(a: object, b: object) -> float:
    """De-meaned cosine distance 1 − Pearson correlation, in [0, 2] (spec §5).

    Invariant to the mean level and to positive affine maps of either argument,
    so a constant predictor scores exactly 1 (defined as 1 when an argument is
    constant).

    Args:
        a: original.
        b: reconstruction (same length).

    Returns:
        The distance as a float.
    """
    xa, xb = _pair(a, b)
    return _cos_dist(xa - xa.mean(), xb - xb.mean())


def period_tolerance(true_period: int, *, tau: float = 0.05) -> int:
    """Tolerance δ_T = max(1, ⌈τ T⌉) used by the tolerant accuracy (spec §2.3/§2.6).

    Args:
        true_period: T (>= 1).
        tau: relative tolerance (>= 0).

    Returns:
        δ_T.
    """
    if int(true_period) < 1 or not (tau >= 0 and math.isfinite(tau)):
        raise MechanismParameterError("need true_period >= 1 and a finite tau >= 0")
    return max(1, math.ceil(tau * int(true_period)))


def period_match(detected: int, true_period: int, *, tau: float | None = None) -> bool:
    """Whether a detected period counts as correct: exact (tau None) or |T̂ − T| ≤ δ_T.

    Args:
        detected: T̂.
        true_period: T.
        tau: None for the exact criterion, else the relative tolerance.

    Returns:
        True if correct.
    """
    if tau is None:
        return int(detected) == int(true_period)
    return abs(int(detected) - int(true_period)) <= period_tolerance(true_period, tau=tau)


def period_accuracy(
    detected: object, true_period: int | object, *, tau: float | None = None
) -> float:
    """Fraction of trials whose detected period is correct (Table I uses the exact one).

    Args:
        detected: detected periods, one per trial.
        true_period: the construction period (scalar) or one per trial.
        tau: None for exact accuracy, else the tolerant criterion |T̂ − T| ≤ max(1, ⌈τT⌉).

    Returns:
        Accuracy in [0, 1].
    """
    d = np.asarray(detected, dtype=np.int64).ravel()
    t = np.broadcast_to(np.asarray(true_period, dtype=np.int64), d.shape)
    if d.size == 0:
        raise MechanismParameterError("period_accuracy needs at least one trial")
    hits = [period_match(int(a), int(b), tau=tau) for a, b in zip(d, t, strict=True)]
    return float(np.mean(hits))
