"""The spilled read: the scan's rows copied to a private Arrow file, read back in order.

`_spill` writes the rows in record order and says whether they came in
(user, key) order; `_spilled` then reads the file back as written, or sorted
by DuckDB (which spills to disk beyond its memory limit).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ingest.plan import _Plan
from ingest.rows import _empty_input, _in_order, _NotTyped, _numbered, _scanned, _typed_scanned
from ingest.source import OpenedSource


def _spilled(src: OpenedSource, plan: _Plan, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The source's rows through the private file: as written if in order, else sorted."""
    if src.scratch is None:
        raise RuntimeError("internal error (a bug): the source has no scratch directory")
    path = src.scratch / "rows.arrow"
    try:
        if _spill(src, plan, batch_rows, path):
            with pa.OSFile(str(path)) as fh:  # read, not mapped: memory stays one batch
                spilled = pa.ipc.open_file(fh)
                for i in range(spilled.num_record_batches):
                    yield spilled.get_batch(i)
            return
        yield from _sorted_rows(src, path, batch_rows)
    finally:
        path.unlink(missing_ok=True)


def _spill(src: OpenedSource, plan: _Plan, batch_rows: int, path: Path) -> bool:
    """Scan the source once, in record order, into the Arrow file `path`.

    Numbers the rows of a source that has no ``_row`` (CSV) in scan order, and
    returns whether the rows came in (user, key) order. Raises the file-level
    `ValidationError` of an empty input or of a CSV that cannot be parsed.

    A CSV with numbers in its head is first read typed (`_Plan.typed_sql`:
    DuckDB parses the numbers as it reads, half the CPU of text plus casts);
    the first cell that is not a number (or is empty) ends that read, and the
    file is read again as text, so the rows, their problems and their
    fingerprints are those of the text read.
    """
    if plan.typed_sql is not None:
        try:
            return _spill_scan(src, _typed_scanned(src, plan, batch_rows), path)
        except _NotTyped:
            path.unlink(missing_ok=True)
    return _spill_scan(src, _scanned(src, plan, batch_rows), path)


def _spill_scan(src: OpenedSource, batches: Iterator[pa.RecordBatch], path: Path) -> bool:
    """Write `batches` (numbered) to `path`; whether they came in (user, key) order."""
    in_order, last, rows = True, None, 0
    writer = None
    try:
        for raw in batches:
            if raw.num_rows == 0:
                continue
            batch = _numbered(src, raw, rows)
            if writer is None:
                # LZ4 frames: the columns a clean input leaves null (raw text, date/times)
                # and the repeated ids take next to no disk, at a small CPU cost
                writer = pa.ipc.new_file(str(path), batch.schema,
                                         options=pa.ipc.IpcWriteOptions(compression="lz4"))
            writer.write_batch(batch)
            users, keys = batch.column("_user"), batch.column("_key")
            if in_order:
                in_order = _in_order(users, keys, last)
                last = (users[-1].as_py(), keys[-1].as_py())
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if rows == 0:
        raise _empty_input(src)
    return in_order


def _sorted_rows(src: OpenedSource, path: Path, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of the reader's Arrow file sorted by DuckDB (spilling beyond its memory limit)."""
    import pyarrow.dataset as ds

    src.con.register("_rows", ds.dataset(str(path), format="ipc"))
    try:
        yield from src.con.sql("SELECT * FROM _rows ORDER BY _user ASC NULLS LAST, "
                               "_key ASC NULLS LAST, _row ASC").to_arrow_reader(batch_rows)
    finally:
        src.con.unregister("_rows")

