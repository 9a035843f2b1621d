"""Empirical-Bayes shrinkage and risk-chosen smoothing of Square Wave reports.

Post-processing of already-released ε-w-event LDP reports only: every
quantity here is a function of the reports and of the public per-step budget
ε₀ (which fixes the Square Wave noise law), so it costs no privacy budget and
never sees raw data. Not in the CPR paper; these are options of ours for
`mechanisms.reconstruct.cpr` (spec §5: a CPR whose period detection fails
should not silently become a constant).

The debiased report x̂_t = (y_t − q(b + ½))/(2b(p − q)) is unbiased for x_t
with variance v(x_t) = v₀ + γ(x_t − ½)², a known quadratic (spec §2.2), so
the average noise variance of a stream can be estimated without bias from the
reports themselves. With it:

- `shrink_periodic`: a tiled template d (de-meaned) is shrunk toward the
  stream mean by λ = σ̂²_signal / Var(d), the regression coefficient of the
  truth on d when d = periodic signal + independent error. σ̂²_signal is the
  unbiased between-phase variance of the phase fold, (SSB − (T − 1)·MSW)/n.
- `sure_smooth`: among Savitzky–Golay smoothers S_k (order 2, several
  windows), the reconstruction mean + λ·S_k(x̂ − mean) with the λ of Stein's
  unbiased risk estimate ‖x̂_c − λS x̂_c‖² + 2λσ̄² tr S, computed from the
  smoothed signal energy soft-thresholded at its null quantile (a window
  must be significant to get any weight, and one that only just is gets a
  small λ). When no window is significant the constant (λ = 0) is returned:
  measured (benchmarks/streams/reconstruction.py), below that threshold a
  data-driven λ adds more estimation noise than it recovers.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import signal, stats

from mechanisms.errors import MechanismParameterError
from mechanisms.streams.square_wave import square_wave_estimate, square_wave_estimate_variance

__all__ = [
    "SMOOTHER_WINDOWS",
    "sw_noise_variance",
    "savgol_smooth",
    "savgol_trace",
    "shrink_periodic",
    "sure_smooth",
]

SMOOTHER_WINDOWS = (5, 11, 21, 41, 81, 161, 321)


def sw_noise_variance(y: object, *, epsilon_per_step: float) -> float:
    """Unbiased estimate of the mean noise variance (1/n)Σ v(x_t) of debiased SW reports.

    v(x) = v₀ + γ(x − ½)² (spec §2.2), and E[(x̂ − ½)²] = (x − ½)² + v(x), so
    (v₀ + γ(x̂_t − ½)²)/(1 + γ) is unbiased for v(x_t). Post-processing of the
    reports: no privacy cost.

    Args:
        y: 1-D Square Wave reports.
        epsilon_per_step: the ε₀ they were made with.

    Returns:
        The estimate, floored at v₀·(1 − …)'s minimum over [0, 1] (v₀).
    """
    xh = square_wave_estimate(y, epsilon_per_step=epsilon_per_step)
    v0 = float(square_wave_estimate_variance(0.5, epsilon_per_step=epsilon_per_step))
    v_edge = float(square_wave_estimate_variance(0.0, epsilon_per_step=epsilon_per_step))
    gamma = 4.0 * (v_edge - v0)
    est = float(np.mean((v0 + gamma * (xh - 0.5) ** 2) / (1.0 + gamma)))
    return min(max(est, v0), v_edge)


@lru_cache(maxsize=64)
def _savgol_operator(window: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(interior coefficients, first-window rows, last-window rows) of the SG smoother."""
    half = window // 2
    coeffs = signal.savgol_coeffs(window, order)
    v = np.vander(np.arange(window, dtype=np.float64), order + 1, increasing=True)
    hat = v @ np.linalg.pinv(v)  # projection onto polynomials of `order` on one window
    return coeffs, hat[:half], hat[window - half:]


