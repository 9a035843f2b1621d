"""Staging files: validated input chunks, on the flow machine's local disk.

The flow process validates the input once and writes each chunk of users to a
file under ``OUT/.staging/<run>``; before submitting a chunk's task it reads
the chunk back (`tasks.stage.load_curve_chunk`) and sends the task the admitted
users' arrays and noise seeds in memory, so workers never read these files and
seeds are never written to disk. Staging files are written once and read once
on this machine, so they are uncompressed Arrow IPC files (no encoding cost,
memory-mapped reads); only the release outputs are Parquet. Staging files hold
raw (validated) data, so they are created with mode 0600 (`files.safe_files`)
in the release's locked, 0700 staging directory (`files.staging_dir`), which
is removed when the release ends, however it ends.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from files.safe_files import NewFile, disk_errors
from ingest import Curve, Stream, UserCurves, UserStreams

_T = TypeVar("_T")


def write_arrow(table: pa.Table, path: Path) -> None:
    """Write `table` as an uncompressed Arrow IPC file, mode 0600, atomically via rename.

    For files read back once on this machine (staging and chunk outputs): no
    encoding or compression cost, and `read_arrow` maps them without copying.
    Not fsynced: staging dies with its release. A retried task may write the
    same path again; the rename replaces the old file (or a planted symlink).
    """
    new = NewFile(path, durable=False)
    try:
        with disk_errors(Path(path)), pa.ipc.new_file(new.file, table.schema) as writer:
            writer.write_table(table)
    except BaseException:
        new.abort()
        raise
    new.commit()


def read_arrow(path: str | Path) -> pa.Table:
    """Read a file written by `write_arrow` (memory-mapped)."""
    # not closed here: the table's buffers keep the mapping alive until they go
    return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


def repeat_ids(ids: Sequence[str], counts: Sequence[int] | np.ndarray) -> pa.Array:
    """A string column holding ``ids[i]`` ``counts[i]`` times, built in Arrow."""
    index = np.repeat(np.arange(len(ids), dtype=np.int64), np.asarray(counts, dtype=np.int64))
    return pa.array(list(ids), pa.string()).take(pa.array(index))


def repeat_ids_encoded(ids: Sequence[str], counts: Sequence[int] | np.ndarray
                       ) -> pa.DictionaryArray:
    """`repeat_ids` as a dictionary array: each distinct id once, an int32 index per row.

    Building it makes no string per row (`repeat_ids` makes one per row, which
    costs about 16 ms per 500,000 rows), and the Parquet writer takes its
    dictionary as it is instead of hashing every row again; `files.outputs`
    writes such a column as the plain string column it stands for.
    """
    encoded = pc.dictionary_encode(pa.array(list(ids), pa.string()))
    index = np.repeat(encoded.indices.to_numpy(), np.asarray(counts, dtype=np.int64))
    return pa.DictionaryArray.from_arrays(pa.array(index, pa.int32()), encoded.dictionary)


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
    """One chunk of validated users on disk, with each user's data fingerprint.

    The fingerprints (aligned with `user_ids`) key each user's noise seed to the
    user's own data (`Ledger.noise_seeds`); they are hashes, never raw values.
    """

    index: int
    path: str
    user_ids: tuple[str, ...]
    fingerprints: tuple[str, ...] = ()


def items_path(path: str | Path) -> Path:
    """The item file beside a staged chunk's sample file (``chunk-N.arrow``)."""
    p = Path(path)
    return p.with_name(p.stem + ".items" + p.suffix)


def _write_chunk(ids: list[str], keys: list[str], key: str, counts: list[int],
                 samples: dict[str, pa.Array], path: Path) -> None:
    """One staged chunk: its items (user, key, points) and its samples, in two files.

    The samples file holds only the numeric columns, row after row in item
    order; the item file says whose rows they are. Writing and mapping the
    numbers costs no per-row string (a chunk's ids would be copied once per
    sample, then compared row by row to find the items again).
    """
    write_arrow(pa.table({"user_id": pa.array(ids, pa.string()), key: pa.array(keys, pa.string()),
                          "points": pa.array(counts, pa.int64())}), items_path(path))
    write_arrow(pa.table(samples), path)


@dataclass(frozen=True)
class ChunkItems:
    """The items of a staged chunk, in staged order: user, item id, rows of the samples file."""

    user_ids: list[str]
    keys: list[str]
    offsets: np.ndarray  # (items + 1,): item i is samples rows offsets[i]:offsets[i+1]


def read_chunk(path: str | Path, key: str) -> tuple[ChunkItems, pa.Table]:
    """A staged chunk: its items and its samples table (memory-mapped).

    Raises:
        ValueError: the two files do not describe the same rows (not a chunk
            this release wrote).
    """
    items = read_arrow(items_path(path))
    samples = read_arrow(path)
    counts = items.column("points").to_numpy()
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if int(offsets[-1]) != samples.num_rows or (counts.size and counts.min() < 0):
        raise ValueError(f"staged chunk {str(path)!r}: its items do not cover its samples")
    return ChunkItems(items.column("user_id").to_pylist(), items.column(key).to_pylist(),
                      offsets), samples


