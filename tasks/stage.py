"""Ingest task: validate the input once and stage it in chunks of users; chunk payloads.

The staged chunk files are the flow process's own (local, private) files. A
mechanism task never reads them: the flow loads each chunk, keeps only its
admitted users, adds their noise seeds (for streams, one per output segment)
and hands the task a `CurveChunk` or `StreamChunk` of plain arrays, which
the task engine carries to the worker (in memory for threads, pickled over
the wire for processes, Dask or Ray).
So a worker needs no access to the flow's disk, and never sees the ledger,
the noise key or a denied user's data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from prefect import task

import ingest
from files.staging import (
    StagedChunk,
    WriteBehind,
    items_path,
    read_chunk,
    stage_curve_chunk,
    stage_stream_chunk,
)
from ingest import Rejection, UserCurves, UserStreams
from ingest.fingerprint import OrderedInputFingerprint
from schemas.policy import Domain


@dataclass
class StagePlan:
    """The staged input: chunk files, what each user asks for, rejections, fingerprint.

    `steps` maps each user of a curve release to its ledger steps (one
    ``curve:ID`` per curve): what the plan turns into ledger requests. A stream
    release plans its requests against the ledger's watermarks from the staged
    chunks instead (`tasks.continuation`), so `steps` is empty for streams (it
    would cost a few hundred bytes per user for nothing). Nothing here is a
    raw value.
    """

    fingerprint: str
    chunks: list[StagedChunk]
    steps: dict[str, list[tuple[str, str]]]
    rejected: list[dict[str, Any]] = field(default_factory=list)
    users: int = 0
    items: int = 0
    points: int = 0


class TaskPayload:
    """Base of what travels to and from a mechanism task: a plain object, not a dataclass.

    Prefect walks a task's dataclass, tuple and dict arguments and results item
    by item (looking for futures and states), which cost about 13 ms per
    chunk task for a chunk's thousand ids, seeds and costs: more than a fifth
    of the mechanism's own time per chunk. A plain object is handed over as it
    is (in memory, or pickled whole to a worker). Subclasses list their
    attributes in ``__slots__``, in constructor order.
    """

    __slots__: tuple[str, ...] = ()

    def __init__(self, *args: Any) -> None:
        if len(args) != len(self.__slots__):
            raise TypeError(f"{type(self).__name__} takes {len(self.__slots__)} arguments")
        for name, value in zip(self.__slots__, args, strict=True):
            setattr(self, name, value)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            setattr(self, name, value)

    def __repr__(self) -> str:  # no values: a payload holds raw data and seeds
        return f"<{type(self).__name__} {getattr(self, 'index', '?')}>"


class CurveChunk(TaskPayload):
    """The admitted users' curves of one chunk, as flat arrays, with their noise seeds.

    Curves are grouped by user (users in staged order) and sorted by curve id
    within a user, the order in which a user's generator is drawn.

    Attributes:
        index: the chunk's number.
        user_ids: (C,) the user of each curve.
        curve_ids: (C,) each curve's id.
        t: (P,) sample times; values: (P, n) samples; offsets: (C + 1,).
        seeds: user_id -> 256-bit noise seed (secret: from the ledger's key).
    """

    __slots__ = ("index", "user_ids", "curve_ids", "t", "values", "offsets", "seeds")
    index: int
    user_ids: tuple[str, ...]
    curve_ids: tuple[str, ...]
    t: np.ndarray
    values: np.ndarray
    offsets: np.ndarray
    seeds: dict[str, int]


@dataclass(frozen=True)
class SeededSegment:
    """One range of a stream's output with the noise seed that draws it (`tasks.continuation`).

    Attributes:
        first_step: first step of the range; last_step: its last step (inclusive).
        new: True for the range this release charges; False for an earlier
            release's range, redrawn with that release's seed (the same bytes).
        seed: 256-bit noise seed (secret: from the ledger's key, never on disk).
    """

    first_step: int
    last_step: int
    new: bool
    seed: int


class StreamChunk(TaskPayload):
    """The admitted users' streams of one chunk, as flat arrays, with their seeded segments.

    Attributes:
        index: the chunk's number.
        user_ids: (S,) the user of each stream; stream_ids: (S,) each stream's id.
        steps: (P,) int64 absolute steps; values: (P,) values in [0, 1];
        offsets: (S + 1,).
        segments: (S,) each stream's output ranges in step order, each with its seed.
    """

    __slots__ = ("index", "user_ids", "stream_ids", "steps", "values", "offsets", "segments")
    index: int
    user_ids: tuple[str, ...]
    stream_ids: tuple[str, ...]
    steps: np.ndarray
    values: np.ndarray
    offsets: np.ndarray
    segments: tuple[tuple[SeededSegment, ...], ...]


def _admitted_runs(path: str, key: str, admitted: set[str] | frozenset[str]) -> tuple[
        Any, list[str], list[str], np.ndarray]:
    """The staged samples, and per admitted item: user, key, row span (in payload order)."""
    items, table = read_chunk(path, key)
    users, keys, bounds = items.user_ids, items.keys, items.offsets
    keep = [i for i, u in enumerate(users) if u in admitted]
    first_seen: dict[str, int] = {}
    for i in keep:
        first_seen.setdefault(users[i], len(first_seen))
    keep.sort(key=lambda i: (first_seen[users[i]], keys[i]))
    spans = np.array([[bounds[i], bounds[i + 1]] for i in keep], dtype=np.int64).reshape(-1, 2)
    return table, [users[i] for i in keep], [keys[i] for i in keep], spans


def _rows(spans: np.ndarray) -> tuple[np.ndarray | slice, np.ndarray]:
    """Row indices of the spans, concatenated, and their offsets.

    Spans that follow each other (every user of the chunk admitted, the usual
    case) are one slice: the columns are then read without a gather.
    """
    counts = spans[:, 1] - spans[:, 0]
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if counts.size and np.array_equal(spans[1:, 0], spans[:-1, 1]):
        return slice(int(spans[0, 0]), int(spans[-1, 1])), offsets
    rows = np.repeat(spans[:, 0] - offsets[:-1], counts) + np.arange(int(offsets[-1]))
    return rows, offsets


def load_curve_chunk(chunk: StagedChunk, value_columns: tuple[str, ...],
                     seeds: dict[str, int]) -> CurveChunk:
    """The payload of one staged curve chunk for the users in `seeds` (the admitted ones)."""
    table, users, curves, spans = _admitted_runs(chunk.path, "curve_id", seeds.keys())
    rows, offsets = _rows(spans)
    t = table.column("t").to_numpy()[rows]
    values = np.column_stack([table.column(c).to_numpy()[rows] for c in value_columns]
                             ) if offsets[-1] else np.empty((0, len(value_columns)))
    return CurveChunk(chunk.index, tuple(users), tuple(curves), t, values, offsets,
                      {u: seeds[u] for u in dict.fromkeys(users)})


def load_stream_chunk(chunk: StagedChunk,
                      segments: dict[tuple[str, str], tuple[SeededSegment, ...]]) -> StreamChunk:
    """The payload of one staged stream chunk for the admitted users (the users in `segments`).

    `segments` maps (user_id, stream_id) to the stream's seeded output ranges
    (`tasks.continuation.seeded_segments`); every stream of an admitted user
    must have its entry.
    """
    admitted = {u for u, _ in segments}
    table, users, streams, spans = _admitted_runs(chunk.path, "stream_id", admitted)
    rows, offsets = _rows(spans)
    return StreamChunk(chunk.index, tuple(users), tuple(streams),
                       table.column("step").to_numpy()[rows],
                       table.column("value").to_numpy()[rows], offsets,
                       tuple(segments[(u, s)] for u, s in zip(users, streams, strict=True)))


def contiguous_ranges(steps: Any) -> list[tuple[int, int]]:
    """Half-open ranges [a, b) of consecutive integers covering sorted `steps`."""
    arr = np.asarray(steps, dtype=np.int64)
    if arr.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(arr) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [arr.size]])
    return [(int(arr[a]), int(arr[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)]


def _flush(kind: str, buf: list, index: int, staging: Path, domain: Domain) -> StagedChunk:
    path = staging / f"chunk-{index:05d}.arrow"
    if kind == "curves":
        stage_curve_chunk(buf, path, domain.value_columns)
    else:
        stage_stream_chunk(buf, path)
    return StagedChunk(index=index, path=str(path), user_ids=tuple(u.user_id for u in buf),
                       fingerprints=tuple(u.fingerprint for u in buf))


DEFAULT_CHUNK_USERS = 1_000
"""Users per mechanism task when the release does not fix `chunk_users`.

Chunks are cut by a count of users only, never by sample counts, which may be
private (a domain with ``public.points = false``): chunk boundaries then
follow the validated users' ids, which the outputs and manifest publish
anyway. A release whose users have very long curves fixes a smaller
`chunk_users` (a public parameter) to bound a task's memory."""


def stage_input_fn(source: str, domain: Domain, staging: str, *, chunk_users: int | None = None,
                   table: str | None = None) -> StagePlan:
    """Validate `source` for `domain` (one streaming pass) and stage chunks of users.

    The input is read straight when it comes in (user, key) order; at its
    first row out of order the chunks staged so far are deleted and it is read
    again, sorted (`ingest.read_users`): the plan is the sorted read's either way.

    A chunk (one mechanism task) holds `chunk_users` validated users
    (`DEFAULT_CHUNK_USERS` by default): a public rule, so the number of tasks
    and their boundaries reveal no sample count (a task's fixed cost in
    Prefect, tens of ms, is small against a thousand users' mechanism work).
    Chunking changes neither a user's noise (its own generator) nor the rows
    released nor the files' layout (`files.outputs.ROW_GROUP_ROWS`). Rejected
    users are listed with every reason (rule, row, column; never values) and
    get no request, so nothing is charged for them.
    """
    staging_dir = Path(staging)
    staging_dir.mkdir(parents=True, exist_ok=True)
    return ingest.read_users(
        source, domain, lambda users: _stage_users(users, domain, staging_dir, chunk_users),
        table=table)


def _stage_users(users: Iterator[UserCurves | UserStreams | Rejection], domain: Domain,
                 staging_dir: Path, chunk_users: int | None) -> StagePlan:
    """Stage the users of one read; a read that must start over takes its chunk files along."""
    chunks: list[StagedChunk] = []
    try:
        return _stage_into(users, domain, staging_dir, chunk_users, chunks)
    except ingest.NeedsSpill:
        for chunk in chunks:
            Path(chunk.path).unlink(missing_ok=True)
            items_path(chunk.path).unlink(missing_ok=True)
        raise


def _stage_into(users: Iterator[UserCurves | UserStreams | Rejection], domain: Domain,
                staging_dir: Path, chunk_users: int | None,
                chunks: list[StagedChunk]) -> StagePlan:
    """Stage the users in chunks, each written by a thread while the next one fills.

    `chunks` gets each chunk once its files are written (`WriteBehind`: in
    order, and complete when this returns or raises).
    """
    with WriteBehind(chunks) as writes:
        plan = _stage_all(users, domain, staging_dir, chunk_users, writes)
        plan.chunks = writes.finish()
    return plan


def _stage_all(users: Iterator[UserCurves | UserStreams | Rejection], domain: Domain,
               staging_dir: Path, chunk_users: int | None,
               writes: WriteBehind) -> StagePlan:
    """The plan of the users, each full chunk handed to `writes` (the caller adds `chunks`)."""
    fingerprints = OrderedInputFingerprint()  # hashed as users come: none kept
    steps: dict[str, list[tuple[str, str]]] = {}
    rejected: list[dict[str, Any]] = []
    buf: list[UserCurves | UserStreams] = []
    per_chunk = DEFAULT_CHUNK_USERS if chunk_users is None else chunk_users
    n_items = n_points = n_chunks = 0
    for item in users:
        if isinstance(item, Rejection):
            fingerprints.reject(item.user_id)
            rejected.append({
                "user_id": item.user_id,
                "reasons": [p.describe(show_values=False) for p in item.problems],
                "rules": sorted({p.rule for p in item.problems}),
            })
            continue
        fingerprints.add(item.user_id, item.fingerprint)
        if isinstance(item, UserCurves):
            steps[item.user_id] = [(f"curve:{c.curve_id}", "") for c in item.curves]
            n_items += len(item.curves)
            points = sum(len(c.t) for c in item.curves)
        else:
            n_items += len(item.streams)
            points = sum(len(s.steps) for s in item.streams)
        n_points += points
        buf.append(item)
        if len(buf) >= per_chunk:  # a count of users: never a (private) sample count
            writes.submit(_flush, domain.kind, buf, n_chunks, staging_dir, domain)
            buf, n_chunks = [], n_chunks + 1
    if buf:
        writes.submit(_flush, domain.kind, buf, n_chunks, staging_dir, domain)
    # The input's one fingerprint, as `privpipe validate` prints it (ingest/fingerprint.py).
    return StagePlan(fingerprint=fingerprints.hexdigest(), chunks=[], steps=steps,
                     rejected=rejected, users=fingerprints.users,
                     items=n_items, points=n_points)


stage_input = task(stage_input_fn, name="ingest-and-stage", persist_result=False)
