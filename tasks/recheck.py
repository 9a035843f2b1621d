"""The local re-execution check of remote chunk results: a worker does not decide the release.

A chunk task that ran on a remote worker (a Dask scheduler address, Ray)
returns its private output tables and costs; a hostile or broken worker could
return anything. Before a remote chunk's result is written or settled, the
flow re-runs the same task function locally on a secret sample of the chunk's
users and compares the rows of those users byte for byte:

- the sample holds ``max(1, ceil(rate * n))`` of the chunk's n users: those
  with the smallest ``HMAC-SHA256(sample key, user_id)``, where the sample key
  is ``HMAC-SHA256(noise key, ["privpipe recheck sample v1", release_id,
  chunk])`` (`sample_key`). The noise key never leaves the flow process, so a
  worker cannot tell which of its users will be checked; a rerun of the release
  checks the same users;
- a user's outputs depend only on that user's data and noise seed (batched
  mechanisms are per-user independent, tests/mechanisms/curves/test_batch.py),
  so the local run of a sub-chunk of the sampled users gives exactly their rows;
- any difference (a table's rows, a cost, an error bound), and any row or cost
  of a user the chunk does not hold, fails the chunk with `RemoteResultMismatch`
  naming the worker: the release is recorded as failed and nothing is published.

Privacy: the check reads only what the flow already holds (the chunk's samples
and seeds) and re-draws the sampled users' noise from their own seeds, so it
reproduces the same outputs and draws no new noise: it costs no budget and
releases nothing. A worker that alters k of a chunk's n users' outputs is
caught with probability at least ``1 - C(n-k, s) / C(n, s)`` for a sample of
s users (e.g. at least s/n for one altered user; 1 when it alters all of them).
Cost: the mechanism's own time for the sampled users, in the flow process.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.keys import recheck_sample_key
from schemas.errors import EXIT_INTEGRITY, ParameterError
from tasks.privatize import ChunkResult, MechanismRunError
from tasks.stage import CurveChunk, StreamChunk

__all__ = ["DEFAULT_RATE", "CheckedFuture", "RemoteResultMismatch", "check_rate", "compare",
           "curve_subchunk", "sample_key", "sample_users", "stream_subchunk", "user_rows"]

DEFAULT_RATE = 0.01
"""The share of each remote chunk's users re-executed locally (at least one user per chunk)."""


class RemoteResultMismatch(MechanismRunError):
    """A remote chunk result differs from its local re-execution (or names foreign users).

    Exit code 4 (integrity). The release is recorded as failed and nothing is
    published; the reservation stays charged until an operator closes the
    release (`privpipe ledger close`) or reruns it on trusted workers.
    """

    exit_code = EXIT_INTEGRITY

    def __init__(self, worker: str, chunk: int, problems: list[str]) -> None:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more"
                                           if len(problems) > 3 else "")
        Exception.__init__(
            self, f"the result of chunk {chunk} from worker {worker} differs from its local "
            f"re-execution ({shown}): the worker is not trusted, nothing is published and "
            "the release is recorded as failed; rerun it with the same release id on "
            "trusted workers, or close it with `privpipe ledger close`")
        self.worker, self.chunk, self.problems = worker, chunk, problems
        self.user_id, self.item_id = "", f"chunk {chunk}"


def check_rate(rate: Any, where: str = "PRIVPIPE_RECHECK_RATE") -> float:
    """`rate` as a float in [0, 1] (0: one user per chunk; 1: every user).

    Raises:
        ParameterError: naming `where`, when `rate` is not a number in [0, 1].
    """
    try:
        value = float(rate)
    except (TypeError, ValueError):
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise ParameterError(f"{where} must be a number in [0, 1] (the share of each remote "
                             f"chunk's users re-executed locally); got {rate!r}")
    return value


def sample_key(noise_key: bytes, release_id: str, chunk: int) -> bytes:
    """The secret key that chooses a chunk's re-executed users (never sent to a worker).

    `ledger.keys.recheck_sample_key`: HMAC-SHA256 of the ledger's noise key over
    ``["privpipe recheck sample v1", release_id, chunk]``. A flow whose ledger is
    served gets the same keys from the service (`Ledger.recheck_keys`).
    """
    return recheck_sample_key(noise_key, release_id, chunk)


