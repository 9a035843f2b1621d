"""How the reconstruction of a continuing stream improves as releases accumulate.

For a sample of the release's streams, CPR is rerun on the reports released
up to each earlier release and up to this one (prefixes of the history of
`tasks.stream_history`), and the report shows, per prefix, how many of the
sampled streams have a significant period, the median period, and how far
each prefix's reconstruction is from the one of the whole history (RMS over
the prefix's steps, normalised units): a convergence figure computed from
released reports only. Post-processing: charges nothing, reads no raw data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from files.staging import run_starts
from mechanisms.reconstruct import cpr_on_steps, longest_run
from tasks.stream_history import history_reports

#: streams of the release whose history is replayed for the report
SAMPLE_STREAMS = 12


def _sample(samples_path: str, n: int) -> list[tuple[str, str]]:
    """The first `n` (user, stream) keys of a release's samples file."""
    pf = pq.ParquetFile(samples_path)
    if pf.metadata.num_row_groups == 0:
        return []
    table = pf.read_row_group(0, columns=["user_id", "stream_id"])
    starts = run_starts(table.column("user_id"), table.column("stream_id"))[:n]
    take = pa.array(starts)
    return list(zip(table.column("user_id").take(take).to_pylist(),
                    table.column("stream_id").take(take).to_pylist(), strict=True))


def _cpr(st: np.ndarray, y: np.ndarray, eps0: float) -> tuple[int | None, np.ndarray | None]:
    if st.size == 0 or np.diff(longest_run(st))[0] < 8:
        return None, None
    res = cpr_on_steps(y, st, epsilon_per_step=eps0)
    periodic = res.diagnostics.get("path") == "periodic"
    return (int(res.period) if periodic else None), np.asarray(res.reconstruction)


def history_progress(samples_path: str, history: list[str], epsilon_per_step: float,
                     releases: list[str], sample: int = SAMPLE_STREAMS) -> list[dict[str, Any]]:
    """One row per history prefix (after each earlier release, then this one).

    Privacy: post-processing of released ε-w-event LDP reports; charges
    nothing. Cost: (len(history) + 1) CPR runs per sampled stream.
    """
    keys = _sample(samples_path, sample)
    paths = list(history) + [samples_path]
    reports = history_reports(paths, sorted({u for u, _ in keys}))
    per_prefix: list[list[tuple[int | None, float | None, int]]] = [[] for _ in paths]
    for user, stream in keys:
        g = reports[(reports["user_id"] == user) & (reports["stream_id"] == stream)]
        g = g.drop_duplicates("step", keep="first")  # the earliest release wins
        st, y, rel = (g["step"].to_numpy(np.int64), g["y"].to_numpy(np.float64),
                      g["release"].to_numpy())
        _, final = _cpr(st, y, epsilon_per_step)
        for k in range(len(paths)):
            sel = rel <= k
            period, rec = _cpr(st[sel], y[sel], epsilon_per_step)
            change = (None if rec is None or final is None else
                      float(np.sqrt(np.mean((rec - final[sel]) ** 2))))
            per_prefix[k].append((period, change, int(sel.sum())))
    rows = []
    for k, items in enumerate(per_prefix):
        periods = [p for p, _, _ in items if p is not None]
        changes = [c for _, c, _ in items if c is not None]
        rows.append({
            "after release": releases[k] if k < len(releases) else "this release",
            "reports per stream (median)": int(np.median([n for _, _, n in items])) if items
            else 0,
            "streams with a significant period": f"{len(periods)} of {len(items)}",
            "median period": int(np.median(periods)) if periods else None,
            "RMS distance to the final reconstruction (median)":
                round(float(np.median(changes)), 4) if changes else None,
        })
    return rows


def progress_columns() -> list[str]:
    """Column order of the report table."""
    return ["after release", "reports per stream (median)", "streams with a significant period",
            "median period", "RMS distance to the final reconstruction (median)"]
