"""The source's converted rows in record order: the scan both reads start from.

`_scanned` is the text read of the plan's SELECT, `_typed_scanned` the typed
read of a CSV (ended by `_NotTyped` at the first cell that is not a number);
`_numbered` gives the rows of a CSV their file row numbers as they stream, and
`_in_order` tells whether a batch continues the (user, key) order.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.plan import _file_problem, _Plan
from ingest.source import OpenedSource, csv_error
from schemas.errors import ValidationError


def _in_order(users: pa.Array, keys: pa.Array, last: tuple[str, str] | None) -> bool:
    """Whether rows already come in (user, key) order, after the previous batch's `last`.

    Rows of equal (user, key) keep their file order, which is what the sort
    would give them; a null id (sorted last, and rejected) counts as out of order.
    """
    n = len(users)
    if users.null_count or keys.null_count:
        return False
    if last is not None and (last[0], last[1]) > (users[0].as_py(), keys[0].as_py()):
        return False
    if n < 2:
        return True
    u0, u1 = users.slice(0, n - 1), users.slice(1)
    k0, k1 = keys.slice(0, n - 1), keys.slice(1)
    ok = pc.or_(pc.less(u0, u1), pc.and_(pc.equal(u0, u1), pc.less_equal(k0, k1)))
    return bool(pc.all(ok).as_py())


class _NotTyped(Exception):
    """The typed read of a CSV met a cell that is not a number (or a CSV error)."""


def _typed_scanned(src: OpenedSource, plan: _Plan, batch_rows: int
                   ) -> Iterator[pa.RecordBatch]:
    """The typed read's batches; `_NotTyped` where it cannot stand for the text read."""
    numbers = ["_t_num", *(f"_v{i}" for i in range(len(plan.inputs)))]
    try:
        for batch in _read(src.con.sql(plan.typed_sql).to_arrow_reader(batch_rows)):
            # an empty cell is null in both reads, but the text read keeps a quoted
            # empty field as text ("not a number"): a null leaves the typed read
            if any(batch.column(c).null_count for c in numbers):
                raise _NotTyped
            yield batch
    except (duckdb.Error, OSError) as err:
        raise _NotTyped from err


def _read(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """The batches of a DuckDB Arrow reader, one at a time (its errors pass through)."""
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return


def _numbered(src: OpenedSource, batch: pa.RecordBatch, before: int) -> pa.RecordBatch:
    """The batch with its file row numbers (``_row``, from 1) when the source has none."""
    if src.numbered:
        return batch
    numbers = pa.array(np.arange(before + 1, before + 1 + batch.num_rows, dtype=np.int64))
    return pa.RecordBatch.from_arrays([numbers, *batch.columns],
                                      names=["_row", *batch.schema.names])


def _empty_input(src: OpenedSource) -> ValidationError:
    """The file-level problem of an input with no data rows."""
    return ValidationError(_file_problem(src.label, None, "not empty",
                                         "the input has no data rows"))


def _scanned(src: OpenedSource, plan: _Plan, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The converted rows in scan order; a CSV record DuckDB cannot parse is a file problem.

    DuckDB reports a malformed record when the scan reaches it, as a DuckDB
    error or, through the Arrow stream, as an OSError; only errors of reading
    the source are translated (not those of writing the reader's own file).
    """
    try:
        yield from _read(src.con.sql(plan.sql).to_arrow_reader(batch_rows))
    except (duckdb.Error, OSError) as err:
        if src.numbered:
            raise
        raise csv_error(src.label, err) from None
