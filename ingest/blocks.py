"""Blocks of whole users, in (user, key, file row) order, from the straight or spilled read."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.plan import _Plan
from ingest.source import OpenedSource
from ingest.spill import _spilled
from ingest.straight import _straight


def _ordered_batches(src: OpenedSource, plan: _Plan, batch_rows: int, spill: bool = True
                     ) -> Iterator[pa.RecordBatch]:
    """The source's converted rows in (user, key, file row) order (see `ingest.pipeline`).

    ``spill=False``: straight from the scan, or `NeedsSpill` (`_straight`);
    ``spill=True``: through the private file (`_spilled`).
    """
    if not spill:
        return _straight(src, plan, batch_rows)
    return _spilled(src, plan, batch_rows)


def _last_user_start(users: pa.Array | pa.ChunkedArray) -> int:
    """Position of the first row of the last user's run (rows are sorted by user)."""
    last = users[len(users) - 1]
    if last.is_valid:
        differ = pc.fill_null(pc.not_equal(users, last), True)
    else:
        differ = pc.is_valid(users)
    diff = np.flatnonzero(differ.to_numpy(zero_copy_only=False))
    return int(diff[-1]) + 1 if diff.size else 0


def _blocks(src: OpenedSource, plan: _Plan, batch_rows: int, spill: bool = True
            ) -> Iterator[pa.Table]:
    """Yield Arrow tables that each hold whole users, in sorted order."""
    reader = _ordered_batches(src, plan, batch_rows, spill)
    pending: list[pa.RecordBatch] = []
    pending_user: object = None
    for batch in reader:
        if batch.num_rows == 0:
            continue
        users = batch.column("_user")
        cut = _last_user_start(users)
        first = users[0].as_py()
        if cut == 0 and (not pending or first == pending_user):
            pending.append(batch)
            pending_user = first
            continue
        if cut == 0:
            yield pa.Table.from_batches(pending)
            pending, pending_user = [batch], first
            continue
        yield pa.Table.from_batches([*pending, batch.slice(0, cut)])
        pending, pending_user = [batch.slice(cut)], users[cut].as_py()
    if pending:
        yield pa.Table.from_batches(pending)