def savgol_smooth(x: np.ndarray, window: int, order: int = 2) -> np.ndarray:
    """Savitzky–Golay smooth of `x` as ``scipy.signal.savgol_filter(..., mode="interp")``.

    Interior points are the convolution with the SG coefficients; each end's
    ⌊window/2⌋ points are the polynomial fitted to the first (last) window,
    evaluated there. The operator depends only on (window, order) and is
    cached, so smoothing many short streams costs one convolution each.
    Post-processing, no privacy cost.

    Args:
        x: 1-D series (len >= window).
        window: odd window length.
        order: polynomial order (< window).

    Returns:
        The smoothed series.
    """
    if window % 2 == 0 or order >= window or window > x.size:
        raise MechanismParameterError("need an odd window, order < window <= n")
    coeffs, left, right = _savgol_operator(int(window), int(order))
    half = window // 2
    out = np.empty_like(x, dtype=np.float64)
    out[half: x.size - half] = np.convolve(x, coeffs, mode="valid")
    out[:half] = left @ x[:window]
    out[x.size - half:] = right @ x[x.size - window:]
    return out


@lru_cache(maxsize=1024)
def savgol_trace(n: int, window: int, order: int = 2) -> float:
    """Exact trace of the n×n Savitzky–Golay smoothing matrix (``mode="interp"``).

    Interior rows have the centre coefficient on the diagonal; each end's
    ⌊window/2⌋ rows are evaluations of the polynomial fitted to the first
    (last) window, whose diagonal entries are hat-matrix leverages.

    Args:
        n: series length (>= window).
        window: odd window length.
        order: polynomial order (< window).

    Returns:
        tr S.
    """
    if window % 2 == 0 or order >= window or window > n:
        raise MechanismParameterError("need an odd window, order < window <= n")
    half = window // 2
    c0 = float(signal.savgol_coeffs(window, order)[half])
    v = np.vander(np.arange(window, dtype=np.float64), order + 1, increasing=True)
    qm, _ = np.linalg.qr(v)
    lev = np.einsum("ij,ij->i", qm, qm)
    return (n - 2 * half) * c0 + 2.0 * float(lev[:half].sum())


def shrink_periodic(
    xhat: np.ndarray, tiled: np.ndarray, period: int, *, level: float
) -> tuple[np.ndarray, dict]:
    """Shrink a tiled template toward `level` by the empirical-Bayes factor λ.

    d = tiled − mean(tiled). From the phase fold of the debiased reports x̂
    (one-way ANOVA at T), θ̂ = SSB − (T − 1)·MSW is unbiased for the periodic
    signal energy n·σ²_signal, and λ = clip(θ̂/‖d‖², 0, 1) is the
    estimated regression coefficient of the truth on d when d is the
    periodic signal plus independent error (the λ minimising the squared
    error of level + λd). That holds for phase means; CPR's EM + KDE-mode
    template is already denoised (its variance is often below θ̂/n), so
    there λ is usually clipped at 1 and the step mostly recentres the
    template on `level`. Returns clip(level + λd, 0, 1). Post-processing, no
    privacy cost; O(n).

    Args:
        xhat: (n,) debiased reports.
        tiled: (n,) tiled template aligned with `xhat`.
        period: T used for the fold (2 <= T < n).
        level: the stream level the result is centred on.

    Returns:
        (reconstruction, diagnostics with ``lambda``, ``signal_energy`` (θ̂)
        and ``template_energy`` (‖d‖²)).
    """
    from mechanisms.reconstruct.period import fold_anova

    n = xhat.size
    t = int(period)
    ssb, ssw, _ = fold_anova(xhat, t)
    msw = ssw / max(n - t, 1)
    theta = ssb - (t - 1) * msw
    d = tiled - tiled.mean()
    dd = float(np.dot(d, d))
    lam = 0.0 if dd <= 0 else min(1.0, max(theta, 0.0) / dd)
    rec = np.clip(level + lam * d, 0.0, 1.0)
    return rec, {
        "lambda": lam,
        "signal_energy": theta,
        "template_energy": dd,
    }


