"""Staging files: validated input chunks and their noise seeds, on local disk.

Workers get paths, never data: the flow process validates the input once and
writes each chunk of users to a file under ``OUT/.staging/<run>``; a mechanism
task reads its chunk, privatizes it and writes its output chunk. Staging files
are written once and read once on the same machine, so they are uncompressed
Arrow IPC files (no encoding cost, memory-mapped reads); only the merged
release outputs are Parquet. Staging files hold raw (validated) data and
per-user noise seeds, so they are created with mode 0600 and removed when the
release completes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest import Curve, Stream, UserCurves, UserStreams


def _private_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def write_parquet(table: pa.Table, path: Path, *, private: bool = False) -> None:
    """Write `table` deterministically (same rows -> same bytes); atomically via rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_statistics=True)
    data = sink.getvalue().to_pybytes()
    if private:
        _private_write(tmp, data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def write_arrow(table: pa.Table, path: Path, *, private: bool = False) -> None:
    """Write `table` as an uncompressed Arrow IPC file, atomically via rename.

    For files read back once on this machine (staging and chunk outputs): no
    encoding or compression cost, and `read_arrow` maps them without copying.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if private:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp, path)


def read_arrow(path: str | Path) -> pa.Table:
    """Read a file written by `write_arrow` (memory-mapped)."""
    # not closed here: the table's buffers keep the mapping alive until they go
    return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


def repeat_ids(ids: Sequence[str], counts: Sequence[int] | np.ndarray) -> pa.Array:
    """A string column holding ``ids[i]`` ``counts[i]`` times, built in Arrow."""
    index = np.repeat(np.arange(len(ids), dtype=np.int64), np.asarray(counts, dtype=np.int64))
    return pa.array(list(ids), pa.string()).take(pa.array(index))


def run_starts(*columns: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Positions where a run of equal values (over all `columns`) starts (row 0 included)."""
    n = len(columns[0]) if columns else 0
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True
    for col in columns:
        if n > 1:
            differ = pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True)
            start[1:] |= np.asarray(differ.to_numpy(zero_copy_only=False), dtype=bool)
    return np.flatnonzero(start)


def group_spans(first: Sequence[str], second: Sequence[str]) -> list[tuple[int, int]]:
    """Half-open row spans [i, j) of consecutive rows with equal (first, second) keys."""
    starts = run_starts(pa.array(list(first), pa.string()), pa.array(list(second), pa.string()))
    bounds = np.append(starts, len(first)).tolist()
    return list(zip(bounds[:-1], bounds[1:], strict=True))


@dataclass(frozen=True)
class StagedChunk:
    """One chunk of validated users on disk."""

    index: int
    path: str
    user_ids: tuple[str, ...]


def stage_curve_chunk(users: list[UserCurves], path: Path, value_columns: tuple[str, ...]) -> None:
    """Write validated curves of `users` to a private staging file."""
    uid, cid, n_pts, t, vals = [], [], [], [], []
    for u in users:
        for c in u.curves:
            uid.append(u.user_id)
            cid.append(c.curve_id)
            n_pts.append(len(c.t))
            t.append(np.asarray(c.t, dtype=np.float64))
            vals.append(np.asarray(c.values, dtype=np.float64).reshape(len(c.t), -1))
    cols = {
        "user_id": repeat_ids(uid, n_pts),
        "curve_id": repeat_ids(cid, n_pts),
        "t": pa.array(np.concatenate(t) if t else np.empty(0)),
    }
    v = np.concatenate(vals) if vals else np.empty((0, len(value_columns)))
    for j, name in enumerate(value_columns):
        cols[name] = pa.array(v[:, j])
    write_arrow(pa.table(cols), path, private=True)


def read_curve_chunk(path: str | Path, value_columns: Iterable[str]) -> list[UserCurves]:
    """Read a staged curve chunk back into `UserCurves` (fingerprints left empty)."""
    table = read_arrow(path)
    names = list(value_columns)
    ucol, ccol = table.column("user_id"), table.column("curve_id")
    t = table.column("t").to_numpy()
    v = np.column_stack([table.column(c).to_numpy() for c in names]) if len(t) else np.empty(
        (0, len(names)))
    starts = run_starts(ucol, ccol)
    bounds = np.append(starts, len(t)).tolist()
    users = ucol.take(pa.array(starts)).to_pylist()
    curves = ccol.take(pa.array(starts)).to_pylist()
    out: list[UserCurves] = []
    for k, (i, j) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        curve = Curve(curve_id=curves[k], t=t[i:j].copy(), values=v[i:j].copy())
        if out and out[-1].user_id == users[k]:
            out[-1].curves.append(curve)
        else:
            out.append(UserCurves(user_id=users[k], curves=[curve], fingerprint=""))
    return out


def stage_stream_chunk(users: list[UserStreams], path: Path) -> None:
    """Write validated, normalised streams of `users` to a private staging file."""
    uid, sid, n_pts, steps, vals = [], [], [], [], []
    for u in users:
        for s in u.streams:
            uid.append(u.user_id)
            sid.append(s.stream_id)
            n_pts.append(len(s.steps))
            steps.append(np.asarray(s.steps, dtype=np.int64))
            vals.append(np.asarray(s.values, dtype=np.float64))
    table = pa.table({
        "user_id": repeat_ids(uid, n_pts),
        "stream_id": repeat_ids(sid, n_pts),
        "step": pa.array(np.concatenate(steps) if steps else np.empty(0, np.int64)),
        "value": pa.array(np.concatenate(vals) if vals else np.empty(0)),
    })
    write_arrow(table, path, private=True)


def read_stream_chunk(path: str | Path) -> list[UserStreams]:
    """Read a staged stream chunk back into `UserStreams` (fingerprints left empty)."""
    table = read_arrow(path)
    ucol, scol = table.column("user_id"), table.column("stream_id")
    steps = table.column("step").to_numpy()
    vals = table.column("value").to_numpy()
    starts = run_starts(ucol, scol)
    bounds = np.append(starts, len(steps)).tolist()
    users = ucol.take(pa.array(starts)).to_pylist()
    streams = scol.take(pa.array(starts)).to_pylist()
    out: list[UserStreams] = []
    for k, (i, j) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        stream = Stream(stream_id=streams[k], steps=steps[i:j].copy(), values=vals[i:j].copy())
        if out and out[-1].user_id == users[k]:
            out[-1].streams.append(stream)
        else:
            out.append(UserStreams(user_id=users[k], streams=[stream], fingerprint=""))
    return out


def write_seeds(seeds: dict[str, int], path: Path) -> None:
    """Write per-user noise seeds (secret: mode 0600)."""
    _private_write(path, json.dumps({u: str(s) for u, s in seeds.items()}).encode())


def read_seeds(path: str | Path) -> dict[str, int]:
    """Read the per-user noise seeds written by `write_seeds`."""
    return {u: int(s) for u, s in json.loads(Path(path).read_text()).items()}


def remove_staging(directory: Path) -> None:
    """Delete a release's staging directory (raw data and seeds)."""
    shutil.rmtree(directory, ignore_errors=True)
