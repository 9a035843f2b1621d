"""Population view of many users' Square Wave reports (post-processing only).

From one release's reports of a set of users (all of them, or a chosen group)
this computes what an analyst of the population wants:

- `population_mean`: the per-step mean over users with a confidence band, or
  with a public `period` the per-phase mean (steps folded by the period, e.g.
  48 half-hours: the average daily profile across households);
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
random), pointwise at `confidence` or, with `family_size`, Bonferroni
over a family of cells. Reports are given in long form, one entry per
report with its absolute step (a user missing at a step has no entry), so
any subset of users or steps can be processed, and cells are independent:
splitting the steps (or phases) into chunks gives the same result.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import stats

from mechanisms.errors import MechanismParameterError
from mechanisms.reconstruct.em import (
    SUPPORT_SLACK,
    _em_loop,
    _indexed_reports,
    _Merged,
    em_grid,
    sw_em,
)
from mechanisms.streams.square_wave import (
    square_wave_estimate,
    square_wave_estimate_variance,
    square_wave_params,
)

__all__ = [
    "PopulationMean",
    "PopulationDistribution",
    "population_mean",
    "population_distribution",
    "grid_quantiles",
    "population_mean_from_sums",
    "population_distribution_from_intervals",
    "distribution_mean",
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
        confidence: the band's level (per cell, or for the whole family).
        family_size: the number of cells the band holds for at once
            (Bonferroni), or 1 for a pointwise band.
    """

    cells: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    std_error: np.ndarray
    reports: np.ndarray
    confidence: float
    family_size: int


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


def _check_reports(y: object, steps: object, epsilon_per_step: float,
                   period: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(reports, cell of each report): its step, or its phase step mod `period`."""
    b, _, _ = square_wave_params(epsilon_per_step)
    arr, st = _indexed_reports(
        y, steps, "steps", "reports and steps must be equal non-empty 1-D arrays")
    if arr.min() < -b - SUPPORT_SLACK or arr.max() > 1 + b + SUPPORT_SLACK:
        raise MechanismParameterError(
            "reports fall outside [−b, 1 + b]: they were not made with this epsilon_per_step")
    if period is None:
        return arr, st.astype(np.int64)
    if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
        raise MechanismParameterError(f"period must be a positive integer, got {period!r}")
    return arr, st.astype(np.int64) % int(period)


def _debiased(y: np.ndarray, epsilon_per_step: float) -> tuple[np.ndarray, np.ndarray]:
    """(x̂, unbiased estimate of the variance of each x̂)."""
    xhat = square_wave_estimate(y, epsilon_per_step=epsilon_per_step)
    v0 = float(square_wave_estimate_variance(0.5, epsilon_per_step=epsilon_per_step))
    gamma = 4.0 * (float(square_wave_estimate_variance(0.0, epsilon_per_step=epsilon_per_step))
                   - v0)
    return xhat, (v0 + gamma * (xhat - 0.5) ** 2) / (1.0 + gamma)


def _cells_of(cell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(cell, return_inverse=True)``, without its sort when `cell` is sorted.

    Reports read in step order (the population view's) have sorted steps: the
    distinct cells are then where the value changes, and each report's index
    the count of changes before it. The same arrays as `np.unique`.
    """
    if cell.size and np.all(cell[1:] >= cell[:-1]):
        start = np.empty(cell.size, dtype=bool)
        start[0] = True
        np.not_equal(cell[1:], cell[:-1], out=start[1:])
        return cell[start], np.cumsum(start) - 1
    return np.unique(cell, return_inverse=True)


def population_mean(y: object, *, steps: object, epsilon_per_step: float,
                    period: int | None = None, confidence: float = 0.95,
                    family_size: int | None = None) -> PopulationMean:
    """Per-step (or per-phase) mean of the users' values, with a confidence band.

    Cells are the absolute steps, or with `period` the phases ``step mod
    period`` (e.g. the average daily profile across households); the target
    is the mean of the users' true values over all reports of the cell.

    Privacy: post-processing of released ε₀-LDP Square Wave reports and public
    parameters (ε₀, steps, period); costs nothing. Cost: O(reports).

    Args:
        y: (N,) reports of any users and steps (one entry per report).
        steps: (N,) absolute step of each report.
        epsilon_per_step: the ε₀ of the reports.
        period: fold the steps by this public period (phases) if given.
        confidence: level of the band (0.95).
        family_size: hold the band for this many cells at once (Bonferroni:
            level 1 − (1 − confidence)/family_size per cell); None: pointwise.

    Returns:
        `PopulationMean` over the cells that have a report, in cell order.
    """
    if not 0 < confidence < 1:
        raise MechanismParameterError("confidence must be in (0, 1)")
    fam = 1 if family_size is None else family_size
    if isinstance(fam, bool) or not isinstance(fam, (int, np.integer)) or fam < 1:
        raise MechanismParameterError("family_size must be a positive integer")
    arr, cell = _check_reports(y, steps, epsilon_per_step, period)
    xhat, var = _debiased(arr, epsilon_per_step)
    cells, idx = _cells_of(cell)
    count = np.bincount(idx, minlength=cells.size).astype(np.float64)
    mean = np.bincount(idx, weights=xhat, minlength=cells.size) / count
    se = np.sqrt(np.bincount(idx, weights=var, minlength=cells.size)) / count
    z = float(stats.norm.isf((1.0 - confidence) / (2.0 * int(fam))))
    return PopulationMean(
        cells=cells, mean=mean,
        lower=np.clip(mean - z * se, 0.0, 1.0), upper=np.clip(mean + z * se, 0.0, 1.0),
        std_error=se, reports=count.astype(np.int64), confidence=float(confidence),
        family_size=int(fam))


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


def population_distribution(y: object, *, steps: object, epsilon_per_step: float,
                            period: int | None = None, grid_size: int = 64,
                            smoothing: bool = True,
                            quantile_levels: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9),
                            max_iter: int = 1000) -> PopulationDistribution:
    """Per-step (or per-phase) distribution of the users' values by SW's EM/EMS.

    All reports of a cell (one step, or one phase ``step mod period``) are one
    EM group (`sw_em` with ragged groups); EMS smoothing (binomial
    (1, 2, 1)/4 after each M-step) is on by default, as recommended for SW
    (Li et al. SIGMOD'20, Sec. 5).

    Privacy: post-processing of released ε₀-LDP reports and public
    parameters; costs nothing. Cost: one pass over the reports, then
    O(iterations × cells × grid_size) (reports of a cell that share a grid
    interval are merged first).

    Args:
        y: (N,) reports (one entry per report).
        steps: (N,) absolute step of each report.
        epsilon_per_step: the ε₀ of the reports.
        period: fold the steps by this public period (phases) if given.
        grid_size: B, grid cells on [0, 1] (64).
        smoothing: EMS smoothing.
        quantile_levels: probabilities of the quantiles to report.
        max_iter: EM iteration cap.

    Returns:
        `PopulationDistribution` over the cells that have a report, in cell order.
    """
    lv = np.asarray(quantile_levels, dtype=np.float64)
    if lv.ndim != 1 or np.any((lv < 0) | (lv > 1)):
        raise MechanismParameterError("quantile levels must be in [0, 1]")
    arr, cell = _check_reports(y, steps, epsilon_per_step, period)
    cells, idx = _cells_of(cell)
    fit = sw_em(arr, epsilon_per_step=epsilon_per_step, grid_size=grid_size,
                smoothing=smoothing, max_iter=max_iter, groups=idx)
    return PopulationDistribution(
        cells=cells, grid=fit.grid, pi=fit.pi, quantile_levels=lv,
        quantiles=grid_quantiles(fit.pi, lv), mean=distribution_mean(fit.pi, fit.grid),
        reports=np.bincount(idx, minlength=cells.size).astype(np.int64))


