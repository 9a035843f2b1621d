"""What a release checks of its input before it starts: file-level problems, stream keys.

`check_input` finds every problem `iter_users` would raise for the whole file
(header, columns, types, a CSV's malformed records, an empty input) without
converting or validating a row; `stream_keys` lists the (user, stream) pairs
of a stream input, so a release can compare them with the ledger's released
ranges (`flows.preflight`) before Prefect starts. Both read the file locally
and never print a value.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.plan import _check_parameters, _file_problem, _plan
from ingest.source import check_csv_records, open_source, quote_ident
from schemas.errors import ValidationError
from schemas.policy import Domain

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["check_input", "stream_keys"]

_MEMORY_LIMIT = "512MB"


def check_input(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    *,
    table: str | None = None,
    input_time_unit: str | None = None,
    memory_limit: str = _MEMORY_LIMIT,
) -> None:
    """Every file-level check of an input, without converting or validating a row.

    What a release checks before Prefect starts (`flows.preflight`): the file
    opens; a CSV's header is one line of distinct names in the strict dialect
    (`ingest.csv_dialect`); every column the domain needs is there with a
    usable type (ids text or integers, values numbers, t numbers or date/times,
    tested on the first block of rows, and a text column with no usable cell
    anywhere is a wrong type); every CSV record has the header's field count
    and closed quotes (one structural pass, about 0.5 GB/s: no conversion);
    and the input has a data row. The same problems `iter_users` raises as
    file-level `ValidationError`; row-level rules (finite values, t
    increasing, ranges) reject users, and are left to the release's read.

    Privacy: reads the input locally; nothing is charged, nothing leaves, and
    problems name lines, columns and rules, never a value.

    Raises:
        ValidationError: the first file-level problem (every missing or
            mistyped column at once).
        ParameterError: invalid arguments.
    """
    _check_parameters(domain, 1, input_time_unit, 1)
    with open_source(source, table=table, memory_limit=memory_limit) as src:
        _plan(src, domain, input_time_unit)
        if src.numbered:  # Parquet, DuckDB, DataFrame: is there a row?
            rows = src.query(f"SELECT count(*) FROM (SELECT 1 FROM {src.relation} "  # noqa: S608
                             "LIMIT 1)")[0][0]
        else:
            rows = check_csv_records(src)
        if not rows:  # the problem `iter_users` raises for it (`ingest.rows._empty_input`)
            raise ValidationError(_file_problem(src.label, None, "not empty",
                                                "the input has no data rows"))


def stream_keys(source: str | Path | pd.DataFrame, *, table: str | None = None,
                batch: int = 200_000) -> Iterator[list[tuple[str, str]]]:
    """The distinct (user_id, stream_id) pairs of a stream input, `batch` at a time.

    Ids are read as the reader reads them (text; integers as their decimal
    text); rows without either id are skipped (the release rejects them).
    Memory: one batch of pairs at a time (DuckDB's distinct spills to disk).

    Raises:
        ValidationError: the file cannot be read (`check_input` finds why).
    """
    q = quote_ident
    with open_source(source, table=table, memory_limit=_MEMORY_LIMIT) as src:
        cur = src.con.execute(
            f"SELECT DISTINCT CAST({q('user_id')} AS VARCHAR), "  # noqa: S608
            f"CAST({q('stream_id')} AS VARCHAR) FROM {src.relation} "
            f"WHERE {q('user_id')} IS NOT NULL AND {q('stream_id')} IS NOT NULL")
        while rows := cur.fetchmany(batch):
            yield [(str(u), str(s)) for u, s in rows]
