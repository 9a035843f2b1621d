"""Open an input (CSV, Parquet, DuckDB table, or a pandas DataFrame) in DuckDB.

Each source becomes a SQL relation with the input's columns plus ``_row``, the
1-based data row as in the file (header excluded), so that every problem can
name its row after DuckDB has sorted the data:

- CSV (any other suffix, optionally gzip-compressed): in the one strict
  dialect of `ingest.csv_dialect` (commas, double quotes, a header line; no
  sniffing), read as text, streamed in the file's record order (DuckDB preserves
  insertion order); the relation has no ``_row`` (`OpenedSource.numbered` is
  False) and the reader numbers the rows as they stream (`ingest.pipeline`).
  Reading everything as text means one bad cell makes one bad row, not a bad
  column. A quoted field spanning several lines counts as one row. A CSV
  whose first rows hold numbers is first read with its numeric columns
  typed (`OpenedSource.typed_csv`, half the parse cost); the reader goes back
  to the text read at the first cell that is not a number
  (`ingest.pipeline._spill`), so the outcome is always the text read's.
- Parquet (``.parquet``, ``.pq``): ``file_row_number + 1``.
- DuckDB (``.duckdb``, ``.ddb``, ``.db`` with ``table=``): attached read-only;
  ``_row = rowid + 1`` (the table's storage order).
- pandas DataFrame: its position + 1.

DuckDB runs with a memory limit and spills sorts to the temporary directory,
so files larger than memory can be validated; the same private directory
(`OpenedSource.scratch`) holds the reader's converted copy of the rows.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from ingest.csv_dialect import csv_header, csv_problem, csv_relation
from schemas.errors import Problem, ValidationError

if TYPE_CHECKING:
    import pandas as pd

PARQUET_SUFFIXES = (".parquet", ".pq")
DUCKDB_SUFFIXES = (".duckdb", ".ddb", ".db")
NUMERIC_TYPES = (
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL",
)
TEMPORAL_PREFIXES = ("TIMESTAMP", "DATE")


def quote_ident(name: str) -> str:
    """Quote a SQL identifier for DuckDB (any text, including quotes, is safe)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """Quote a SQL string literal for DuckDB."""
    return "'" + text.replace("'", "''") + "'"


def is_numeric_type(t: str) -> bool:
    """True for DuckDB integer, float and decimal types."""
    return t in NUMERIC_TYPES or t.startswith("DECIMAL")


def is_temporal_type(t: str) -> bool:
    """True for DuckDB DATE and TIMESTAMP types (with or without time zone)."""
    return t.startswith(TEMPORAL_PREFIXES)


@dataclass
class OpenedSource:
    """An input opened in a private DuckDB connection.

    Attributes:
        con: the connection (memory-limited; spills to a temporary directory).
        relation: SQL text of a relation with the input's columns (and ``_row``
            when `numbered`), whose scan order is the input's record order.
        columns: the input's columns and their DuckDB types, in file order.
        label: the input's name used in problems (path, or ``path::table``).
        scratch: a private directory (removed with the connection) for the
            reader's own files.
        numbered: whether the relation has ``_row`` (False for CSV: the rows
            are numbered in scan order by the reader).
        csv_path: the file of a CSV source (None otherwise), for `typed_csv`.
    """

    con: duckdb.DuckDBPyConnection
    relation: str
    columns: dict[str, str]
    label: str
    scratch: Path | None = None
    numbered: bool = True
    csv_path: Path | None = None

    def query(self, sql: str) -> list[tuple]:
        """All rows of a query over the source; a CSV record it cannot parse is a problem.

        Raises:
            ValidationError: a malformed CSV record (`csv_error`: line, field count).
        """
        try:
            return self.con.execute(sql).fetchall()
        except (duckdb.Error, OSError) as err:
            if self.numbered:
                raise
            raise csv_error(self.label, err) from None

    def typed_csv(self, types: dict[str, str]) -> str:
        """The CSV read with declared column types (every column named in `types`).

        The same strict dialect as `relation` (`ingest.csv_dialect`); a cell that
        does not parse as its declared type fails the scan (where `relation`, all
        text, would keep it).
        """
        if self.csv_path is None:
            raise RuntimeError("internal error (a bug): typed_csv of a source that is no CSV")
        return csv_relation(self.csv_path, types)


def _file_error(label: str, rule: str, message: str, column: str | None = None) -> ValidationError:
    return ValidationError(Problem(label, None, column, rule, message))


def _is_dataframe(source: object) -> bool:
    """Whether `source` is a pandas DataFrame (one can only exist once pandas is imported).

    So opening a file does not import pandas (`flows.preflight` checks an input
    within the CLI's first second).
    """
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(source, pd.DataFrame)


def source_label(source: object, table: str | None = None) -> str:
    """Human name of a source: its path, ``path::table``, or ``<DataFrame>``."""
    if _is_dataframe(source):
        return "<DataFrame>"
    return f"{source}::{table}" if table else str(source)