def _sum_constants(epsilon_per_step: float) -> tuple[Fraction, Fraction, Fraction, Fraction]:
    """The floats x̂ and v̂ are made of, as exact rationals: (c₁, c₂, v₀, γ).

    x̂ = (y − c₁)/c₂ with c₁ = q(b + ½), c₂ = 2b(p − q) (`square_wave_estimate`),
    v̂ = (v₀ + γ(x̂ − ½)²)/(1 + γ) (`_debiased`).
    """
    b, p, q = square_wave_params(epsilon_per_step)
    v0 = float(square_wave_estimate_variance(0.5, epsilon_per_step=epsilon_per_step))
    gamma = 4.0 * (float(square_wave_estimate_variance(0.0, epsilon_per_step=epsilon_per_step))
                   - v0)
    return Fraction(q * (b + 0.5)), Fraction(2.0 * b * (p - q)), Fraction(v0), Fraction(gamma)


def population_mean_from_sums(cells: object, reports: object, sum_y: list[Fraction],
                              sum_y2: list[Fraction], *, epsilon_per_step: float,
                              confidence: float = 0.95) -> PopulationMean:
    """`population_mean` from each cell's report count and exact Σy, Σy² (no reports needed).

    The sums of x̂ and of v̂ over a cell are polynomials in Σy and Σy², so a
    single aggregation over the reports (in any order, e.g. DuckDB's on two
    threads) gives the mean and the band. They are evaluated exactly (rational
    arithmetic) and rounded once: the result does not depend on the order of
    the reports, and differs from `population_mean`'s left-to-right float
    sums by their rounding error only (far below the 6 digits published).

    Privacy: post-processing of released ε₀-LDP reports; costs nothing.
    Cost: O(cells).

    Args:
        cells: (C,) the cells (steps or phases), in order.
        reports: (C,) the number of reports of each cell (>= 1).
        sum_y: (C,) exact Σy of each cell's reports.
        sum_y2: (C,) exact Σy² of each cell's reports.
        epsilon_per_step: the ε₀ of the reports.
        confidence: level of the pointwise band (0.95).
    """
    if not 0 < confidence < 1:
        raise MechanismParameterError("confidence must be in (0, 1)")
    c1, c2, v0, gamma = _sum_constants(epsilon_per_step)
    c3 = c1 + c2 / 2  # x̂ − ½ = (y − c₃)/c₂
    n = [int(k) for k in np.asarray(reports)]
    sx = [(s1 - k * c1) / c2 for k, s1 in zip(n, sum_y, strict=True)]
    sv = [(k * v0 + gamma * (s2 - 2 * c3 * s1 + k * c3 * c3) / (c2 * c2)) / (1 + gamma)
          for k, s1, s2 in zip(n, sum_y, sum_y2, strict=True)]
    count = np.asarray(n, dtype=np.float64)
    mean = np.array([float(v) for v in sx], dtype=np.float64) / count
    se = np.sqrt(np.array([float(v) for v in sv], dtype=np.float64)) / count
    z = float(stats.norm.isf((1.0 - confidence) / 2.0))
    return PopulationMean(
        cells=np.asarray(cells, dtype=np.int64), mean=mean,
        lower=np.clip(mean - z * se, 0.0, 1.0), upper=np.clip(mean + z * se, 0.0, 1.0),
        std_error=se, reports=count.astype(np.int64), confidence=float(confidence),
        family_size=1)


