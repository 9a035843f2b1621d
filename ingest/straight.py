"""The straight read: the scan's batches as they come, with no private copy of the rows.

It holds while the rows come in (user, key) order; at the first batch out of
order, or at the first CSV cell that ends the typed read, it raises
`NeedsSpill`, which tells the caller to read again through the spill file
(`ingest.spill`) and whether that read may still be typed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ingest.plan import _Plan
from ingest.rows import _empty_input, _in_order, _NotTyped, _numbered, _scanned, _typed_scanned
from ingest.source import OpenedSource


class NeedsSpill(Exception):
    """A straight read (``spill=False``) cannot go on; read again with ``spill=True``.

    Raised at the first row out of (user, key) order, or at the first CSV cell
    that ends the typed read (see `ingest.spill._spill`; then `typed_read_ended`),
    before any user of that batch is yielded. What the read yielded so far is not
    what the spilled read promises (all users, in order): the caller discards it.
    """

    def __init__(self, message: str, *, typed_read_ended: bool = False) -> None:
        super().__init__(message)
        self.typed_read_ended = typed_read_ended


def _straight(src: OpenedSource, plan: _Plan, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The scan's batches as they come, each checked to follow (user, key) order.

    No private copy of the rows: `NeedsSpill` at the first batch out of order
    or (typed CSV read) at the first cell that is not a number, before that
    batch is yielded.
    """
    last, rows = None, 0
    typed = plan.typed_sql is not None
    batches = _typed_scanned(src, plan, batch_rows) if typed else _scanned(src, plan, batch_rows)
    try:
        for raw in batches:
            if raw.num_rows == 0:
                continue
            batch = _numbered(src, raw, rows)
            users, keys = batch.column("_user"), batch.column("_key")
            if not _in_order(users, keys, last):
                raise NeedsSpill("the rows are not in (user, key) order")
            last = (users[-1].as_py(), keys[-1].as_py())
            rows += batch.num_rows
            yield batch
    except _NotTyped:
        raise NeedsSpill("a cell ended the typed read", typed_read_ended=True) from None
    if rows == 0:
        raise _empty_input(src)

