"""Server-side smoothing of released streams (post-processing, costs nothing).

Used by the CPR baselines (spec §2.7): a centred moving average (Laplace,
SW_moving) and a filter (SW_filter: Savitzky-Golay by default; median and
Butterworth low-pass as documented alternatives).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage, signal

from mechanisms.errors import MechanismParameterError

__all__ = ["moving_average", "filter_smooth", "FILTER_KINDS"]

FILTER_KINDS = ("savgol", "median", "butterworth")


def _check_window(window: object, name: str = "window") -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or int(window) < 1:
        raise MechanismParameterError(f"{name} must be an integer >= 1, got {window!r}")
    return int(window)


def _check_series(y: object) -> np.ndarray:
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 1:
        raise MechanismParameterError("the series must be a non-empty 1-D array")
    if not np.all(np.isfinite(arr)):
        raise MechanismParameterError("the series must be finite")
    return arr


def moving_average(y: object, window: int = 5) -> np.ndarray:
    """Centred moving average, truncated at the ends (mean of the available samples).

    Post-processing of already-private reports: no privacy cost. Spec §2.7
    [PROPOSED window 5]; an even window uses one more sample on the left.

    Args:
        y: 1-D series.
        window: number of samples averaged (>= 1).

    Returns:
        Smoothed series of the same length.
    """
    k = _check_window(window)
    arr = _check_series(y)
    n = arr.size
    left = k // 2
    right = k - 1 - left
    csum = np.concatenate(([0.0], np.cumsum(arr)))
    idx = np.arange(n)
    lo = np.clip(idx - left, 0, n)
    hi = np.clip(idx + right + 1, 0, n)
    return (csum[hi] - csum[lo]) / (hi - lo)


def filter_smooth(
    y: object,
    *,
    kind: str = "savgol",
    window: int = 11,
    order: int = 2,
    cutoff: float = 0.1,
) -> np.ndarray:
    """Filter-based smoothing for SW_filter (spec §2.7, [PROPOSED] Savitzky-Golay 11/2).

    Post-processing of already-private reports: no privacy cost.

    Args:
        y: 1-D series.
        kind: ``"savgol"`` (polynomial order `order` over `window` samples,
            ``mode="interp"`` at the ends), ``"median"`` (running median of
            `window`, edges repeated) or ``"butterworth"`` (zero-phase low-pass of
            order `order` with normalised cutoff `cutoff` in (0, 1), 1 = Nyquist).
        window: filter length for savgol/median (odd for savgol; shrunk to the
            series length if longer).
        order: savgol polynomial order / Butterworth order.
        cutoff: Butterworth cutoff.

    Returns:
        Smoothed series of the same length.
    """
    if kind not in FILTER_KINDS:
        raise MechanismParameterError(f"kind must be one of {FILTER_KINDS}, got {kind!r}")
    k = _check_window(window)
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 0:
        raise MechanismParameterError(f"order must be an integer >= 0, got {order!r}")
    if kind == "savgol" and (k % 2 == 0 or order >= k):
        raise MechanismParameterError("savgol needs an odd window > order")
    if kind == "butterworth" and not (0.0 < float(cutoff) < 1.0 and order >= 1):
        raise MechanismParameterError("butterworth needs 0 < cutoff < 1 and order >= 1")
    arr = _check_series(y)
    n = arr.size
    if kind == "savgol":
        win = min(k, n if n % 2 == 1 else n - 1)
        if win <= order:
            return arr.copy()
        return signal.savgol_filter(arr, win, order, mode="interp")
    if kind == "median":
        return ndimage.median_filter(arr, size=min(k, n), mode="nearest")
    sos = signal.butter(int(order), float(cutoff), output="sos")
    if n <= 3 * (2 * len(sos) + 1):
        return arr.copy()
    return signal.sosfiltfilt(sos, arr)
