"""Release outputs: merge chunk files, write the manifest.

Merging streams one chunk at a time (uncompressed Arrow IPC files from the
mechanism tasks) into a single zstd Parquet file, so memory stays bounded by
the chunk size, each value is encoded and compressed once, and the bytes
depend only on the rows: a rerun of a release rewrites identical files.

Layout rule (privacy): every output file is cut into row groups of exactly
`ROW_GROUP_ROWS` rows (the last one holds the rest), whatever the chunks the
rows came in. Chunks are cut by a count of users (`tasks.stage`), and a
chunk's rows depend on its users' private sample counts or on which of its
users were rejected; with fixed-size row groups the file's shape (row groups,
their statistics, page boundaries) is a function of the total row count and
the rows themselves, which the release publishes anyway.
"""

from __future__ import annotations

import base64
import contextlib
import json
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from files.safe_files import NewFile, disk_errors, make_dirs
from files.staging import read_arrow

ROW_GROUP_ROWS = 1 << 19
"""Rows per Parquet row group of every release output (the last group holds the rest).

A public constant: row-group boundaries never follow chunks, users or sample
counts, so they reveal nothing beyond the total row count (see the module's
layout rule). 524,288 rows keep a group's buffered columns to tens of MB."""

ENCODERS = 2
"""Threads that encode one chunk's output files at once (`ParquetAppender.add_tables`)."""

WRITE_BATCH_ROWS = 1 << 16
"""Rows the Parquet writer takes at a time (Arrow's default is 1,024).

Arrow computes a dictionary column's statistics batch by batch (the distinct
indices of each batch, then their values' min and max): with 1,024-row
batches that per-batch work was a third of an id column's encoding time.
Pages are cut by their encoded size whatever the batch, so the bytes written
are the same (tests/flows/test_outputs_staging.py pins them): 17 % less
encoding time for a stream release's samples file (benchmarks/results/floor.md)."""


def _is_floating(typ: pa.DataType) -> bool:
    while pa.types.is_list(typ) or pa.types.is_large_list(typ):
        typ = typ.value_type
    return pa.types.is_floating(typ)