@contextmanager
def open_source(
    source: str | Path | pd.DataFrame,
    *,
    table: str | None = None,
    memory_limit: str = "512MB",
    threads: int | None = None,
) -> Iterator[OpenedSource]:
    """Open `source` in a fresh DuckDB connection backed by a private temp directory.

    Args:
        source: a CSV, Parquet or DuckDB file path, or a pandas DataFrame.
        table: the table name inside a DuckDB file (required for DuckDB files).
        memory_limit: DuckDB's memory limit; larger sorts spill to disk.
        threads: DuckDB threads (None: DuckDB's default).

    Yields:
        The opened source; the connection and its temporary files are removed
        on exit.

    Raises:
        ValidationError: missing or unreadable file, missing table (file-level
            problems naming the file and the rule).
    """
    label = source_label(source, table)
    tmp = Path(tempfile.mkdtemp(prefix="privpipe-ingest-"))
    con = duckdb.connect(str(tmp / "ingest.duckdb"))
    try:
        con.execute(f"SET memory_limit = {quote_literal(memory_limit)}")
        con.execute(f"SET temp_directory = {quote_literal(str(tmp / 'spill'))}")
        con.execute("SET preserve_insertion_order = true")
        con.execute("SET enable_progress_bar = false")
        con.execute("SET TimeZone = 'UTC'")
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        relation, numbered = _attach(con, source, table, label)
        try:
            desc = con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()  # noqa: S608
        except duckdb.Error as err:
            raise _file_error(label, "readable",
                              f"cannot read the input: {_first_line(err)}") from None
        if sum(1 for r in desc if r[0] == "_row") > (1 if numbered else 0):
            raise _file_error(label, "reserved column", "the column name _row is reserved", "_row")
        columns = {str(r[0]): str(r[1]) for r in desc if r[0] != "_row"}
        scratch = tmp / "scratch"
        scratch.mkdir(mode=0o700)
        yield OpenedSource(con=con, relation=relation, columns=columns, label=label,
                           scratch=scratch, numbered=numbered,
                           csv_path=None if numbered else Path(str(source)))
    finally:
        con.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def _attach(con: duckdb.DuckDBPyConnection, source: object, table: str | None,
            label: str) -> tuple[str, bool]:
    """The source's relation, and whether it numbers its rows (``_row``)."""
    if _is_dataframe(source):
        if table is not None:
            raise _file_error(label, "table", "table= only applies to DuckDB files")
        if "_row" in source.columns:
            raise _file_error(label, "reserved column", "the column name _row is reserved", "_row")
        df = source.copy(deep=False)
        df.insert(0, "_row", range(1, len(df) + 1))
        con.register("src_df", df)
        return "src_df", True
    path = Path(str(source))
    if not path.exists():
        raise _file_error(label, "exists", "no such file")
    if not path.is_file():
        raise _file_error(label, "exists", "not a regular file")
    name = path.name.lower()
    if name.endswith(DUCKDB_SUFFIXES):
        if not table:
            raise _file_error(label, "table", "a DuckDB input needs --table NAME (table=...)")
        try:
            con.execute(f"ATTACH {quote_literal(str(path))} AS srcdb (READ_ONLY)")
        except duckdb.Error as err:
            raise _file_error(label, "readable",
                              f"not a readable DuckDB file: {_first_line(err)}") from None
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'srcdb' "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = 'srcdb'"
        ).fetchall()]
        if table not in tables:
            known = ", ".join(sorted(tables)) or "(none)"
            raise _file_error(label, "table", f"no table of that name; the file has: {known}")
        # the table name is quoted as an identifier: any text is safe
        return (f"(SELECT rowid + 1 AS _row, * FROM srcdb.main.{quote_ident(table)})",  # noqa: S608
                True)
    if table is not None:
        raise _file_error(label, "table", "table= only applies to DuckDB files")
    if name.endswith(PARQUET_SUFFIXES):
        rel = (f"(SELECT file_row_number + 1 AS _row, * EXCLUDE (file_row_number) "  # noqa: S608
               f"FROM read_parquet({quote_literal(str(path))}, file_row_number = true))")
        try:
            con.execute(f"SELECT * FROM {rel} LIMIT 0")  # noqa: S608
        except duckdb.Error as err:
            raise _file_error(label, "readable",
                              f"not a readable Parquet file: {_first_line(err)}") from None
        return rel, True
    # Streamed, not copied into a table first: the reader scans the file once, in
    # record order (a TEMP table cost more than the parse itself), and numbers the
    # rows as they come. The strict dialect's columns are the header's, all text; a
    # malformed record surfaces when the scan reaches it (`csv_error`), and
    # `check_csv_records` finds it before a release starts.
    return csv_relation(path, dict.fromkeys(csv_header(path, label), "VARCHAR")), False


def csv_error(label: str, err: BaseException) -> ValidationError:
    """The file-level problem of a CSV record DuckDB refused (line, field count, rule)."""
    return csv_problem(label, err)


def check_csv_records(src: OpenedSource) -> int:
    """Parse every record of a CSV source in the strict dialect; its number of data rows.

    One structural pass (about 0.5 GB/s here: no conversion, no validation), so
    a ragged or unterminated record anywhere in the file is found before a
    release starts, with its line. Other sources have no records to check (0).

    Raises:
        ValidationError: the first malformed record (`ingest.csv_dialect.csv_problem`).
    """
    if src.numbered:
        return 0
    return int(src.query(f"SELECT count(*) FROM {src.relation}")[0][0])  # noqa: S608
