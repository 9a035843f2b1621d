"""Reconstruction of released streams: CPR over privatized samples only.

Pure post-processing: it reads the release's private output, never raw data,
and costs no budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE

from files.staging import repeat_ids, run_starts
from mechanisms import registry
from mechanisms.reconstruct import cpr_many
from tasks.stream_history import merge_history

#: CPR's diagnostics["path"] -> the report's status. Only a significant period is reported.
_STATUS = {
    "periodic": "ok",
    "smoother": "no significant period: shrunk smooth",
    "constant": "no significant period: constant",
}


def _summary(res: Any) -> dict[str, Any]:
    """The public summary of one stream's CPR result (None: too few reports)."""
    if res is None:
        return {"period": None, "status": "skipped: fewer than 8 consecutive samples"}
    path = (res.diagnostics or {}).get("path", "periodic")
    periodic = path == "periodic" and bool(res.period)
    gaps = int(res.diagnostics.get("gaps", 0))
    return {"period": int(res.period) if periodic else None,
            "status": _STATUS.get(path, path)
            + (f" (longest gap-free run; {gaps} gaps)" if gaps else "")}


def reconstruct_samples(samples: pa.Table, epsilon_per_step: float,
                        options: dict[str, Any] | None = None,
                        history: pd.DataFrame | None = None, *,
                        mechanism: str = "square_wave"
                        ) -> tuple[list[dict[str, Any]], pa.Table]:
    """Run CPR on every (user, stream) of a chunk's privatized samples and their history.

    `history` holds the reports that earlier releases of the same streams
    published with the same Square Wave law, for this chunk's users
    (`tasks.stream_history.history_reports`, read by the flow: the task gets
    data, never paths, so it runs on any worker): each
    stream is reconstructed from all its reports released so far (earlier
    ones win on a repeated step), and the reconstruction covers that whole
    history. A stream with gaps in its steps (missing days) is reconstructed
    from its longest gap-free run and the template placed by absolute phase
    (`cpr_on_steps`); a stream with fewer than 8 consecutive reports is
    skipped and the reason recorded. Post-processing of released reports only.
    Returns one public summary per stream (the period, None unless CPR found a
    significant one; the path CPR took; how many reports it used) and the
    reconstruction table. CPR reads reports of the Square Wave law: `mechanism`
    (the release's registry entry) must list ``"cpr"`` in its reconstructions.
    """
    registry.stream(mechanism).check_reconstruct("cpr")
    table = samples
    ucol, scol = table.column("user_id"), table.column("stream_id")
    steps = table.column("step").to_numpy()
    y = table.column("y").to_numpy()
    starts = run_starts(ucol, scol)
    bounds = np.append(starts, len(steps)).tolist()
    users = ucol.take(pa.array(starts)).to_pylist()
    streams = scol.take(pa.array(starts)).to_pylist()
    old = history if history is not None else pd.DataFrame(
        {"user_id": [], "stream_id": [], "step": [], "y": []})
    earlier = {key: (g["step"].to_numpy(), g["y"].to_numpy())
               for key, g in old.groupby(["user_id", "stream_id"], sort=False)}
    empty = (np.empty(0, np.int64), np.empty(0))
    out_u: list[str] = []
    out_s: list[str] = []
    out_n: list[int] = []
    out_step, out_v = [], []
    summaries: list[dict[str, Any]] = []
    merged = [merge_history(steps[i:j], y[i:j], *earlier.get((users[k], streams[k]), empty))
              for k, (i, j) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))]
    results = cpr_many([(yy, st) for st, yy, _ in merged], epsilon_per_step=epsilon_per_step,
                       **(options or {}))
    for k, ((st, _, conflicts), res) in enumerate(zip(merged, results, strict=True)):
        n_new = bounds[k + 1] - bounds[k]
        summaries.append({"user_id": users[k], "stream_id": streams[k], "samples": int(n_new),
                          "history_samples": int(st.size - n_new),
                          "conflicting_steps": conflicts, **_summary(res)})
        if res is not None:
            out_u.append(users[k])
            out_s.append(streams[k])
            out_n.append(st.size)
            out_step.append(st)
            out_v.append(np.asarray(res.reconstruction, dtype=np.float64))
    return summaries, pa.table({
        "user_id": repeat_ids(out_u, out_n),
        "stream_id": repeat_ids(out_s, out_n),
        "step": pa.array(np.concatenate(out_step) if out_step else np.empty(0, np.int64)),
        "value_hat": pa.array(np.concatenate(out_v) if out_v else np.empty(0)),
    })


reconstruct_streams = task(reconstruct_samples, name="reconstruct-streams", retries=1,
                           persist_result=False, cache_policy=NO_CACHE)
