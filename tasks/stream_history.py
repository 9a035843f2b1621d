"""What earlier releases of a stream domain already published (post-processing input).

A scheduled stream release continues yesterday's: its reconstruction uses
every report released so far for each (user, stream), not only today's. The
earlier reports are read from the earlier releases' own outputs
(``<out>/<release_id>/samples.parquet``, or the copy the ledger keeps of it
when this run writes to another output root, `ledger.published`), found
through the ledger's release records: settled releases of the same domain
with the same mechanism, ε and w (so every report has the same Square Wave
law), in ledger order. Reading
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
from schemas.errors import PrivpipeError

#: parameters that must match for two releases' reports to share one law
_SAME_LAW = ("mechanism", "epsilon", "w", "notion")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _from_store(led: Any, rid: str, name: str, staging: str | None,
                digest: str | None) -> tuple[str | None, str]:
    """(path, "") of the ledger's checked copy of `rid`'s samples in `staging`, or (None, why)."""
    if staging is None:
        return None, "no private staging to fetch the ledger's copy into"
    dest = Path(staging) / f"history-{rid}-{name}"
    if dest.is_file() and not dest.is_symlink() and _sha256(dest) == digest:
        return str(dest), ""  # fetched earlier in this run and checked again now
    try:
        led.published(rid, name, dest)
    except (PrivpipeError, OSError) as err:
        return None, str(err)
    return str(dest), ""


def earlier_releases(ledger_path: str, domain: str, parameters: dict[str, Any],
                     out_root: str, release_id: str,
                     skipped: list[dict[str, Any]] | None = None,
                     staging: str | None = None) -> list[dict[str, Any]]:
    """Settled stream releases of `domain` recorded before `release_id`, same law, oldest first.

    Only releases recorded before this one count, so a rerun of an old
    release reads the history it read the first time (same outputs). A
    release's samples file is used only if it matches the SHA-256 its
    manifest (MAC'd in the ledger) records: the one under `out_root` when it is
    there and matches, else the ledger's copy (`ledger.published`, fetched into
    the run's private `staging` and checked again); the others are appended
    to `skipped` with the reason.

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
        digest = (man.get("sha256") or {}).get(name)
        path = Path(out_root) / rid / name
        if not path.is_file():
            local = "its samples file is missing under the output root"
        elif _sha256(path) != digest:
            local = ("its samples file does not match the digest in its manifest (edited or "
                     "replaced)")
        else:
            out.append({"release_id": rid, "samples": str(path),
                        "created_at": str(row["created_at"])})
            continue
        found, why = _from_store(led, rid, name, staging, digest)
        if found is None:
            skipped.append({"release_id": rid, "reason": f"{local}, and the ledger's copy "
                            f"cannot be used ({why}): not used"})
        else:
            out.append({"release_id": rid, "samples": found,
                        "created_at": str(row["created_at"])})
    return out


def keep_in_ledger(ledger: Any, release_id: str, rdir: Path,
                   manifest: dict[str, Any]) -> str | None:
    """Keep a published stream release's samples in the ledger's store (`ledger.published`).

    So that a later release with another output root (another host) continues
    it. Nothing else of the release depends on it: the release stays published
    and charged once whatever happens here, and a rerun of the release keeps
    the file then (idempotent by digest).

    Returns:
        None when kept (or nothing to keep), else why it was not.
    """
    name = (manifest.get("files") or {}).get("samples")
    if manifest.get("flow") != "release_streams" or not name:
        return None
    try:
        ledger.put_published(release_id, name, rdir / name)
    except (PrivpipeError, OSError) as err:
        return (f"release {release_id}: its samples were not kept in the ledger's store "
                f"({err}); a release with another output root cannot continue it until a "
                "rerun of this release keeps them")
    return None


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
