"""SW-aware EM on a grid, pseudo-samples and KDE mode (CPR Sec. II-F, II-G, III-D2).

Spec ``docs/mechanisms.md`` §2.5. All of it is post-processing of Square Wave
reports: it never sees raw data and costs nothing.

The EM runs on G groups (CPR's phases) at once, each with m reports, using the
exact SW likelihood f(y | v) = q + (p − q)·1{|y − v| ≤ b}. Because f takes two
values, Σ_b π_b f(y|v_b) = q·Σπ + (p − q)·(mass of π on the grid points within b
of y), a difference of prefix sums; and the M-step's Σ_j r_jb is a range-add over
the same grid intervals. Reports with the same grid interval are merged with a
count first, so one iteration costs O(G·B) however many reports a group has,
with no G×m×B tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mechanisms.errors import MechanismParameterError
from mechanisms.streams.square_wave import square_wave_params

__all__ = [
    "EMResult",
    "sw_em",
    "em_grid",
    "pseudo_samples",
    "kde_mode",
    "silverman_bandwidth",
    "PSEUDO_SAMPLES",
    "SUPPORT_SLACK",
]

PSEUDO_SAMPLES = ("posterior_mean", "map", "sample")
#: how far outside [−b, 1 + b] a report may lie: released reports are snapped to a
#: 2^-24 grid (tasks/privatize.py), so a report at the edge can round half a grid
#: step beyond it; anything further is not a Square Wave report of this ε₀
SUPPORT_SLACK = 2.0**-20


@dataclass(frozen=True)
class EMResult:
    """EM fit of one discretised input distribution per group.

    Attributes:
        pi: (G, B) fitted probabilities on the grid (rows sum to 1).
        grid: (B,) grid points v_b = (b − ½)/B.
        iterations: (G,) iterations run per group.
        loglik: (G,) final log-likelihood per group.
        converged: (G,) whether a stopping rule (not max_iter) ended the group.
    """

    pi: np.ndarray
    grid: np.ndarray
    iterations: np.ndarray
    loglik: np.ndarray
    converged: np.ndarray


def em_grid(grid_size: int) -> np.ndarray:
    """Grid v_b = (b − ½)/B, b = 1..B, on [0, 1] (spec §2.5).

    Args:
        grid_size: B >= 2.

    Returns:
        (B,) array.
    """
    if isinstance(grid_size, bool) or not isinstance(grid_size, (int, np.integer)):
        raise MechanismParameterError("grid_size must be an integer")
    if grid_size < 2:
        raise MechanismParameterError("grid_size must be >= 2")
    return (np.arange(grid_size) + 0.5) / grid_size


def _as_groups(y: object) -> np.ndarray:
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] < 1 or arr.shape[0] < 1:
        raise MechanismParameterError("reports must be a (groups, m) array with m >= 1")
    if not np.all(np.isfinite(arr)):
        raise MechanismParameterError("reports must be finite")
    return arr


def _indexed_reports(y: object, index: object, name: str,
                     shape_error: str) -> tuple[np.ndarray, np.ndarray]:
    """(reports, index of each): equal non-empty 1-D arrays, integer index >= 0, finite reports."""
    flat = np.asarray(y, dtype=np.float64)
    idx = np.asarray(index)
    if flat.ndim != 1 or flat.size == 0 or idx.shape != flat.shape:
        raise MechanismParameterError(shape_error)
    if not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0:
        raise MechanismParameterError(f"{name} must be integers >= 0")
    if not np.all(np.isfinite(flat)):
        raise MechanismParameterError("reports must be finite")
    return flat, idx


def _flat_groups(y: object, groups: object | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(flat reports, group index of each, number of groups)."""
    if groups is None:
        ys = _as_groups(y)
        g, m = ys.shape
        return ys.ravel(), np.repeat(np.arange(g, dtype=np.int64), m), g
    flat, gid = _indexed_reports(
        y, groups, "groups", "with groups, reports and groups must be equal 1-D arrays")
    g = int(gid.max()) + 1
    if np.bincount(gid, minlength=g).min() == 0:
        raise MechanismParameterError("every group 0..G-1 needs at least one report")
    return flat, gid.astype(np.int64), g