def stage_curve_chunk(users: list[UserCurves], path: Path, value_columns: tuple[str, ...]) -> None:
    """Write validated curves of `users` to private staging files (see `_write_chunk`)."""
    uid, cid, n_pts, t, vals = [], [], [], [], []
    for u in users:
        for c in u.curves:
            uid.append(u.user_id)
            cid.append(c.curve_id)
            n_pts.append(len(c.t))
            t.append(np.asarray(c.t, dtype=np.float64))
            vals.append(np.asarray(c.values, dtype=np.float64).reshape(len(c.t), -1))
    cols = {"t": pa.array(np.concatenate(t) if t else np.empty(0))}
    v = np.concatenate(vals) if vals else np.empty((0, len(value_columns)))
    for j, name in enumerate(value_columns):
        cols[name] = pa.array(v[:, j])
    _write_chunk(uid, cid, "curve_id", n_pts, cols, path)


def _by_user(items: ChunkItems, make: Callable[[str, int, int], _T]) -> list[tuple[str, list[_T]]]:
    """Each item as ``make(key, start row, stop row)``, grouped by consecutive user."""
    bounds = items.offsets.tolist()
    groups: list[tuple[str, list[_T]]] = []
    for k, (i, j) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        item = make(items.keys[k], i, j)
        if groups and groups[-1][0] == items.user_ids[k]:
            groups[-1][1].append(item)
        else:
            groups.append((items.user_ids[k], [item]))
    return groups


def read_curve_chunk(path: str | Path, value_columns: Iterable[str]) -> list[UserCurves]:
    """Read a staged curve chunk back into `UserCurves` (fingerprints left empty)."""
    items, table = read_chunk(path, "curve_id")
    names = list(value_columns)
    t = table.column("t").to_numpy()
    v = np.column_stack([table.column(c).to_numpy() for c in names]) if len(t) else np.empty(
        (0, len(names)))
    groups = _by_user(items, lambda key, i, j: Curve(curve_id=key, t=t[i:j].copy(),
                                                     values=v[i:j].copy()))
    return [UserCurves(user_id=u, curves=curves, fingerprint="") for u, curves in groups]


def stage_stream_chunk(users: list[UserStreams], path: Path) -> None:
    """Write validated, normalised streams of `users` to private staging files."""
    uid, sid, n_pts, steps, vals = [], [], [], [], []
    for u in users:
        for s in u.streams:
            uid.append(u.user_id)
            sid.append(s.stream_id)
            n_pts.append(len(s.steps))
            steps.append(np.asarray(s.steps, dtype=np.int64))
            vals.append(np.asarray(s.values, dtype=np.float64))
    _write_chunk(uid, sid, "stream_id", n_pts, {
        "step": pa.array(np.concatenate(steps) if steps else np.empty(0, np.int64)),
        "value": pa.array(np.concatenate(vals) if vals else np.empty(0)),
    }, path)


def read_stream_chunk(path: str | Path) -> list[UserStreams]:
    """Read a staged stream chunk back into `UserStreams` (fingerprints left empty)."""
    items, table = read_chunk(path, "stream_id")
    steps = table.column("step").to_numpy()
    vals = table.column("value").to_numpy()
    groups = _by_user(items, lambda key, i, j: Stream(stream_id=key, steps=steps[i:j].copy(),
                                                      values=vals[i:j].copy()))
    return [UserStreams(user_id=u, streams=streams, fingerprint="") for u, streams in groups]


class WriteBehind:
    """Staging writes on one thread, one behind the caller: chunk k is written while k+1 fills.

    `submit` hands a write (a function and its arguments) to the writer thread
    after waiting for the write before it, whose result it appends to `done`;
    so at most one write runs while the caller goes on, writes run one at a
    time in the order submitted, and `done` holds their results in that order.
    An error of a write is raised, the same object, by the next `submit`, by
    `finish`, or when the ``with`` block ends: in the caller's thread, where
    and as the write would have raised it had the caller made it itself, and
    in preference to an `Exception` the caller raised after submitting it (the
    write came first); a `BaseException` that is not an `Exception` (Ctrl-C)
    is never replaced. The ``with`` block never ends before the last write
    has ended, so no staging file appears after it (a caller may delete those
    in `done` on its way out). Arrow's writes release the GIL: the caller's
    numpy and pyarrow work runs on the other core meanwhile.
    """

    def __init__(self, done: list[_T]) -> None:
        self.done = done
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="privpipe-stage-write")
        self._pending: Future[_T] | None = None

    def _collect(self) -> None:
        """Wait for the write in flight; its result goes to `done` (its error is raised)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self.done.append(pending.result())

    def submit(self, write: Callable[..., _T], *args: object) -> None:
        """Wait for the write before (raising its error), then start ``write(*args)``."""
        self._collect()
        # in a copy of the caller's context (numpy's errstate, Prefect's run context)
        self._pending = self._pool.submit(contextvars.copy_context().run, write, *args)

    def finish(self) -> list[_T]:
        """Wait for the last write (raising its error); `done`, complete."""
        self._collect()
        return self.done

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._collect()
        except Exception as write_error:
            if err is None or isinstance(err, Exception):
                raise write_error from err
        finally:
            self._pool.shutdown(wait=True)