def _is_noisy(typ: pa.DataType) -> bool:
    """Floats (noisy values, times) and binary (WKB of noisy points): no dictionary, no stats."""
    return _is_floating(typ) or pa.types.is_binary(typ) or pa.types.is_large_binary(typ)


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with each dictionary-typed field as its value type (a string column)."""
    return pa.schema([pa.field(f.name, f.type.value_type, f.nullable, f.metadata)
                      if pa.types.is_dictionary(f.type) else f for f in schema],
                     metadata=schema.metadata)


def parquet_writer(where: str | Path | BinaryIO, schema: pa.Schema) -> pq.ParquetWriter:
    """The one Parquet writer of release outputs (zstd; each encoding where it pays).

    A dictionary-typed column (ids repeated over many rows,
    `files.staging.repeat_ids_encoded`) is written as its dictionary and
    indices, and the file's Arrow schema names its value type: readers see
    the plain string column, as if it had been written from one (the Parquet
    column is dictionary-encoded UTF-8 either way; tests/flows/test_outputs_staging.py).

    Noisy floats never repeat, so a dictionary page for them is built, found too
    large and thrown away for every row group (most of the encoding time): only
    the non-float columns (ids, basis names, JSON text, small ints) are
    dictionary-encoded and carry min/max statistics. Binary columns (WKB lines
    of noisy coordinates) are treated as floats: neither a dictionary nor
    statistics. Float statistics would show each row group's extreme times
    and values (the grid's span where durations are private, noise
    extremes): they are never written. Flat float columns are
    BYTE_STREAM_SPLIT-encoded (their bytes regrouped by significance before
    zstd: 20% smaller values files, written in 60% of the time, measured on
    2-D curve outputs). The options depend only on the schema, so the bytes
    still depend only on the rows.
    """
    other = [f.name for f in schema if not _is_noisy(f.type)]
    flat = [f.name for f in schema if pa.types.is_floating(f.type)]
    if not any(pa.types.is_dictionary(f.type) for f in schema):
        return pq.ParquetWriter(where, schema, compression="zstd", use_dictionary=other,
                                write_statistics=other, use_byte_stream_split=flat,
                                write_batch_size=WRITE_BATCH_ROWS)
    writer = pq.ParquetWriter(where, schema, compression="zstd", use_dictionary=other,
                              write_statistics=other, use_byte_stream_split=flat,
                              store_schema=False, write_batch_size=WRITE_BATCH_ROWS)
    # what `store_schema=True` stores (Arrow's ARROW:schema key), for the plain schema
    writer.add_key_value_metadata({"ARROW:schema": base64.b64encode(
        plain_schema(schema).serialize().to_pybytes()).decode()})
    return writer


def _first_use(col: pa.ChunkedArray) -> pa.DictionaryArray:
    """A dictionary column as one array: the ids its rows use, in order of first use.

    Rows hold ids in runs (a user's rows are consecutive), so each chunk's runs
    are found on its integer indices and only one id per run is hashed
    (`pc.dictionary_encode` numbers values in order of first occurrence).
    """
    ids, lengths = [], []
    for arr in col.chunks:
        idx = arr.indices.to_numpy(zero_copy_only=False)
        if idx.size == 0:
            continue
        starts = np.flatnonzero(np.concatenate([[True], idx[1:] != idx[:-1]]))
        ids.append(arr.dictionary.take(pa.array(idx[starts], pa.int64())))
        lengths.append(np.diff(np.append(starts, idx.size)))
    if not ids:
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()),
                                              pa.array([], col.type.value_type))
    runs = pc.dictionary_encode(pa.concat_arrays(ids))
    index = np.repeat(runs.indices.to_numpy().astype(np.int32), np.concatenate(lengths))
    return pa.DictionaryArray.from_arrays(pa.array(index, pa.int32()), runs.dictionary)


def _canonical(table: pa.Table) -> pa.Table:
    """`table` in one contiguous chunk per column, its dictionaries rebuilt from its rows.

    The Parquet writer's pages follow the Arrow chunks it is given, and it
    writes an Arrow dictionary as it is (entries no row uses included): both
    would carry the boundaries of the chunks the rows came from. Here each
    dictionary column keeps only the ids its rows use, in order of first use
    (int32 indices, `_first_use`), so the written bytes depend on the rows only.
    """
    columns = []
    for col in table.columns:
        if pa.types.is_dictionary(col.type):
            if col.null_count:
                raise ValueError("a dictionary-encoded id column holds a null")  # ids never do
            columns.append(_first_use(col))
        else:
            columns.append(col.combine_chunks())
    return pa.Table.from_arrays(columns, schema=table.schema)


class RowGroupWriter:
    """A `parquet_writer` that cuts row groups of exactly `ROW_GROUP_ROWS` rows.

    Tables are buffered across `write` calls (at most one row group plus the
    last table), so the row groups do not follow the tables the rows came in:
    the file's bytes depend on its rows only (`_canonical`), and its shape on
    the total row count only.
    """

    def __init__(self, where: str | Path | BinaryIO, schema: pa.Schema):
        self._writer = parquet_writer(where, schema)
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._empty: pa.Table | None = None
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Buffer `table`'s rows; write every full row group they complete."""
        if table.num_rows == 0:
            self._empty = table
            return
        self._buffer.append(table)
        self._buffered += table.num_rows
        self.rows += table.num_rows
        size = ROW_GROUP_ROWS
        if self._buffered < size:
            return
        rows = pa.concat_tables(self._buffer)
        start = 0
        while rows.num_rows - start >= size:
            self._write_group(rows.slice(start, size))
            start += size
        rest = rows.slice(start)
        self._buffer, self._buffered = ([rest] if rest.num_rows else []), rest.num_rows

    def _write_group(self, rows: pa.Table) -> None:
        self._writer.write_table(_canonical(rows), row_group_size=max(rows.num_rows, 1))

    def close(self) -> None:
        """Write the last (partial) row group and the footer."""
        if self._buffered:
            self._write_group(pa.concat_tables(self._buffer))
            self._buffer, self._buffered = [], 0
        elif self.rows == 0 and self._empty is not None:
            self._writer.write_table(self._empty)  # one empty row group, as before any rows
        self._writer.close()

    def abandon(self) -> None:
        """Close the writer without writing what is buffered (the file is discarded)."""
        self._buffer, self._buffered = [], 0
        self._writer.close()


class ParquetAppender:
    """Append chunk files, as they finish and in chunk order, to one Parquet file per output.

    The release flow adds each chunk's outputs while later chunks are still being
    privatized, so encoding and compression (which run outside the GIL) overlap
    the mechanism tasks instead of following them. The files grow under
    `directory` (the release's private staging dir) as new private files
    (`files.safe_files.NewFile`, mode 0600) and only `finish` renames one into
    place; a crashed release leaves nothing half-written among its outputs.
    Row groups hold `ROW_GROUP_ROWS` rows each (`RowGroupWriter`), however the
    rows are split into chunks: the bytes depend only on the rows
    (`tests/flows/test_outputs_staging.py`), so a rerun writes identical files.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._writers: dict[str, tuple[RowGroupWriter, NewFile]] = {}
        self._encoders: ThreadPoolExecutor | None = None

    def add(self, name: str, chunk_path: str, *, remove: bool = True) -> None:
        """Append one chunk file (an Arrow IPC file) to output `name`."""
        self.add_table(name, read_arrow(chunk_path))
        if remove:
            Path(chunk_path).unlink(missing_ok=True)

    def add_table(self, name: str, table: pa.Table) -> None:
        """Append one chunk's table (as a mechanism task returns it) to output `name`."""
        entry = self._entry(name, table.schema)
        with disk_errors(entry[1].path):
            entry[0].write(table)

    def add_tables(self, tables: dict[str, pa.Table]) -> None:
        """`add_table` for each output of one chunk, encoded at once on `ENCODERS` threads.

        Parquet encoding and compression run without the GIL, so a chunk's
        files (a stream chunk's samples and samples_units) are encoded in
        parallel instead of one after the other. Each file still gets its
        tables in call order (one thread per file per call, and the call
        returns only when every file is written), so the bytes are those of
        `add_table` in a loop. The first error is raised once every file's
        write has ended.
        """
        if len(tables) < 2:
            for name, table in tables.items():
                self.add_table(name, table)
            return
        self.wait([self.start(name, table) for name, table in tables.items()])

    def start(self, name: str, table: pa.Table) -> Future[None]:
        """Begin `add_table(name, table)` on an encoder thread; `wait` for it.

        The caller waits for a file's table before it starts that file's next
        one (the tables of a file are appended in call order), and may do other
        work meanwhile (a stream chunk's population sums, which also run
        without the GIL).
        """
        self._entry(name, table.schema)  # created here: the threads only write
        if self._encoders is None:
            self._encoders = ThreadPoolExecutor(ENCODERS, thread_name_prefix="privpipe-encode")
        return self._encoders.submit(self.add_table, name, table)

    @staticmethod
    def wait(futures: list[Future[None]]) -> None:
        """Wait for every write `start` began; then raise the first error, if any."""
        wait(futures)
        for future in futures:
            future.result()

    def _entry(self, name: str, schema: pa.Schema) -> tuple[RowGroupWriter, NewFile]:
        entry = self._writers.get(name)
        if entry is None:
            make_dirs(self.directory)
            new = NewFile(self.directory / f"{name}.parquet")
            entry = (RowGroupWriter(new.file, schema), new)
            self._writers[name] = entry
        return entry

    def __contains__(self, name: str) -> bool:
        return name in self._writers

    def finish(self, name: str, out_path: str | Path) -> int:
        """Close output `name`, rename it to `out_path` (atomically) and return its row count."""
        writer, new = self._writers.pop(name)
        try:
            with disk_errors(new.path):
                writer.close()
        except BaseException:
            new.abort()
            raise
        new.commit(out_path)
        return writer.rows

    def close(self) -> None:
        """Abandon every unfinished output (their temporary files are deleted)."""
        if self._encoders is not None:
            self._encoders.shutdown(wait=True)
            self._encoders = None
        for writer, new in self._writers.values():
            with contextlib.suppress(OSError):  # e.g. a full disk: the file is deleted next
                writer.abandon()
            new.abort()
        self._writers.clear()


def json_bytes(obj: dict[str, Any]) -> bytes:
    """Canonical JSON text of `obj` (sorted keys, indented), so reruns produce the same bytes."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()
