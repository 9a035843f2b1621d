"""Reconstruction of released streams: CPR over privatized samples only.

Pure post-processing: it reads the release's private output, never raw data,
and costs no budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from prefect import task

from mechanisms.reconstruct import cpr
from tasks.staging import group_spans, write_parquet


def reconstruct_samples(samples_path: str, epsilon_per_step: float, out_path: str,
                        options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run CPR on every (user, stream) of a privatized samples file.

    Streams with gaps in their steps are not evenly sampled, so CPR is skipped
    for them and the reason is recorded. Returns one public summary per stream
    (period, whether CPR fell back to a constant).
    """
    table = pq.read_table(samples_path)
    users = table.column("user_id").to_pylist()
    streams = table.column("stream_id").to_pylist()
    steps = table.column("step").to_numpy()
    y = table.column("y").to_numpy()
    out_u, out_s, out_step, out_v = [], [], [], []
    summaries: list[dict[str, Any]] = []
    for i, j in group_spans(users, streams):
        st = steps[i:j]
        summary: dict[str, Any] = {"user_id": users[i], "stream_id": streams[i],
                                   "samples": int(j - i)}
        if j - i < 8 or np.any(np.diff(st) != 1):
            summary.update(period=None, status="skipped: fewer than 8 samples or gaps in steps")
        else:
            res = cpr(y[i:j], epsilon_per_step=epsilon_per_step, **(options or {}))
            diag = res.diagnostics or {}
            fallback = bool(diag.get("fallback_constant", False))
            summary.update(period=int(res.period) if res.period else None,
                           status="constant fallback" if fallback else "ok")
            out_u.extend([users[i]] * (j - i))
            out_s.extend([streams[i]] * (j - i))
            out_step.append(st)
            out_v.append(np.asarray(res.reconstruction, dtype=np.float64))
        summaries.append(summary)
    write_parquet(pa.table({
        "user_id": pa.array(out_u, pa.string()),
        "stream_id": pa.array(out_s, pa.string()),
        "step": pa.array(np.concatenate(out_step) if out_step else np.empty(0, np.int64)),
        "value_hat": pa.array(np.concatenate(out_v) if out_v else np.empty(0)),
    }), Path(out_path))
    return summaries


reconstruct_streams = task(reconstruct_samples, name="reconstruct-streams", retries=1,
                           persist_result=False)
