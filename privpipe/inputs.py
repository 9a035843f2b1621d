"""A session's data argument as the file the release reads: a path, or a staged Parquet copy.

A pandas DataFrame or a pyarrow Table is written once to a new Parquet file in
the session's private work directory (mode 0600, exclusive create, no symlink
followed: `files.safe_files.NewFile`) and removed when the call returns, however
it ends. The release then reads that file like any other input, so a table goes
through the same validation, conversion and fingerprint as a CSV with the same
values: row N of a problem is the table's N-th row (1-based position).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from files.safe_files import NewFile, private_dir
from schemas.errors import ParameterError, PrivpipeError

DATA_LABEL = "data"
"""How errors name a staged table: the keyword argument it was given as."""


def _arrow(data: Any) -> pa.Table | None:
    """`data` as a pyarrow Table, or None when it is not a table this API reads."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        return None
    if isinstance(data, pd.DataFrame):
        named = any(n is not None for n in data.index.names)  # e.g. user_id as the index
        return pa.Table.from_pandas(data, preserve_index=named)
    return None


def _describe(data: Any) -> str:
    return f"{type(data).__module__.split('.')[0]}.{type(data).__qualname__}"


@contextlib.contextmanager
def input_file(data: Any, work_dir: Path, table: str | None) -> Iterator[str]:
    """Yield the path the release reads for `data`; a staged copy is removed on exit.

    Errors raised inside the block that name the staged file name it ``data``.

    Raises:
        ParameterError: `data` is neither a path nor a table, or `table` is given
            with a table (it names a DuckDB file's table).
    """
    if isinstance(data, (str, os.PathLike)):
        yield str(data)
        return
    arrow = _arrow(data)
    if arrow is None:
        raise ParameterError(
            f"{DATA_LABEL} must be a pandas DataFrame, a pyarrow Table or the path of a CSV, "
            f"Parquet or DuckDB file; got {_describe(data)}")
    if table is not None:
        raise ParameterError("table names the table of a DuckDB file given as data; a "
                             f"{_describe(data)} is read as it is: leave table out")
    staged = private_dir(work_dir / "inputs") / f"data-{uuid.uuid4().hex}.parquet"
    try:
        with NewFile(staged, durable=False) as fh:
            pq.write_table(arrow, fh)
        with _named_data(str(staged)):
            yield str(staged)
    finally:
        staged.unlink(missing_ok=True)


@contextlib.contextmanager
def _named_data(path: str) -> Iterator[None]:
    """Re-raise a privpipe error naming `path` with ``data`` in its place."""
    try:
        yield
    except PrivpipeError as err:
        if err.args and isinstance(err.args[0], str):
            text = err.args[0].replace(repr(path), DATA_LABEL).replace(path, DATA_LABEL)
            err.args = (text, *err.args[1:])
        raise
