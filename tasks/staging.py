"""Staging files: validated input chunks and their noise seeds, on local disk.

Workers get paths, never data: the flow process validates the input once and
writes each chunk of users to a Parquet file under ``OUT/<release_id>/.staging``;
a mechanism task reads its chunk, privatizes it and writes its output chunk.
Staging files hold raw (validated) data and per-user noise seeds, so they are
created with mode 0600 and removed when the release completes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
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


def group_spans(first: list[str], second: list[str]) -> list[tuple[int, int]]:
    """Half-open row spans [i, j) of consecutive rows with equal (first, second) keys."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(first)
    while i < n:
        j = i + 1
        while j < n and first[j] == first[i] and second[j] == second[i]:
            j += 1
        spans.append((i, j))
        i = j
    return spans


@dataclass(frozen=True)
class StagedChunk:
    """One chunk of validated users on disk."""

    index: int
    path: str
    user_ids: tuple[str, ...]


def stage_curve_chunk(users: list[UserCurves], path: Path, value_columns: tuple[str, ...]) -> None:
    """Write validated curves of `users` to a private Parquet file."""
    uid, cid, t, vals = [], [], [], []
    for u in users:
        for c in u.curves:
            n = len(c.t)
            uid.extend([u.user_id] * n)
            cid.extend([c.curve_id] * n)
            t.append(np.asarray(c.t, dtype=np.float64))
            vals.append(np.asarray(c.values, dtype=np.float64).reshape(n, -1))
    cols = {
        "user_id": pa.array(uid, pa.string()),
        "curve_id": pa.array(cid, pa.string()),
        "t": pa.array(np.concatenate(t) if t else np.empty(0)),
    }
    v = np.concatenate(vals) if vals else np.empty((0, len(value_columns)))
    for j, name in enumerate(value_columns):
        cols[name] = pa.array(v[:, j])
    write_parquet(pa.table(cols), path, private=True)


def read_curve_chunk(path: str | Path, value_columns: Iterable[str]) -> list[UserCurves]:
    """Read a staged curve chunk back into `UserCurves` (fingerprints left empty)."""
    table = pq.read_table(path)
    names = list(value_columns)
    users = table.column("user_id").to_pylist()
    curves = table.column("curve_id").to_pylist()
    t = table.column("t").to_numpy()
    v = np.column_stack([table.column(c).to_numpy() for c in names]) if len(t) else np.empty(
        (0, len(names)))
    out: list[UserCurves] = []
    for i, j in group_spans(users, curves):
        curve = Curve(curve_id=curves[i], t=t[i:j].copy(), values=v[i:j].copy())
        if out and out[-1].user_id == users[i]:
            out[-1].curves.append(curve)
        else:
            out.append(UserCurves(user_id=users[i], curves=[curve], fingerprint=""))
    return out


def stage_stream_chunk(users: list[UserStreams], path: Path) -> None:
    """Write validated, normalised streams of `users` to a private Parquet file."""
    uid, sid, steps, vals = [], [], [], []
    for u in users:
        for s in u.streams:
            n = len(s.steps)
            uid.extend([u.user_id] * n)
            sid.extend([s.stream_id] * n)
            steps.append(np.asarray(s.steps, dtype=np.int64))
            vals.append(np.asarray(s.values, dtype=np.float64))
    table = pa.table({
        "user_id": pa.array(uid, pa.string()),
        "stream_id": pa.array(sid, pa.string()),
        "step": pa.array(np.concatenate(steps) if steps else np.empty(0, np.int64)),
        "value": pa.array(np.concatenate(vals) if vals else np.empty(0)),
    })
    write_parquet(table, path, private=True)


def read_stream_chunk(path: str | Path) -> list[UserStreams]:
    """Read a staged stream chunk back into `UserStreams` (fingerprints left empty)."""
    table = pq.read_table(path)
    users = table.column("user_id").to_pylist()
    streams = table.column("stream_id").to_pylist()
    steps = table.column("step").to_numpy()
    vals = table.column("value").to_numpy()
    out: list[UserStreams] = []
    for i, j in group_spans(users, streams):
        stream = Stream(stream_id=streams[i], steps=steps[i:j].copy(), values=vals[i:j].copy())
        if out and out[-1].user_id == users[i]:
            out[-1].streams.append(stream)
        else:
            out.append(UserStreams(user_id=users[i], streams=[stream], fingerprint=""))
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