def sure_smooth(
    xhat: np.ndarray,
    noise_var: float,
    *,
    level: float | None = None,
    windows: tuple[int, ...] = SMOOTHER_WINDOWS,
    order: int = 2,
    significance: float = 1e-3,
) -> tuple[np.ndarray, dict]:
    """Soft-thresholded, shrunk local smoother level + λ·S_k(x̂ − mean).

    For each window k (odd, order < k <= n), s = S_k x̂_c is the
    Savitzky–Golay smooth (`order`) of the centred reports x̂_c = x̂ − mean,
    and Q = ⟨x̂_c, s⟩. Under "no signal" Q ≈ σ̄²·χ²_h with h = tr S (the
    Satterthwaite match: the rows of a local-polynomial hat matrix have
    Σ_j S_ij² = S_ii, so tr SᵀS = tr S; σ̄² = `noise_var`), and
    E[Q] − σ̄² tr S = x̃ᵀSx̃ is the smoothed signal energy. Let Q* be the
    null quantile at `significance`/(number of windows) (Bonferroni). The
    energy estimate is soft-thresholded, θ = max(Q − Q*, 0), and
    λ = min(θ/‖s‖², 1): the λ of Stein's unbiased risk estimate
    ‖x̂_c − λs‖² + 2λσ̄² tr S with θ in place of Q − σ̄² tr S, so a window
    that only just clears the threshold (whose Q is inflated by the
    selection) gets a small λ instead of the full one. The window with the
    largest estimated risk reduction θ²/‖s‖² wins; when none clears its
    threshold the result is the constant `level` (λ = 0). Post-processing,
    no privacy cost; O(n·len(windows)).

    Args:
        xhat: (n,) debiased reports.
        noise_var: mean noise variance of x̂ (`sw_noise_variance`).
        level: the level to centre on (default: mean of x̂ clipped to [0, 1]).
        windows: candidate window lengths.
        order: Savitzky–Golay order.
        significance: family-wise level of the per-window signal tests.

    Returns:
        (reconstruction clipped to [0, 1], diagnostics with ``window`` (None
        for the constant), ``lambda``, per-window ``candidates`` (λ, the
        statistic's z-score against the null, p-value, soft energy) and the
        ``level``).
    """
    if not 0 < significance < 1:
        raise MechanismParameterError("significance must be in (0, 1)")
    if not noise_var > 0:
        raise MechanismParameterError("noise_var must be > 0")
    n = xhat.size
    lvl = float(np.clip(xhat.mean(), 0.0, 1.0)) if level is None else float(level)
    xc = xhat - xhat.mean()
    usable = [int(k) for k in windows if int(k) % 2 == 1 and order < int(k) <= n]
    alpha = significance / max(len(usable), 1)
    best = (0.0, 0.0, None, None)
    table = {}
    for k in usable:
        s = savgol_smooth(xc, k, order)
        ss = float(np.dot(s, s))
        if ss <= 0:
            continue
        tr = savgol_trace(n, k, order)
        q = float(np.dot(xc, s))
        q_star = noise_var * float(stats.chi2.isf(alpha, tr))
        theta = max(q - q_star, 0.0)
        lam = min(1.0, theta / ss)
        gain = theta * theta / ss
        table[str(k)] = {
            "lambda": lam,
            "z": (q - noise_var * tr) / (noise_var * math.sqrt(2.0 * tr)),
            "p": float(stats.chi2.sf(q / noise_var, tr)),
            "signal_energy": theta,
        }
        if gain > best[0]:
            best = (gain, lam, k, s)
    _, lam, k, s = best
    rec = np.full(n, lvl) if s is None else np.clip(lvl + lam * s, 0.0, 1.0)
    return rec, {
        "window": k,
        "lambda": lam if s is not None else 0.0,
        "alpha_per_window": alpha,
        "candidates": table,
        "level": lvl,
    }
