"""CPR for a stream released at absolute steps that may have gaps (missing days).

Post-processing of ε-w-event LDP Square Wave reports only (no privacy cost):
the step indices are public metadata of the release.

Period detection needs evenly spaced reports, so CPR (`cpr.cpr`) runs on the
longest gap-free run of steps. When it finds a significant period, its
template is placed on every released step by absolute phase (step −
run start + tiling offset, mod T̂), across the gaps: a day that a meter
missed does not shift the phase of the days after it. Otherwise (CPR's
smoother or constant path) the smoother is not carried across gaps: every
step outside the run gets the stream level (the EM mean of the run).
Without gaps this is `cpr.cpr` itself.
"""

from __future__ import annotations

import numpy as np

from mechanisms.errors import MechanismParameterError
from mechanisms.reconstruct.cpr import CPRResult, cpr, pooled_fits

__all__ = ["cpr_on_steps", "cpr_many", "longest_run"]


def longest_run(steps: np.ndarray) -> tuple[int, int]:
    """[start, stop) indices of the longest run of consecutive steps (the first if tied).

    Args:
        steps: increasing integer steps.

    Returns:
        (start, stop) positions into `steps`.
    """
    breaks = np.flatnonzero(np.diff(steps) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [steps.size]])
    k = int(np.argmax(stops - starts))
    return int(starts[k]), int(stops[k])


def cpr_on_steps(y: object, steps: object, *, epsilon_per_step: float,
                 **options: object) -> CPRResult:
    """CPR of one stream's reports at absolute `steps` (gaps allowed).

    Privacy: post-processing of released ε₀-LDP reports and their public
    step indices; costs nothing. Reference: CPR paper Sec. III (run on the
    longest gap-free run); the placement by absolute phase is ours.

    Args:
        y: (n,) reports in step order.
        steps: (n,) strictly increasing absolute steps.
        epsilon_per_step: the ε₀ of the reports.
        **options: options of `cpr.cpr`.

    Returns:
        `CPRResult` whose reconstruction is aligned with `steps`; with gaps,
        the diagnostics add ``gap_free_run`` (first and last step of the run
        CPR ran on) and ``gaps`` (the number of gaps).
    """
    arr = np.asarray(y, dtype=np.float64)
    st = np.asarray(steps)
    if arr.ndim != 1 or st.shape != arr.shape or not np.issubdtype(st.dtype, np.integer):
        raise MechanismParameterError("reports and integer steps must be 1-D of one length")
    if arr.size and np.any(np.diff(st) <= 0):
        raise MechanismParameterError("steps must be strictly increasing")
    if arr.size < 8:
        raise MechanismParameterError("cpr needs at least 8 reports")
    a, b = longest_run(st)
    if a == 0 and b == st.size:
        return cpr(arr, epsilon_per_step=epsilon_per_step, **options)  # type: ignore[arg-type]
    if b - a < 8:
        raise MechanismParameterError("the longest gap-free run has fewer than 8 reports")
    res = cpr(arr[a:b], epsilon_per_step=epsilon_per_step, **options)  # type: ignore[arg-type]
    diag = dict(res.diagnostics)
    diag["gap_free_run"] = [int(st[a]), int(st[b - 1])]
    diag["gaps"] = int(np.sum(np.diff(st) != 1))
    if diag.get("path") == "periodic":
        phase = (st - st[a] + int(diag.get("offset", 0))) % res.period
        rec = res.template[phase]
    else:
        rec = np.full(arr.size, float(diag["level"]))
        rec[a:b] = res.reconstruction
    return CPRResult(res.period, res.template, rec, diag)


_EM_OPTIONS = ("grid_size", "max_iter", "tol", "loglik_tol", "ems_smoothing")


def cpr_many(streams: list[tuple[np.ndarray, np.ndarray]], *, epsilon_per_step: float,
             **options: object) -> list[CPRResult | None]:
    """`cpr_on_steps` for many streams, with their pooled EM fits in one batched EM.

    The pooled fit (the stream level and the detection series) is the part of
    CPR whose cost does not depend on the period; fitting every stream's in
    one `sw_em` call (ragged groups) gives each stream the fit it would get
    alone, at a fraction of the per-stream cost. Post-processing: no privacy
    cost.

    Args:
        streams: (reports, steps) per stream, steps strictly increasing.
        epsilon_per_step: the ε₀ of every report.
        **options: options of `cpr.cpr` (the same for every stream).

    Returns:
        One `CPRResult` per stream, or None for a stream whose longest
        gap-free run has fewer than 8 reports.
    """
    runs = []
    for _, steps in streams:
        st = np.asarray(steps)
        a, b = longest_run(st) if st.size else (0, 0)
        runs.append((a, b) if b - a >= 8 else None)
    usable = [i for i, r in enumerate(runs) if r is not None]
    em = {k: options[k] for k in _EM_OPTIONS if k in options}
    fits = pooled_fits([np.asarray(streams[i][0], dtype=np.float64)[runs[i][0]:runs[i][1]]
                        for i in usable], epsilon_per_step=epsilon_per_step, **em)  # type: ignore[arg-type]
    out: list[CPRResult | None] = [None] * len(streams)
    for i, fit in zip(usable, fits, strict=True):
        y, st = streams[i]
        out[i] = cpr_on_steps(y, st, epsilon_per_step=epsilon_per_step, pooled=fit, **options)
    return out
