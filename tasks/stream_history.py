"""What earlier releases of a stream domain already published (post-processing input).

A scheduled stream release continues yesterday's: its reconstruction uses
every report released so far for each (user, stream), not only today's. The
earlier reports are read from the earlier releases' own outputs
(``<out>/<release_id>/samples.parquet``), found through the ledger's release
records: settled releases of the same domain with the same mechanism, ε and
w (so every report has the same Square Wave law), in ledger order. Reading
released outputs is post-processing: it charges nothing and reads no raw data.

A step released by several of them (an overlapping release) is taken from
the earliest; incremental releases publish identical bytes for such steps,
and the reconstruction counts any step whose reports differ.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from ledger.remote import open_ledger

#: parameters that must match for two releases' reports to share one law
_SAME_LAW = ("mechanism", "epsilon", "w", "notion")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def earlier_releases(ledger_path: str, domain: str, parameters: dict[str, Any],
                     out_root: str, release_id: str,
                     skipped: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Settled stream releases of `domain` recorded before `release_id`, same law, oldest first.

    Only releases recorded before this one count, so a rerun of an old
    release reads the history it read the first time (same outputs). A
    release's samples file is used only if it is there and matches the SHA-256
    its manifest (MAC'd in the ledger) records; the others are appended to
    `skipped` with the reason.

    Returns:
        One row per release: ``release_id``, ``samples`` (path) and ``created_at``.
    """
    led = open_ledger(ledger_path)
    out: list[dict[str, Any]] = []
    skipped = [] if skipped is None else skipped
    for row in led.releases():  # in the order the releases were recorded
        rid = row["release_id"]
        if rid == release_id:
            break  # only releases recorded before this one: a rerun sees the same history
        if row["state"] != "settled":
            continue
        rec = led.release(rid) or {}
        man = rec.get("manifest") or {}
        params = man.get("parameters") or {}
        if (man.get("flow") != "release_streams" or man.get("domain") != domain
                or any(str(params.get(k)) != str(parameters.get(k)) for k in _SAME_LAW)):
            continue
        name = (man.get("files") or {}).get("samples", "samples.parquet")
        path = Path(out_root) / rid / name
        if not path.is_file():
            skipped.append({"release_id": rid, "reason": "its samples file is missing"})
        elif _sha256(path) != (man.get("sha256") or {}).get(name):
            skipped.append({"release_id": rid, "reason": "its samples file does not match the "
                            "digest in its manifest (edited or replaced): not used"})
        else:
            out.append({"release_id": rid, "samples": str(path),
                        "created_at": str(row["created_at"])})
    return out


def history_reports(paths: list[str], users: list[str]) -> pd.DataFrame:
    """The reports of `users` in the given samples files, with the file's order.

    Returns:
        ``user_id, stream_id, step, y, release`` (the index of the file in
        `paths`), sorted by user, stream, step and release.
    """
    cols = ["user_id", "stream_id", "step", "y", "release"]
    if not paths or not users:
        return pd.DataFrame({c: [] for c in cols})
    con = duckdb.connect()
    try:
        wanted = sorted(set(users))
        con.register("wanted", pa.table({"user_id": pa.array(wanted, pa.string())}))
        parts = []
        for i, p in enumerate(paths):
            # the range filter lets DuckDB skip row groups of other users (files are
            # sorted by user); the join keeps exactly the wanted ones
            rel = con.read_parquet(p).filter(
                duckdb.ColumnExpression("user_id").between(duckdb.ConstantExpression(wanted[0]),
                                                           duckdb.ConstantExpression(wanted[-1])))
            df = rel.join(con.table("wanted"), "user_id").project(
                "user_id, stream_id, step, y").df()
            df["release"] = i
            parts.append(df)
    finally:
        con.close()
    df = pd.concat(parts, ignore_index=True)
    return df.sort_values(cols[:3] + ["release"], kind="stable").reset_index(drop=True)


def merge_history(steps: np.ndarray, y: np.ndarray, old_steps: np.ndarray,
                  old_y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """All reports of one stream: earlier ones first, then this release's new steps.

    `old_steps` may repeat a step (several earlier releases): the first entry
    wins, and so does the earlier release over this one.

    Returns:
        (steps, reports) sorted by step, and the number of steps whose
        reports differ between releases.
    """
    all_steps = np.concatenate([old_steps, steps]).astype(np.int64)
    all_y = np.concatenate([old_y, y]).astype(np.float64)
    uniq, first = np.unique(all_steps, return_index=True)
    chosen = all_y[first]
    # a step reported twice with different values: count it (legacy re-randomised releases)
    differs = all_y != chosen[np.searchsorted(uniq, all_steps)]
    conflicts = int(np.unique(all_steps[differs]).size)
    return uniq, chosen, conflicts
