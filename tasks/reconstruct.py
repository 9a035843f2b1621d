"""Reconstruction of released streams: CPR over privatized samples only.

Pure post-processing: it reads the release's private output, never raw data,
and costs no budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE

from mechanisms.reconstruct import cpr
from tasks.staging import repeat_ids, run_starts

#: CPR's diagnostics["path"] -> the report's status. Only a significant period is reported.
_STATUS = {
    "periodic": "ok",
    "smoother": "no significant period: shrunk smooth",
    "constant": "no significant period: constant",
}


def reconstruct_samples(samples: pa.Table, epsilon_per_step: float,
                        options: dict[str, Any] | None = None
                        ) -> tuple[list[dict[str, Any]], pa.Table]:
    """Run CPR on every (user, stream) of a chunk's privatized samples table.

    Streams with gaps in their steps are not evenly sampled, so CPR is skipped
    for them and the reason is recorded. Returns one public summary per stream
    (the period, None unless CPR found a significant one, and the path CPR
    took) and the reconstruction table.
    """
    table = samples
    ucol, scol = table.column("user_id"), table.column("stream_id")
    steps = table.column("step").to_numpy()
    y = table.column("y").to_numpy()
    starts = run_starts(ucol, scol)
    bounds = np.append(starts, len(steps)).tolist()
    users = ucol.take(pa.array(starts)).to_pylist()
    streams = scol.take(pa.array(starts)).to_pylist()
    out_u: list[str] = []
    out_s: list[str] = []
    out_n: list[int] = []
    out_step, out_v = [], []
    summaries: list[dict[str, Any]] = []
    for k, (i, j) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        st = steps[i:j]
        summary: dict[str, Any] = {"user_id": users[k], "stream_id": streams[k],
                                   "samples": int(j - i)}
        if j - i < 8 or np.any(np.diff(st) != 1):
            summary.update(period=None, status="skipped: fewer than 8 samples or gaps in steps")
        else:
            res = cpr(y[i:j], epsilon_per_step=epsilon_per_step, **(options or {}))
            path = (res.diagnostics or {}).get("path", "periodic")
            periodic = path == "periodic" and bool(res.period)
            summary.update(period=int(res.period) if periodic else None,
                           status=_STATUS.get(path, path))
            out_u.append(users[k])
            out_s.append(streams[k])
            out_n.append(j - i)
            out_step.append(st)
            out_v.append(np.asarray(res.reconstruction, dtype=np.float64))
        summaries.append(summary)
    return summaries, pa.table({
        "user_id": repeat_ids(out_u, out_n),
        "stream_id": repeat_ids(out_s, out_n),
        "step": pa.array(np.concatenate(out_step) if out_step else np.empty(0, np.int64)),
        "value_hat": pa.array(np.concatenate(out_v) if out_v else np.empty(0)),
    })


reconstruct_streams = task(reconstruct_samples, name="reconstruct-streams", retries=1,
                           persist_result=False, cache_policy=NO_CACHE)
