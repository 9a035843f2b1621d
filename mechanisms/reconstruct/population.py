"""Population view of many users' Square Wave reports (post-processing only).

From one release's reports of a set of users (all of them, or a chosen group)
this computes what an analyst of the population wants:

- `population_mean`: the per-step mean over users with a confidence band;
- `phase_mean`: the per-phase mean (steps folded by a public period, e.g.
  48 half-hours: the average daily profile across households) with a band;
- `population_distribution`: the per-step (or per-phase) distribution of the
  values, estimated by Square Wave's EM with EMS smoothing on a grid
  (Li et al. SIGMOD'20, Sec. 5; spec §2.2 "Canonical EMS"), with quantiles.

Privacy: every function reads only released ε₀-LDP reports and public
parameters (ε₀, the period, the step indices), so it costs no privacy budget
(post-processing). Values are on the [0, 1] scale of the release; callers map
them to the domain's units with its public value range.

Estimators. The debiased report x̂ = (y − q(b + ½))/(2b(p − q)) is unbiased
for the user's value x, with variance v(x) = v₀ + γ(x − ½)² (spec §2.2), and
reports of different users (and steps) are independent. So the mean of x̂
over the reports of a cell (a step, or a phase) is unbiased for the mean of
the users' true values in that cell, and (v₀ + γ(x̂ − ½)²)/(1 + γ) is an
unbiased estimate of each report's variance (`shrink.sw_noise_variance`).
The band is mean ± z·√(Σ v̂)/count: a normal (CLT) interval for the mean of
the released users' own values (a finite population: only the randomizer is
random), pointwise at `confidence` or, with ``simultaneous=True``, Bonferroni
over all cells. Reports are given as a (users, steps) array with NaN where a
user has no report at a step (missing days).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from mechanisms.errors import MechanismParameterError
from mechanisms.reconstruct.em import sw_em
from mechanisms.streams.square_wave import (
    square_wave_estimate,
    square_wave_estimate_variance,
    square_wave_params,
)

__all__ = [
    "PopulationMean",
    "PopulationDistribution",
    "population_mean",
    "phase_mean",
    "population_distribution",
    "grid_quantiles",
]


@dataclass(frozen=True)
class PopulationMean:
    """Cell means of the users' values with a confidence band, on [0, 1].

    Attributes:
        cells: (C,) the step indices, or the phases 0..P−1.
        mean: (C,) unbiased estimate of the mean of the users' true values
            in each cell (not clipped: it may leave [0, 1]).
        lower: (C,) lower end of the band, clipped to [0, 1].
        upper: (C,) upper end of the band, clipped to [0, 1].
        std_error: (C,) estimated standard error of `mean`.
        reports: (C,) number of reports in each cell.
        confidence: the band's (pointwise or simultaneous) level.
        simultaneous: whether the band holds for all cells at once.
    """

    cells: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    std_error: np.ndarray
    reports: np.ndarray
    confidence: float
    simultaneous: bool


@dataclass(frozen=True)
class PopulationDistribution:
    """Per-cell distribution of the users' values on a grid of [0, 1].

    Attributes:
        cells: (C,) the step indices, or the phases 0..P−1.
        grid: (B,) grid cell centres (b − ½)/B.
        pi: (C, B) estimated probabilities (rows sum to 1).
        quantile_levels: (K,) the probabilities of `quantiles`.
        quantiles: (C, K) quantiles of each cell's distribution.
        mean: (C,) the mean of each distribution.
        reports: (C,) number of reports in each cell.
    """

    cells: np.ndarray
    grid: np.ndarray
    pi: np.ndarray
    quantile_levels: np.ndarray
    quantiles: np.ndarray
    mean: np.ndarray
    reports: np.ndarray


def _check_reports(y: object, epsilon_per_step: float) -> np.ndarray:
    b, _, _ = square_wave_params(epsilon_per_step)
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim != 2 or arr.size == 0:
        raise MechanismParameterError("reports must be a non-empty (users, steps) array")
    present = ~np.isnan(arr)
    vals = arr[present]
    if vals.size == 0:
        raise MechanismParameterError("there are no reports (all entries are NaN)")
    if not np.all(np.isfinite(vals)):
        raise MechanismParameterError("reports must be finite (NaN marks a missing report)")
    if vals.min() < -b - 1e-9 or vals.max() > 1 + b + 1e-9:
        raise MechanismParameterError(
            "reports fall outside [−b, 1 + b]: they were not made with this epsilon_per_step")
    return arr


def _check_level(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise MechanismParameterError("confidence must be in (0, 1)")


def _cell_means(xhat: np.ndarray, var: np.ndarray, cell: np.ndarray, n_cells: int,
                confidence: float, simultaneous: bool, cells: np.ndarray) -> PopulationMean:
    """Means and bands of the present reports grouped by `cell` (flat arrays)."""
    count = np.bincount(cell, minlength=n_cells).astype(np.float64)
    keep = count > 0
    total = np.bincount(cell, weights=xhat, minlength=n_cells)
    var_sum = np.bincount(cell, weights=var, minlength=n_cells)
    mean = total[keep] / count[keep]
    se = np.sqrt(var_sum[keep]) / count[keep]
    alpha = 1.0 - confidence
    if simultaneous:
        alpha /= max(int(keep.sum()), 1)
    z = float(stats.norm.isf(alpha / 2.0))
    return PopulationMean(
        cells=cells[keep], mean=mean,
        lower=np.clip(mean - z * se, 0.0, 1.0), upper=np.clip(mean + z * se, 0.0, 1.0),
        std_error=se, reports=count[keep].astype(np.int64), confidence=float(confidence),
        simultaneous=bool(simultaneous))


def _debiased(arr: np.ndarray, epsilon_per_step: float) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """Present entries: (flat mask, x̂, unbiased variance estimate of each x̂)."""
    present = ~np.isnan(arr)
    xhat = square_wave_estimate(arr[present], epsilon_per_step=epsilon_per_step)
    v0 = float(square_wave_estimate_variance(0.5, epsilon_per_step=epsilon_per_step))
    gamma = 4.0 * (float(square_wave_estimate_variance(0.0, epsilon_per_step=epsilon_per_step))
                   - v0)
    var = (v0 + gamma * (xhat - 0.5) ** 2) / (1.0 + gamma)
    return present, xhat, var


def _steps_of(arr: np.ndarray, steps: object | None) -> np.ndarray:
    if steps is None:
        return np.arange(arr.shape[1], dtype=np.int64)
    st = np.asarray(steps)
    if st.shape != (arr.shape[1],) or not np.issubdtype(st.dtype, np.integer):
        raise MechanismParameterError("steps must be integers, one per column of the reports")
    if np.any(st < 0) or np.any(np.diff(st) <= 0):
        raise MechanismParameterError("steps must be increasing and >= 0")
    return st.astype(np.int64)


def population_mean(y: object, *, epsilon_per_step: float, steps: object | None = None,
                    confidence: float = 0.95, simultaneous: bool = False) -> PopulationMean:
    """Per-step mean of the users' values, with a confidence band.

    Privacy: post-processing of released ε₀-LDP Square Wave reports; costs
    nothing. Cost: O(users × steps).

    Args:
        y: (users, steps) reports, NaN where a user has no report.
        epsilon_per_step: the ε₀ of the reports.
        steps: (steps,) absolute step index of each column (default 0..).
        confidence: level of the band (0.95).
        simultaneous: Bonferroni over the steps instead of pointwise.

    Returns:
        `PopulationMean` over the steps that have at least one report.
    """
    _check_level(confidence)
    arr = _check_reports(y, epsilon_per_step)
    st = _steps_of(arr, steps)
    present, xhat, var = _debiased(arr, epsilon_per_step)
    col = np.nonzero(present)[1]
    return _cell_means(xhat, var, col, arr.shape[1], confidence, simultaneous, st)


def _check_period(period: object) -> int:
    if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
        raise MechanismParameterError(f"period must be a positive integer, got {period!r}")
    return int(period)


def phase_mean(y: object, *, epsilon_per_step: float, period: int, steps: object | None = None,
               confidence: float = 0.95, simultaneous: bool = False) -> PopulationMean:
    """Per-phase mean (steps folded by `period`, phase = step mod period), with a band.

    The target is the mean of the users' true values over all (user, step)
    reports of the phase, e.g. the average daily load profile across
    households for period 48 on half-hourly steps.

    Privacy: post-processing of released ε₀-LDP reports and the public
    period; costs nothing. Cost: O(users × steps).

    Args:
        y: (users, steps) reports, NaN where missing.
        epsilon_per_step: the ε₀ of the reports.
        period: P >= 1 (public, e.g. steps per day).
        steps: absolute step index of each column (default 0..): the phase
            of a step is ``step mod period``.
        confidence: level of the band.
        simultaneous: Bonferroni over the phases.

    Returns:
        `PopulationMean` over the phases that have a report.
    """
    _check_level(confidence)
    p = _check_period(period)
    arr = _check_reports(y, epsilon_per_step)
    st = _steps_of(arr, steps)
    present, xhat, var = _debiased(arr, epsilon_per_step)
    phase = (st % p)[np.nonzero(present)[1]]
    return _cell_means(xhat, var, phase, p, confidence, simultaneous,
                       np.arange(p, dtype=np.int64))


def grid_quantiles(pi: np.ndarray, levels: object) -> np.ndarray:
    """Quantiles of grid distributions, linear within each grid cell.

    Cell b of B covers [b/B, (b + 1)/B) and holds probability pi[:, b]; the
    quantile at level l is where the piecewise-linear CDF first reaches l.

    Args:
        pi: (C, B) probabilities (rows sum to 1).
        levels: probabilities in [0, 1].

    Returns:
        (C, len(levels)) quantiles in [0, 1].
    """
    lv = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    if np.any((lv < 0) | (lv > 1)):
        raise MechanismParameterError("quantile levels must be in [0, 1]")
    c, bsz = pi.shape
    cdf = np.concatenate([np.zeros((c, 1)), np.cumsum(pi, axis=1)], axis=1)
    cdf /= cdf[:, -1:]
    # j: the first CDF knot >= l (1..B), so l lies in cell j − 1; level 0 is the
    # left end of the support (the first knot above 0)
    at = np.maximum(lv, np.finfo(np.float64).tiny)
    j = np.clip((cdf[:, None, :] < at[None, :, None]).sum(axis=2), 1, bsz)
    rows = np.arange(c)[:, None]
    lo, hi = cdf[rows, j - 1], cdf[rows, j]
    frac = np.divide(lv[None, :] - lo, hi - lo, out=np.zeros_like(lo), where=hi > lo)
    return (j - 1 + np.clip(frac, 0.0, 1.0)) / bsz


#: reports per EM call of `population_distribution` (cells are independent, so
#: splitting the cells into chunks is exact and bounds the memory)
_REPORTS_PER_EM = 2_000_000


def _chunks(count: np.ndarray, size: int) -> list[np.ndarray]:
    """Consecutive non-empty cells in groups of about `size` reports."""
    out: list[np.ndarray] = []
    cur: list[int] = []
    total = 0
    for c in np.flatnonzero(count > 0):
        cur.append(int(c))
        total += int(count[c])
        if total >= size:
            out.append(np.array(cur))
            cur, total = [], 0
    if cur:
        out.append(np.array(cur))
    return out


def population_distribution(y: object, *, epsilon_per_step: float, steps: object | None = None,
                            period: int | None = None, grid_size: int = 64,
                            smoothing: bool = True,
                            quantile_levels: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9),
                            max_iter: int = 1000) -> PopulationDistribution:
    """Per-step (or per-phase) distribution of the users' values by SW's EM/EMS.

    All reports of a cell (one step, or all steps of one phase when `period`
    is given) are one EM group; EMS smoothing (binomial (1, 2, 1)/4 after each
    M-step) is on by default, as recommended for SW (Li et al. SIGMOD'20).

    Privacy: post-processing of released ε₀-LDP reports and public
    parameters; costs nothing. Cost: one pass over the reports, then
    O(iterations × cells × grid_size) (reports of a cell with the same grid
    interval are merged), in chunks of cells of about 2·10⁶ reports.

    Args:
        y: (users, steps) reports, NaN where missing.
        epsilon_per_step: the ε₀ of the reports.
        steps: absolute step index of each column (default 0..).
        period: fold the steps by this public period (phases) if given.
        grid_size: B, grid cells on [0, 1] (64).
        smoothing: EMS smoothing.
        quantile_levels: probabilities of the quantiles to report.
        max_iter: EM iteration cap.

    Returns:
        `PopulationDistribution` over the cells that have a report.
    """
    lv = np.asarray(quantile_levels, dtype=np.float64)
    if np.any((lv < 0) | (lv > 1)):
        raise MechanismParameterError("quantile levels must be in [0, 1]")
    arr = _check_reports(y, epsilon_per_step)
    st = _steps_of(arr, steps)
    col_cell = st if period is None else st % _check_period(period)
    cells, col_index = np.unique(col_cell, return_inverse=True)
    per_col = (~np.isnan(arr)).sum(axis=0)
    count = np.bincount(col_index, weights=per_col, minlength=cells.size).astype(np.int64)
    pis = []
    for chunk in _chunks(count, _REPORTS_PER_EM):
        local = np.full(cells.size, -1, dtype=np.int64)
        local[chunk] = np.arange(chunk.size)
        cols = np.flatnonzero(local[col_index] >= 0)
        sub = arr[:, cols]
        present = ~np.isnan(sub)
        gid = np.broadcast_to(local[col_index[cols]], sub.shape)[present]
        fit = sw_em(sub[present], epsilon_per_step=epsilon_per_step, grid_size=grid_size,
                    smoothing=smoothing, max_iter=max_iter, groups=gid)
        pis.append((chunk, fit.pi, fit.grid))
    keep = np.concatenate([c for c, _, _ in pis])
    pi = np.concatenate([x for _, x, _ in pis])
    grid = pis[0][2]
    return PopulationDistribution(
        cells=cells[keep].astype(np.int64), grid=grid, pi=pi, quantile_levels=lv,
        quantiles=grid_quantiles(pi, lv), mean=pi @ grid, reports=count[keep])