def distribution_mean(pi: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each cell's mean Σ_j π_j·g_j, a row sum of its own (the same bits in any batch of cells).

    Not ``pi @ grid``: a BLAS matrix-vector product may add a row's terms in an
    order that depends on the number of rows (and on the machine), so a cell's
    mean would depend on the cells it is batched with.
    """
    return (pi * grid).sum(axis=1)


def population_distribution_from_intervals(
        cells: object, group: object, lo: object, hi: object, counts: object, *,
        epsilon_per_step: float, grid_size: int = 64,
        quantile_levels: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9),
        max_iter: int = 1000) -> PopulationDistribution:
    """`population_distribution` (EMS on) from the reports' counts per (cell, grid interval).

    The EM's likelihood depends on a report only through its cell and its
    grid interval [lo, hi) (`em._merge`), so the counts of reports per
    (cell, lo, hi), from one aggregation in any order, give the same EM
    iterations and the same π, bit for bit, as the reports themselves.

    Privacy: post-processing of released ε₀-LDP reports; costs nothing.
    Cost: O(iterations × cells × grid_size).

    Args:
        cells: (C,) the cells (steps or phases), in order.
        group: (M,) index into `cells` of each (cell, lo, hi); rows sorted by
            (group, lo, hi), no row twice, every cell present.
        lo: (M,) start of the interval: ``searchsorted(grid, y − b, "left")``.
        hi: (M,) its end: ``searchsorted(grid, y + b, "right")``.
        counts: (M,) reports in each (cell, lo, hi).
        epsilon_per_step: the ε₀ of the reports.
        grid_size: B (64).
        quantile_levels: probabilities of the quantiles to report.
        max_iter: EM iteration cap.
    """
    lv = np.asarray(quantile_levels, dtype=np.float64)
    if lv.ndim != 1 or np.any((lv < 0) | (lv > 1)):
        raise MechanismParameterError("quantile levels must be in [0, 1]")
    cl = np.asarray(cells, dtype=np.int64)
    g_u = np.asarray(group, dtype=np.int64)
    bsz, (_, p, q) = int(grid_size), square_wave_params(epsilon_per_step)
    merged = _Merged(g_u, g_u * (bsz + 1) + np.asarray(lo, dtype=np.int64),
                     g_u * (bsz + 1) + np.asarray(hi, dtype=np.int64),
                     np.asarray(counts, dtype=np.float64), cl.size, bsz)
    pi, _, _ = _em_loop(merged, cl.size, bsz, p, q, max_iter=int(max_iter), tol=1e-6,
                        loglik_tol=1e-3, smoothing=True)
    grid = em_grid(bsz)
    return PopulationDistribution(
        cells=cl, grid=grid, pi=pi, quantile_levels=lv, quantiles=grid_quantiles(pi, lv),
        mean=distribution_mean(pi, grid),
        reports=np.bincount(g_u, weights=merged.counts, minlength=cl.size).astype(np.int64))
