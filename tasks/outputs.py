"""Release outputs: merge chunk files, write the manifest.

Merging streams one chunk at a time (uncompressed Arrow IPC files from the
mechanism tasks) into a single zstd Parquet file (one row group per chunk), so
memory stays bounded by the chunk size, each value is encoded and compressed
once, and the bytes depend only on the rows: a rerun of a release rewrites
identical files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect import task

from tasks.staging import read_arrow


def merge_parquet(chunk_paths: Sequence[str], out_path: str | Path) -> int:
    """Concatenate chunk files (in the given order) into `out_path`; return the row count."""
    out = Path(out_path)
    tmp = out.with_name(out.name + ".tmp")
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for p in chunk_paths:
            table = read_arrow(p)
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
            writer.write_table(table)
            rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise ValueError("merge_parquet needs at least one chunk file")
    os.replace(tmp, out)
    for p in chunk_paths:
        Path(p).unlink(missing_ok=True)
    return rows


def write_json(obj: dict[str, Any], path: str | Path) -> None:
    """Write canonical JSON (sorted keys) atomically, so reruns produce the same bytes."""
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, out)


merge_outputs = task(merge_parquet, name="merge-outputs", persist_result=False)