def _intervals(y: np.ndarray, grid: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi) grid index range with |y − v| <= b, for every report."""
    lo = np.searchsorted(grid, y - b, side="left")
    hi = np.searchsorted(grid, y + b, side="right")
    return lo, hi


def _smooth(pi: np.ndarray) -> np.ndarray:
    """EMS binomial (1, 2, 1)/4 smoothing, edge rows renormalised, then normalised."""
    out = np.empty_like(pi)
    out[:, 1:-1] = (pi[:, :-2] + 2 * pi[:, 1:-1] + pi[:, 2:]) / 4
    out[:, 0] = (2 * pi[:, 0] + pi[:, 1]) / 3
    out[:, -1] = (2 * pi[:, -1] + pi[:, -2]) / 3
    return out / out.sum(axis=1, keepdims=True)


def _window_mass(cs: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.take_along_axis(cs, hi, axis=1) - np.take_along_axis(cs, lo, axis=1)


def sw_em(
    y: object,
    *,
    epsilon_per_step: float,
    grid_size: int = 100,
    max_iter: int = 1000,
    tol: float = 1e-6,
    loglik_tol: float = 1e-3,
    smoothing: bool = False,
    groups: object | None = None,
) -> EMResult:
    """Fit a grid distribution of the inputs behind SW reports, per group, by EM.

    E-step r_jb = π_b f(y_j|v_b) / Σ_b' π_b' f(y_j|v_b'); M-step π_b = mean_j r_jb
    (CPR Eq. in Sec. II-F). A group stops when ‖Δπ‖₁ < `tol`, or when its
    log-likelihood gains less than `loglik_tol` (after the first iteration), or
    after `max_iter`; stopped groups are frozen while the others continue.
    Optional EMS smoothing (Li et al. SIGMOD'20) after each M-step.

    Privacy: post-processing of ε₀-LDP reports, no cost. Spec §2.5.

    Args:
        y: (G, m) reports (or (m,) for one group).
        epsilon_per_step: the ε₀ the reports were made with.
        grid_size: B (100).
        max_iter: iteration cap (1000).
        tol: L1 change threshold (1e-6).
        loglik_tol: log-likelihood gain threshold (1e-3).
        smoothing: EMS smoothing.
        groups: for ragged groups (e.g. the users present at each step): `y`
            is then a flat (N,) array of reports and `groups` the (N,) group
            index 0..G−1 of each; every group needs at least one report.

    Returns:
        `EMResult`.
    """
    b, p, q = square_wave_params(epsilon_per_step)
    grid = em_grid(grid_size)
    if int(max_iter) < 1 or not (tol > 0 and loglik_tol > 0):
        raise MechanismParameterError("need max_iter >= 1, tol > 0, loglik_tol > 0")
    flat, gid, g = _flat_groups(y, groups)
    if flat.min() < -b - SUPPORT_SLACK or flat.max() > 1 + b + SUPPORT_SLACK:
        raise MechanismParameterError(
            "reports fall outside [−b, 1 + b]: they were not made with this epsilon_per_step"
        )
    merged = _merge(flat, gid, g, grid, b)
    pi, iters, converged = _em_loop(merged, g, grid.size, p, q, max_iter=int(max_iter), tol=tol,
                                    loglik_tol=loglik_tol, smoothing=smoothing)
    # final log-likelihood at the returned π
    ll = np.bincount(merged.g_u, weights=merged.counts * np.log(_density(pi, merged, p, q)),
                     minlength=g)
    return EMResult(pi=pi, grid=grid, iterations=iters, loglik=ll, converged=converged)


class _Merged(NamedTuple):
    """Reports merged by (group, grid interval [lo, hi)), with their counts."""

    g_u: np.ndarray  # group of each distinct (group, lo, hi)
    idx_lo: np.ndarray  # flat index g·(B + 1) + lo
    idx_hi: np.ndarray  # flat index g·(B + 1) + hi
    counts: np.ndarray  # reports with that (group, lo, hi), as floats
    g: int
    bsz: int


def _merge(flat: np.ndarray, gid: np.ndarray, g: int, grid: np.ndarray, b: float) -> _Merged:
    """Merge the reports that share (group, lo, hi): the likelihood depends on nothing else.

    Exact, and at most ~2B distinct intervals per group, so large groups cost O(B).
    """
    bsz = grid.size
    lo, hi = _intervals(flat, grid, b)
    key = (gid * (bsz + 1) + lo) * (bsz + 1) + hi
    uniq, counts = np.unique(key, return_counts=True)
    hi_u = uniq % (bsz + 1)
    rest = uniq // (bsz + 1)
    lo_u = rest % (bsz + 1)
    g_u = rest // (bsz + 1)
    return _Merged(g_u, g_u * (bsz + 1) + lo_u, g_u * (bsz + 1) + hi_u,
                   counts.astype(np.float64), g, bsz)


def _density(pi_now: np.ndarray, m: _Merged, p: float, q: float) -> np.ndarray:
    """f(y | π) of every merged report: q·Σπ plus (p − q)·π's mass over [lo, hi)."""
    cs = np.concatenate([np.zeros((m.g, 1)), np.cumsum(pi_now, axis=1)], axis=1).ravel()
    total = cs.reshape(m.g, m.bsz + 1)[:, -1]
    return q * total[m.g_u] + (p - q) * (cs[m.idx_hi] - cs[m.idx_lo])


def _em_loop(m: _Merged, g: int, bsz: int, p: float, q: float, *, max_iter: int, tol: float,
             loglik_tol: float, smoothing: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batched EM iterations: (π, iterations, converged) per group."""
    counts, g_u, idx_lo, idx_hi = m.counts, m.g_u, m.idx_lo, m.idx_hi
    pi = np.full((g, bsz), 1.0 / bsz)
    active = np.ones(g, dtype=bool)
    iters = np.zeros(g, dtype=np.int64)
    prev_ll = np.full(g, -np.inf)
    converged = np.zeros(g, dtype=bool)
    size = g * (bsz + 1)
    for it in range(1, max_iter + 1):
        dens = _density(pi, m, p, q)
        wts = counts / dens
        ll_now = np.bincount(g_u, weights=counts * np.log(dens), minlength=g)
        inv_sum = np.bincount(g_u, weights=wts, minlength=g)
        # range-add of count/D over [lo, hi) via a difference array
        diff = np.bincount(idx_lo, weights=wts, minlength=size)
        diff -= np.bincount(idx_hi, weights=wts, minlength=size)
        ranged = np.cumsum(diff.reshape(g, bsz + 1), axis=1)[:, :bsz]
        new = pi * (q * inv_sum[:, None] + (p - q) * ranged)
        new /= new.sum(axis=1, keepdims=True)  # (the M-step's 1/m_g is this normalisation)
        if smoothing:
            new = _smooth(new)
        change = np.abs(new - pi).sum(axis=1)
        pi[active] = new[active]
        iters[active] = it
        gain = ll_now - prev_ll
        stop = (change < tol) | ((it > 1) & (gain < loglik_tol))
        converged |= active & stop
        active &= ~stop
        prev_ll = ll_now
        if not active.any():
            break
    return pi, iters, converged


def pseudo_samples(
    y: object,
    fit: EMResult,
    *,
    epsilon_per_step: float,
    kind: str = "posterior_mean",
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Denoised pseudo-samples D̂_i from an EM fit (spec §2.5, CPR Eq. 9 [PROPOSED]).

    ``"posterior_mean"``: ẑ_j = Σ_b r_jb v_b (default); ``"map"``: the grid point
    maximising r_jb; ``"sample"``: m draws from the fitted π (needs `rng`).
    Post-processing, no privacy cost.

    Args:
        y: (G, m) reports, as given to `sw_em`.
        fit: the `EMResult` of those reports.
        epsilon_per_step: ε₀ of the reports.
        kind: one of `PSEUDO_SAMPLES`.
        rng: generator for ``"sample"``.

    Returns:
        (G, m) pseudo-samples in [0, 1].
    """
    if kind not in PSEUDO_SAMPLES:
        raise MechanismParameterError(f"kind must be one of {PSEUDO_SAMPLES}, got {kind!r}")
    if kind == "sample" and not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("kind='sample' needs rng: a numpy.random.Generator")
    b, p, q = square_wave_params(epsilon_per_step)
    ys = _as_groups(y)
    pi, grid = fit.pi, fit.grid
    g, m = ys.shape
    if pi.shape[0] != g:
        raise MechanismParameterError("the fit has a different number of groups")
    if kind == "sample":
        cs = np.cumsum(pi, axis=1)
        cs[:, -1] = 1.0
        offset = np.arange(g)[:, None]
        flat = (cs + offset).ravel()
        u = rng.random((g, m)) + offset  # type: ignore[union-attr]
        idx = np.searchsorted(flat, u.ravel(), side="right").reshape(g, m) - offset * grid.size
        return grid[np.clip(idx, 0, grid.size - 1)]
    lo, hi = _intervals(ys, grid, b)
    if kind == "posterior_mean":
        cs = np.concatenate([np.zeros((g, 1)), np.cumsum(pi, axis=1)], axis=1)
        csv = np.concatenate([np.zeros((g, 1)), np.cumsum(pi * grid, axis=1)], axis=1)
        dens = q * cs[:, -1:] + (p - q) * _window_mass(cs, lo, hi)
        num = q * csv[:, -1:] + (p - q) * _window_mass(csv, lo, hi)
        return num / dens
    # MAP: argmax_b π_b f(y|v_b), evaluated in bounded chunks of groups
    out = np.empty((g, m))
    chunk = max(1, int(2e7 // max(1, m * grid.size)))
    for s in range(0, g, chunk):
        sl = slice(s, min(g, s + chunk))
        inside = np.abs(ys[sl][:, :, None] - grid[None, None, :]) <= b
        score = pi[sl][:, None, :] * np.where(inside, p, q)
        out[sl] = grid[np.argmax(score, axis=2)]
    return out


def silverman_bandwidth(z: object) -> np.ndarray:
    """Silverman's rule per row: h = 0.9·min(σ̂, IQR/1.349)·m^{−1/5}, floored at 1e−3.

    σ̂ is used alone when the IQR is 0 (spec §2.5, Silverman 1986 [CPR ref 15]).

    Args:
        z: (G, m) samples.

    Returns:
        (G,) bandwidths.
    """
    zs = _as_groups(z)
    m = zs.shape[1]
    sd = zs.std(axis=1, ddof=1) if m > 1 else np.zeros(zs.shape[0])
    q75, q25 = np.percentile(zs, [75, 25], axis=1)
    iqr = (q75 - q25) / 1.349
    spread = np.where(iqr > 0, np.minimum(sd, iqr), sd)
    return np.maximum(0.9 * spread * m ** (-0.2), 1e-3)


def kde_mode(z: object, *, grid_points: int = 512, bandwidth: object = None) -> np.ndarray:
    """Mode of a Gaussian KDE of each row, on a grid of [0, 1] (CPR Sec. II-G).

    f̂(x) = (1/(mh)) Σ_j exp(−(x − z_j)²/(2h²)), maximised over `grid_points`
    equally spaced points of [0, 1] (ties: the smallest x). Rows are reduced to
    their distinct values with counts first, which is exact and fast for the
    posterior-mean pseudo-samples (a few hundred distinct values per row).
    Post-processing, no privacy cost. Spec §2.5.

    Args:
        z: (G, m) samples.
        grid_points: evaluation grid size (512).
        bandwidth: (G,) bandwidths or a scalar; default Silverman per row.

    Returns:
        (G,) modes in [0, 1].
    """
    zs = _as_groups(z)
    if isinstance(grid_points, bool) or int(grid_points) < 2:
        raise MechanismParameterError("grid_points must be an integer >= 2")
    g, m = zs.shape
    h = (
        silverman_bandwidth(zs)
        if bandwidth is None
        else np.broadcast_to(np.asarray(bandwidth, dtype=np.float64), (g,))
    )
    if np.any(~np.isfinite(h)) or np.any(h <= 0):
        raise MechanismParameterError("bandwidths must be finite and > 0")
    xs = np.linspace(0.0, 1.0, int(grid_points))
    srt = np.sort(zs, axis=1)
    new = np.ones((g, m), dtype=bool)
    new[:, 1:] = srt[:, 1:] != srt[:, :-1]
    rows, cols = np.nonzero(new)
    vals = srt[rows, cols]
    # counts of each distinct value: distance to the next distinct value's start
    nxt = np.empty_like(cols)
    nxt[:-1] = cols[1:]
    last = np.ones(cols.size, dtype=bool)
    last[:-1] = rows[1:] != rows[:-1]
    nxt[last] = m
    counts = (nxt - cols).astype(np.float64)
    dens = np.zeros((g, xs.size))
    chunk = max(1, int(4e6 // xs.size))
    for s in range(0, vals.size, chunk):
        sl = slice(s, s + chunk)
        hr = h[rows[sl]][:, None]
        contrib = counts[sl][:, None] * np.exp(-0.5 * ((xs[None, :] - vals[sl][:, None]) / hr) ** 2)
        _accumulate(dens, rows[sl], contrib)
    dens /= m * h[:, None] * math.sqrt(2 * math.pi)
    return xs[np.argmax(dens, axis=1)]


def _accumulate(dens: np.ndarray, rows: np.ndarray, contrib: np.ndarray) -> None:
    """dens[rows] += contrib for sorted `rows` (segment sums, no np.add.at)."""
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    sums = np.add.reduceat(contrib, starts, axis=0)
    dens[rows[starts]] += sums