def sample_users(key: bytes, users: Sequence[str], rate: float) -> list[str]:
    """The users re-executed: ``max(1, ceil(rate * n))`` of the n distinct `users`.

    Those with the smallest ``HMAC-SHA256(key, user_id)``, listed in their
    order in `users` (empty for no user). Without `key` the choice is
    unpredictable; with it, the same every time.
    """
    distinct = list(dict.fromkeys(users))
    if not distinct:
        return []
    k = max(1, math.ceil(check_rate(rate) * len(distinct)))

    def rank(u: str) -> bytes:
        return hmac.new(key, u.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    chosen = set(sorted(distinct, key=rank)[:k])
    return [u for u in distinct if u in chosen]


def _items_of(user_ids: Sequence[str], offsets: np.ndarray, users: set[str]
              ) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The items of `users`, their sample rows (concatenated) and the new offsets."""
    keep = [i for i, u in enumerate(user_ids) if u in users]
    spans = [np.arange(offsets[i], offsets[i + 1], dtype=np.int64) for i in keep]
    rows = np.concatenate(spans) if spans else np.empty(0, dtype=np.int64)
    new = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum([s.size for s in spans], out=new[1:])
    return keep, rows, new


def curve_subchunk(chunk: CurveChunk, users: Sequence[str]) -> CurveChunk:
    """The part of a curve chunk that holds `users`' curves (in chunk order), with their seeds."""
    want = set(users)
    keep, rows, offsets = _items_of(chunk.user_ids, chunk.offsets, want)
    ids = tuple(chunk.user_ids[i] for i in keep)
    return CurveChunk(chunk.index, ids, tuple(chunk.curve_ids[i] for i in keep), chunk.t[rows],
                      chunk.values[rows], offsets, {u: chunk.seeds[u] for u in dict.fromkeys(ids)})


def stream_subchunk(chunk: StreamChunk, users: Sequence[str]) -> StreamChunk:
    """The part of a stream chunk holding `users`' streams (chunk order), with their segments."""
    want = set(users)
    keep, rows, offsets = _items_of(chunk.user_ids, chunk.offsets, want)
    return StreamChunk(chunk.index, tuple(chunk.user_ids[i] for i in keep),
                       tuple(chunk.stream_ids[i] for i in keep), chunk.steps[rows],
                       chunk.values[rows], offsets, tuple(chunk.segments[i] for i in keep))


def _plain(table: pa.Table) -> pa.Table:
    """`table` with dictionary columns decoded and one chunk per column."""
    cols = []
    for col in table.columns:
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        cols.append(arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr)
    return pa.table(cols, names=table.column_names)


def _id_chunks(table: pa.Table) -> list[pa.Array]:
    col = table.column("user_id")
    return list(col.chunks) if isinstance(col, pa.ChunkedArray) else [col]


def _user_mask(table: pa.Table, users: pa.Array) -> pa.ChunkedArray:
    """Whether each row's ``user_id`` is one of `users` (a dictionary's values tested once)."""
    parts = []
    for arr in _id_chunks(table):
        if pa.types.is_dictionary(arr.type):
            parts.append(pc.take(pc.is_in(arr.dictionary, value_set=users), arr.indices))
        else:
            parts.append(pc.is_in(arr, value_set=users))
    return pa.chunked_array(parts, pa.bool_())


def user_rows(table: pa.Table, users: Sequence[str]) -> pa.Table:
    """The rows of `table` whose ``user_id`` is one of `users`, in table order (plain columns)."""
    return _plain(table.filter(_user_mask(table, pa.array(list(users), pa.string()))))


def _table_bytes(table: pa.Table) -> bytes:
    """The Arrow IPC stream of a plain table: equal bytes iff equal schema and values."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _users_in(table: pa.Table) -> set[str | None]:
    """The distinct user ids of `table` (a dictionary's used values, not one per row)."""
    found: set[str | None] = set()
    for arr in _id_chunks(table):
        if pa.types.is_dictionary(arr.type):
            if arr.null_count:
                found.add(None)
            arr = arr.dictionary.take(pc.unique(arr.indices.drop_null()))
        found.update(pc.unique(arr).to_pylist())
    return found


def _structure(remote: Any, local: ChunkResult, index: int, users: set[str]) -> list[str]:
    """What is wrong with the shape of a remote result, whatever its sampled rows."""
    if not isinstance(remote, ChunkResult):
        return [f"a {type(remote).__name__} instead of a chunk result"]
    problems = [] if remote.index == index else [f"chunk index {remote.index!r}"]
    if not isinstance(remote.tables, dict) or set(remote.tables) != set(local.tables):
        return [*problems, f"tables {sorted(remote.tables or {})} instead of "
                           f"{sorted(local.tables)}"]
    for name, table in remote.tables.items():
        if not isinstance(table, pa.Table) or "user_id" not in table.column_names:
            problems.append(f"table {name!r} is not a table with a user_id column")
        elif foreign := _users_in(table) - users:
            problems.append(f"table {name!r} has rows of {len(foreign)} user(s) not in the chunk")
    if any(c[0] not in users for c in remote.costs):
        problems.append("costs of users not in the chunk")
    return problems


def compare(remote: Any, local: ChunkResult, *, index: int, chunk_users: Sequence[str],
            sample: Sequence[str], per_item: Sequence[bool] | None) -> list[str]:
    """The differences between a remote chunk result and the local run of its sample.

    Args:
        remote: what the worker returned for chunk `index`.
        local: the local run of the sub-chunk of the `sample` users.
        index: the chunk's number.
        chunk_users: the user of each item of the chunk (its payload's order).
        sample: the re-executed users.
        per_item: for each item of the chunk, whether it is a sampled user's, when
            the result's error bounds are listed per item (curves); None when they
            are the chunk's own (streams: one bound for all).

    Returns:
        One line per difference (no values: user ids, table and column names only).
    """
    problems = _structure(remote, local, index, set(chunk_users))
    if problems:
        return problems
    for name, table in local.tables.items():
        mine = _plain(table)
        theirs = user_rows(remote.tables[name], sample)
        if _table_bytes(theirs) != _table_bytes(mine):
            problems.append(f"table {name!r}: the rows of the sampled users "
                            f"{_differing_users(theirs, mine, sample)}")
    picked = set(sample)
    if [c for c in remote.costs if c[0] in picked] != list(local.costs):
        problems.append("the costs of the sampled users")
    for what in ("error_bounds", "rms_bounds"):
        got = list(getattr(remote, what))
        if per_item is None:
            same = got == list(getattr(local, what))
        else:
            same = (len(got) == len(per_item)
                    and [g for g, p in zip(got, per_item, strict=True) if p] == list(
                        getattr(local, what)))
        if not same:
            problems.append(f"the {what.replace('_', ' ')} of the sampled users")
    return problems


def _differing_users(theirs: pa.Table, mine: pa.Table, sample: Sequence[str]) -> str:
    """Which sampled users' rows differ (named), for the error message."""
    bad = [u for u in sample
           if _table_bytes(user_rows(theirs, [u])) != _table_bytes(user_rows(mine, [u]))]
    return "differ for " + ", ".join(repr(u) for u in bad[:3]) if bad else "are in another order"


class CheckedFuture:
    """A remote chunk's future whose result is compared with a local re-execution.

    `result()` takes the remote result, runs `local` on the sampled sub-chunk
    in this process, and returns the remote result only if `compare` finds no
    difference; otherwise it raises `RemoteResultMismatch` naming the worker
    (`worker_of(future)`, as the scheduler saw it).
    """

    def __init__(self, future: Any, *, index: int, chunk_users: Sequence[str],
                 sample: Sequence[str], subchunk: Any, local: Callable[[Any], ChunkResult],
                 per_item: bool, worker_of: Callable[[Any], str]) -> None:
        self._future, self._subchunk, self._local = future, subchunk, local
        self._index, self._users, self._sample = index, tuple(chunk_users), list(sample)
        self._per_item, self._worker_of = per_item, worker_of

    def result(self) -> Any:
        """The remote result, checked (raises `RemoteResultMismatch` on any difference)."""
        remote = self._future.result()
        local = self._local(self._subchunk)
        picked = set(self._sample)
        per_item = [u in picked for u in self._users] if self._per_item else None
        try:
            problems = compare(remote, local, index=self._index, chunk_users=self._users,
                               sample=self._sample, per_item=per_item)
        except Exception as err:  # noqa: BLE001 - any malformed result is a mismatch
            problems = [f"a malformed result ({type(err).__name__})"]
        self._subchunk = None  # checked: the sampled raw data is not kept
        if problems:
            raise RemoteResultMismatch(self._worker_of(self._future), self._index, problems)
        return remote
