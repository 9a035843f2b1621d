"""Release outputs: merge chunk files, write the manifest.

Merging streams one chunk at a time (uncompressed Arrow IPC files from the
mechanism tasks) into a single zstd Parquet file (one row group per chunk), so
memory stays bounded by the chunk size, each value is encoded and compressed
once, and the bytes depend only on the rows: a rerun of a release rewrites
identical files.
"""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from files.safe_files import NewFile, disk_errors, make_dirs
from files.staging import read_arrow


def _is_floating(typ: pa.DataType) -> bool:
    while pa.types.is_list(typ) or pa.types.is_large_list(typ):
        typ = typ.value_type
    return pa.types.is_floating(typ)


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
    dictionary-encoded and carry min/max statistics. Flat float columns are
    BYTE_STREAM_SPLIT-encoded (their bytes regrouped by significance before
    zstd: 20% smaller values files, written in 60% of the time, measured on
    2-D curve outputs). The options depend only on the schema, so the bytes
    still depend only on the rows.
    """
    other = [f.name for f in schema if not _is_floating(f.type)]
    flat = [f.name for f in schema if pa.types.is_floating(f.type)]
    if not any(pa.types.is_dictionary(f.type) for f in schema):
        return pq.ParquetWriter(where, schema, compression="zstd", use_dictionary=other,
                                write_statistics=other, use_byte_stream_split=flat)
    writer = pq.ParquetWriter(where, schema, compression="zstd", use_dictionary=other,
                              write_statistics=other, use_byte_stream_split=flat,
                              store_schema=False)
    # what `store_schema=True` stores (Arrow's ARROW:schema key), for the plain schema
    writer.add_key_value_metadata({"ARROW:schema": base64.b64encode(
        plain_schema(schema).serialize().to_pybytes()).decode()})
    return writer


class ParquetAppender:
    """Append chunk files, as they finish and in chunk order, to one Parquet file per output.

    The release flow adds each chunk's outputs while later chunks are still being
    privatized, so encoding and compression (which run outside the GIL) overlap
    the mechanism tasks instead of following them. The files grow under
    `directory` (the release's private staging dir) as new private files
    (`files.safe_files.NewFile`, mode 0600) and only `finish` renames one into
    place; a crashed release leaves nothing half-written among its outputs.
    The bytes are those of one writer over the same chunks (one zstd row group
    per chunk; `tests/flows/test_outputs_staging.py`): a rerun writes identical files.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._writers: dict[str, tuple[pq.ParquetWriter, NewFile]] = {}
        self._rows: dict[str, int] = {}

    def add(self, name: str, chunk_path: str, *, remove: bool = True) -> None:
        """Append one chunk file (an Arrow IPC file) to output `name`."""
        self.add_table(name, read_arrow(chunk_path))
        if remove:
            Path(chunk_path).unlink(missing_ok=True)

    def add_table(self, name: str, table: pa.Table) -> None:
        """Append one chunk's table (as a mechanism task returns it) to output `name`."""
        entry = self._writers.get(name)
        if entry is None:
            make_dirs(self.directory)
            new = NewFile(self.directory / f"{name}.parquet")
            entry = (parquet_writer(new.file, table.schema), new)
            self._writers[name] = entry
            self._rows[name] = 0
        with disk_errors(entry[1].path):
            entry[0].write_table(table)
        self._rows[name] += table.num_rows

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
        return self._rows.pop(name)

    def close(self) -> None:
        """Abandon every unfinished output (their temporary files are deleted)."""
        for writer, new in self._writers.values():
            with contextlib.suppress(OSError):  # e.g. a full disk: the file is deleted next
                writer.close()
            new.abort()
        self._writers.clear()


def json_bytes(obj: dict[str, Any]) -> bytes:
    """Canonical JSON text of `obj` (sorted keys, indented), so reruns produce the same bytes."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()
