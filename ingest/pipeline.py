"""Streaming, validated ingestion: from an input file to per-user curves or streams.

One pass over the input, in bounded memory:

1. DuckDB opens the source (`ingest.source`) and casts each column to what
   the domain needs (numbers; ISO 8601 date/times become microseconds since
   the epoch, UTC unless the text carries an offset) in one scan in record
   order, whose rows are written to a private Arrow file (`_spill`) while the
   reader checks whether they already come in (user_id, curve_id or
   stream_id) order.
2. The rows are read back in (user_id, curve_id or stream_id, file row) order:
   as written when the input was in that order already (one parse of the
   file, no sort), else sorted by DuckDB, spilling to disk if needed. A
   caller that can start over (`read_users`, `scan`, the release's staging)
   first reads straight from the scan with no private file (``spill=False``),
   checking the order batch by batch, and reads again with it only when a
   row comes out of order (`NeedsSpill`). Arrow
   record batches are cut at user boundaries, so a user is never split
   between two batches (a batch holds whole users; a user larger than
   `batch_rows` makes one larger batch).
3. Each batch is converted to the domain's units (time from each curve's start,
   or absolute step indices; lon/lat to metres; stream values normalised by the
   declared range) and validated with the pandera schema of `schemas.samples`.
4. A user with any bad row is rejected as a whole, with every reason; the other
   users are yielded in sorted user-id order.

Sorting by file row within a curve (not by t) is what lets "t strictly
increasing" catch unsorted input with its row numbers; with ``sort = true`` in
the domain, rows of a curve are ordered by t in the batch instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import duckdb
import numpy as np
import pandas as pd
import pandera.errors as pa_errors
import pyarrow as pa
import pyarrow.compute as pc

from ingest.fingerprint import input_fingerprint, user_fingerprint
from ingest.projection import project
from ingest.source import (
    OpenedSource,
    csv_error,
    is_numeric_type,
    is_temporal_type,
    open_source,
    quote_ident,
)
from ingest.types import (
    Curve,
    IngestReport,
    Rejection,
    Stream,
    UserCurves,
    UserStreams,
)
from schemas import samples as S
from schemas.errors import ParameterError, Problem, ValidationError
from schemas.policy import TIME_UNITS, Domain
from schemas.problems import dedupe, message_for, problems_from_schema_errors

#: Units accepted for plain numbers in the time column (``input_time_unit``).
INPUT_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, **TIME_UNITS}
DEFAULT_MEMORY_LIMIT = "512MB"

RULE_REQUIRED = "required"
RULE_NUMBER = "number"
RULE_T_FORMAT = "t format"

_NUMBER, _DATETIME = 1, 2
_MISSING_ROW = -1
#: rows of the input's head that answer the dtype tests of a usable text column
_PLAN_HEAD_ROWS = 2048


@dataclass(frozen=True)
class _Plan:
    domain: Domain
    label: str
    key: str                    # "curve_id" or "stream_id"
    inputs: tuple[str, ...]     # input value columns (lon, lat for projected domains)
    sql: str
    number_factor: float        # plain numbers in t -> domain time units
    # a CSV whose head holds numbers only in t and the value columns: the same rows
    # read with those columns typed DOUBLE (`_spill` falls back to `sql` on any cell
    # that is not a number)
    typed_sql: str | None = None
    # non-empty once pandera's schema and dtype checks passed on an empty batch frame
    schema_checked: list[bool] = field(default_factory=list)


def _check_parameters(domain: Domain, batch_rows: int, input_time_unit: str | None,
                      max_problems: int) -> None:
    if not isinstance(domain, Domain):
        raise ParameterError("domain must be a schemas.policy.Domain")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ParameterError("batch_rows must be an integer >= 1")
    if input_time_unit is not None:
        if input_time_unit not in INPUT_TIME_UNITS:
            raise ParameterError(
                f"input_time_unit must be one of {', '.join(INPUT_TIME_UNITS)} (or None: "
                "plain numbers are already in the domain's time unit)")
        if domain.kind == "streams" and domain.time_unit == "step":
            raise ParameterError(
                "input_time_unit does not apply to a stream domain whose time_unit is "
                "\"step\": t holds integer step indices")
    if isinstance(max_problems, bool) or not isinstance(max_problems, int) or max_problems < 1:
        raise ParameterError("max_problems_per_user must be an integer >= 1")
    if domain.projection == "equirectangular" and domain.ref_lat is None:
        raise ParameterError(
            f"domain {domain.name!r} projects lon/lat without a fixed ref_lat: declare the "
            "public standard parallel in the policy (a data-dependent reference would make "
            "the guarantee's metric depend on the data)")


def _domain_inputs(domain: Domain) -> tuple[str, str, tuple[str, ...]]:
    key = "curve_id" if domain.kind == "curves" else "stream_id"
    inputs = ((domain.lon_column, domain.lat_column) if domain.projection
              else tuple(domain.value_columns))
    return key, "t", inputs


def _file_problem(label: str, column: str | None, rule: str, message: str) -> Problem:
    return Problem(label, None, column, rule, message)


def _plan(src: OpenedSource, domain: Domain, input_time_unit: str | None) -> _Plan:
    label = src.label
    key, t, inputs = _domain_inputs(domain)
    required = ("user_id", key, t, *inputs)
    found = ", ".join(src.columns) or "(none)"
    missing = [c for c in required if c not in src.columns]
    if missing:
        raise ValidationError([
            _file_problem(label, c, "required column",
                          f"column is missing; domain {domain.name!r} ({domain.kind}) needs "
                          f"{', '.join(required)}; the input has {found}")
            for c in missing])
    problems: list[Problem] = []
    # A column with no value at all (a DataFrame column of None: DuckDB type NULL)
    # is no wrong type: each of its cells is missing, a row problem ("required").
    types = {c: ("VARCHAR" if ty in ('"NULL"', "NULL") else ty) for c, ty in src.columns.items()}
    for c in ("user_id", key):
        ty = types[c]
        if not (ty == "VARCHAR" or is_numeric_type(ty)):
            problems.append(_file_problem(label, c, "dtype",
                                          f"an id column must hold text or integers, not {ty}"))
    for c in inputs:
        ty = types[c]
        if not (ty == "VARCHAR" or is_numeric_type(ty)):
            problems.append(_file_problem(label, c, "dtype",
                                          f"a value column must hold numbers, not {ty}"))
    tty = types[t]
    step_unit = domain.kind == "streams" and domain.time_unit == "step"
    if not (tty == "VARCHAR" or is_numeric_type(tty) or is_temporal_type(tty)):
        problems.append(_file_problem(label, t, "dtype",
                                      f"t must hold numbers or ISO 8601 date/times, not {tty}"))
    elif step_unit and is_temporal_type(tty):
        problems.append(_file_problem(
            label, t, "dtype", "time_unit \"step\" needs integer step indices, but t holds "
            "date/times; declare a duration time_unit and step in the domain"))
    if problems:
        raise ValidationError(problems)
    # (an empty input is refused by `_spill`, which counts the rows as it reads them)
    # Text columns: one bad cell is one bad row, but a column with no number at all
    # is a wrong dtype for the whole column (a file-level problem).
    q = quote_ident
    text_cols = [c for c in (*inputs, t) if types[c] == "VARCHAR"]
    head_numeric = False
    if text_cols:
        # Two existence tests per column (does any cell hold text; does any parse).
        # The file's first rows answer them for a usable column; only a column they
        # leave open is searched through the file, each test stopping at its first
        # match (a filtered scan reads large blocks before it can stop).
        tests: list[tuple[str, str]] = []
        for c in text_cols:
            parsed = (f"TRY_CAST({q(c)} AS DOUBLE) IS NOT NULL OR "
                      f"TRY_CAST({q(c)} AS TIMESTAMPTZ) IS NOT NULL") if c == t else (
                f"TRY_CAST({q(c)} AS DOUBLE) IS NOT NULL")
            tests += [(c, f"{q(c)} IS NOT NULL"), (c, parsed)]
        head = f"(SELECT * FROM {src.relation} LIMIT {_PLAN_HEAD_ROWS})"  # noqa: S608
        numbers_only = " AND ".join(f"bool_and(TRY_CAST({q(c)} AS DOUBLE) IS NOT NULL)"
                                    for c in text_cols)
        aggs = [f"count(*) FILTER (WHERE {where}) > 0" for _, where in tests] + [numbers_only]
        *found, head_numeric = src.con.execute(
            f"SELECT {', '.join(aggs)} FROM {head}").fetchall()[0]  # noqa: S608
        counts = [hit or _any_row(src, where) for hit, (_, where) in zip(found, tests, strict=True)]
        for i, c in enumerate(text_cols):
            nonnull, ok = counts[2 * i], counts[2 * i + 1]
            if nonnull and not ok:
                what = "numbers or ISO 8601 date/times" if c == t else "numbers"
                problems.append(_file_problem(label, c, "dtype",
                                              f"no value of this column parses as {what}"))
        if problems:
            raise ValidationError(problems)
    if input_time_unit is None or domain.seconds_per_unit is None:
        factor = 1.0
    else:
        factor = INPUT_TIME_UNITS[input_time_unit] / domain.seconds_per_unit
    typed_sql = None
    if src.csv_path is not None and text_cols and head_numeric:
        typed = {c: ("DOUBLE" if c in text_cols else "VARCHAR") for c in src.columns}
        relation = src.typed_csv(typed)
        try:  # the same dialect: the same columns (else the text read alone)
            same = [r[0] for r in src.con.execute(
                f"DESCRIBE SELECT * FROM {relation}").fetchall()] == list(src.columns)  # noqa: S608
        except duckdb.Error:
            same = False
        if same:
            typed_sql = _select_sql(relation, typed, False, key, t, inputs)
    return _Plan(domain=domain, label=label, key=key, inputs=inputs,
                 sql=_select_sql(src.relation, src.columns, src.numbered, key, t, inputs),
                 number_factor=factor, typed_sql=typed_sql)


def _any_row(src: OpenedSource, where: str) -> bool:
    """Whether any row of the source satisfies `where` (stops at the first)."""
    return bool(src.con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {src.relation} "  # noqa: S608
                                f"WHERE {where} LIMIT 1)").fetchall()[0][0])


def _select_sql(relation: str, types: dict[str, str], numbered: bool, key: str, t: str,
                inputs: tuple[str, ...]) -> str:
    """The converted columns of `relation` (column types `types`), in its scan order."""
    q = quote_ident
    # a source without row numbers (CSV) is numbered as it streams (`_spill`)
    cols = (["_row"] if numbered else []) + [f"CAST({q('user_id')} AS VARCHAR) AS _user",
            f"CAST({q(key)} AS VARCHAR) AS _key"]
    tty = types[t]
    tq = q(t)
    if is_numeric_type(tty):
        cols += [f"CAST({tq} AS DOUBLE) AS _t_num", "CAST(NULL AS BIGINT) AS _t_us",
                 "CAST(NULL AS VARCHAR) AS _t_raw"]
    elif is_temporal_type(tty):
        ts = tq if "TIME ZONE" in tty else f"CAST({tq} AS TIMESTAMP)"
        cols += ["CAST(NULL AS DOUBLE) AS _t_num", f"epoch_us({ts}) AS _t_us",
                 "CAST(NULL AS VARCHAR) AS _t_raw"]
    else:
        cols += [
            f"TRY_CAST({tq} AS DOUBLE) AS _t_num",
            f"CASE WHEN TRY_CAST({tq} AS DOUBLE) IS NULL "
            f"THEN epoch_us(TRY_CAST({tq} AS TIMESTAMPTZ)) END AS _t_us",
            f"CASE WHEN {tq} IS NOT NULL AND TRY_CAST({tq} AS DOUBLE) IS NULL AND "
            f"TRY_CAST({tq} AS TIMESTAMPTZ) IS NULL THEN {tq} END AS _t_raw",
        ]
    for i, c in enumerate(inputs):
        cq = q(c)
        if types[c] == "VARCHAR":
            cols += [f"TRY_CAST({cq} AS DOUBLE) AS _v{i}",
                     f"CASE WHEN {cq} IS NOT NULL AND TRY_CAST({cq} AS DOUBLE) IS NULL "
                     f"THEN {cq} END AS _raw{i}"]
        else:
            cols += [f"CAST({cq} AS DOUBLE) AS _v{i}", f"CAST(NULL AS VARCHAR) AS _raw{i}"]
    return f"SELECT {', '.join(cols)} FROM {relation}"  # noqa: S608


_SCHEMAS: dict[tuple, object] = {}


def _schema(d: Domain):
    """The pandera schema of a domain's samples (built once per distinct shape)."""
    if d.kind == "curves":
        lon_lat = (d.lon_column, d.lat_column) if d.projection else None
        key: tuple = ("curves", tuple(d.value_columns), lon_lat, d.projection == "mercator",
                      d.window)
        if key not in _SCHEMAS:
            _SCHEMAS[key] = S.curve_samples_schema(d.value_columns, lon_lat=lon_lat,
                                                   mercator=d.projection == "mercator",
                                                   window=d.window)
    else:
        vr = None if d.value_range is None else tuple(d.value_range)
        key = ("streams", vr, d.time_unit == "step")
        if key not in _SCHEMAS:
            _SCHEMAS[key] = S.stream_samples_schema(vr, integer_steps=d.time_unit == "step")
    return _SCHEMAS[key]


# --------------------------------------------------------------------------- batches


def _last_user_start(users: pa.Array | pa.ChunkedArray) -> int:
    """Position of the first row of the last user's run (rows are sorted by user)."""
    last = users[len(users) - 1]
    if last.is_valid:
        differ = pc.fill_null(pc.not_equal(users, last), True)
    else:
        differ = pc.is_valid(users)
    diff = np.flatnonzero(differ.to_numpy(zero_copy_only=False))
    return int(diff[-1]) + 1 if diff.size else 0


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


class NeedsSpill(Exception):
    """A straight read (``spill=False``) cannot go on; read again with ``spill=True``.

    Raised at the first row out of (user, key) order, or at the first CSV cell
    that ends the typed read (see `_spill`; then `typed_read_ended`), before
    any user of that batch is yielded. What the read yielded so far is not
    what the spilled read promises (all users, in order): the caller discards it.
    """

    def __init__(self, message: str, *, typed_read_ended: bool = False) -> None:
        super().__init__(message)
        self.typed_read_ended = typed_read_ended


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
    return ValidationError(_file_problem(src.label, None, "not empty",
                                         "the input has no data rows"))


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


def _spill_scan(src: OpenedSource, batches: Iterator[pa.RecordBatch], path: Path) -> bool:
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


def _ordered_batches(src: OpenedSource, plan: _Plan, batch_rows: int, spill: bool = True
                     ) -> Iterator[pa.RecordBatch]:
    """The source's converted rows in (user, key, file row) order (see the module doc).

    ``spill=False``: straight from the scan, or `NeedsSpill` (`_straight`).
    """
    if not spill:
        yield from _straight(src, plan, batch_rows)
        return
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


def _sorted_rows(src: OpenedSource, path: Path, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of the reader's Arrow file sorted by DuckDB (spilling beyond its memory limit)."""
    import pyarrow.dataset as ds

    src.con.register("_rows", ds.dataset(str(path), format="ipc"))
    try:
        yield from src.con.sql("SELECT * FROM _rows ORDER BY _user ASC NULLS LAST, "
                               "_key ASC NULLS LAST, _row ASC").to_arrow_reader(batch_rows)
    finally:
        src.con.unregister("_rows")


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


# --------------------------------------------------------------------------- conversion


def _float(col: pa.ChunkedArray) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _isnull(col: pa.ChunkedArray) -> np.ndarray:
    return pc.is_null(col).to_numpy(zero_copy_only=False)


def _changes(col: pa.Array) -> np.ndarray:
    """Row i's value differs from row i - 1's (row 0: True; null equals null)."""
    n = len(col)
    out = np.ones(n, dtype=bool)
    if n > 1:
        a, b = col.slice(1), col.slice(0, n - 1)
        differ = pc.fill_null(pc.not_equal(a, b), True)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        out[1:] = pc.and_not(differ, both_null).to_numpy(zero_copy_only=False)
    return out


def _missing_or_empty(col: pa.Array) -> np.ndarray:
    """Ids that fail "required" or "non-empty id" (null, or empty text)."""
    return pc.fill_null(pc.equal(col, ""), True).to_numpy(zero_copy_only=False)


def _text(col: pa.Array, rows: np.ndarray) -> np.ndarray:
    """The ids at positions `rows` as an object array (None for null)."""
    return col.take(pa.array(rows, pa.int64())).to_numpy(zero_copy_only=False)


class _Batch:
    """One block of whole users, converted and validated."""

    def __init__(self, tbl: pa.Table, plan: _Plan):
        self.plan = plan
        d = plan.domain
        self.n = n = tbl.num_rows
        self.row = tbl.column("_row").to_numpy(zero_copy_only=False).astype(np.int64)
        # Ids stay Arrow arrays (no Python string per row): runs and masks come from
        # Arrow compute; Python strings are made once per user and per group.
        self.user_col = tbl.column("_user").combine_chunks()
        self.key_col = tbl.column("_key").combine_chunks()
        self.problems: list[Problem] = []
        user_null = _isnull(self.user_col)
        key_null = _isnull(self.key_col)
        self.ustart = _changes(self.user_col)
        gstart = self.ustart | _changes(self.key_col)
        self.gstart = gstart
        self.gid = np.cumsum(gstart) - 1
        self.gstarts = np.flatnonzero(gstart)
        self.bad_ids = _missing_or_empty(self.user_col) | _missing_or_empty(self.key_col)

        # ---- time: kind per row, then conversion per group
        t_num = _float(tbl.column("_t_num"))
        num_ok = ~_isnull(tbl.column("_t_num"))
        t_us_col = tbl.column("_t_us")
        us_ok = ~_isnull(t_us_col)
        t_us = pc.fill_null(t_us_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        t_raw = tbl.column("_t_raw")
        t_bad = ~_isnull(t_raw)
        kind = np.where(num_ok, _NUMBER, np.where(us_ok, _DATETIME, 0))
        first_kind = np.zeros(len(self.gstarts), dtype=np.int64)
        if n:
            # the group's kind is the kind of its first row that has a time at all
            known = kind > 0
            idx = np.where(known, np.arange(n), n)
            first_idx = np.minimum.reduceat(idx, self.gstarts)
            first_kind = np.where(first_idx < n, kind[np.minimum(first_idx, n - 1)], 0)
        gkind = first_kind[self.gid] if n else np.zeros(0, np.int64)
        mixed = (kind > 0) & (kind != gkind)
        t_missing = (kind == 0) & ~t_bad

        self.t, self.start_of_group = self._convert_time(t_num, t_us, kind, gkind)
        if d.kind == "streams" and d.time_unit == "step":
            dt_in_step = kind == _DATETIME
        else:
            dt_in_step = np.zeros(n, dtype=bool)

        # ---- values
        nin = len(plan.inputs)
        self.v = np.empty((n, nin), dtype=np.float64)
        v_missing, v_bad = [], []
        for i in range(nin):
            col = tbl.column(f"_v{i}")
            self.v[:, i] = _float(col)
            bad = ~_isnull(tbl.column(f"_raw{i}"))
            v_bad.append(bad)
            v_missing.append(_isnull(col) & ~bad)

        # ---- conversion-time problems (specific causes; pandera adds the rest)
        pre: list[tuple[np.ndarray, str, str, str, object]] = [
            (user_null, "user_id", RULE_REQUIRED, message_for(RULE_REQUIRED), None),
            (key_null, plan.key, RULE_REQUIRED, message_for(RULE_REQUIRED), None),
            (t_missing, "t", RULE_REQUIRED, message_for(RULE_REQUIRED), None),
            (t_bad, "t", RULE_T_FORMAT,
             "t is neither a number nor an ISO 8601 date/time", t_raw),
            (dt_in_step, "t", S.RULE_INTEGER_STEP,
             "time_unit \"step\" needs integer step indices, not date/times", None),
            (mixed, "t", RULE_T_FORMAT,
             "t mixes plain numbers and date/times within one curve or stream", None),
        ]
        for i, c in enumerate(plan.inputs):
            pre.append((v_missing[i], c, RULE_REQUIRED, message_for(RULE_REQUIRED), None))
            pre.append((v_bad[i], c, RULE_NUMBER, "not a number", tbl.column(f"_raw{i}")))
        for mask, column, rule, message, raw in pre:
            for j in np.flatnonzero(mask):
                value = None
                if raw is not None:
                    value = raw[int(j)].as_py()
                    value = value if value is None or len(value) <= 80 else value[:77] + "..."
                self.problems.append(Problem(
                    plan.label, int(self.row[j]), column, rule, message,
                    user_id=self.user_col[int(j)].as_py(), value=value))

        # ---- sort by t within a group when the domain asks (rows never leave their
        # group, so group ids and group starts stay valid position by position)
        if d.sort and n:
            order = np.lexsort((np.arange(n), self.t, self.gid))
            if np.any(order != np.arange(n)):
                # ids are constant within a group: only these move
                for name in ("row", "t", "v"):
                    setattr(self, name, getattr(self, name)[order])

        self._validate()

    def _convert_time(self, t_num: np.ndarray, t_us: np.ndarray, kind: np.ndarray,
                      gkind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d, n = self.plan.domain, self.n
        starts = self.gstarts
        out = np.full(n, np.nan)
        start = np.full(len(starts), np.nan)
        if n == 0:
            return out, start
        spu = d.seconds_per_unit
        is_num = (kind == _NUMBER) & (gkind == _NUMBER)
        is_dt = (kind == _DATETIME) & (gkind == _DATETIME)
        num = t_num * self.plan.number_factor
        if d.kind == "curves":
            fin = is_num & np.isfinite(num)
            g0 = np.minimum.reduceat(np.where(fin, num, np.inf), starts)
            o = g0[self.gid]
            with np.errstate(invalid="ignore"):
                out = np.where(is_num, num - o, out)
            start = np.where(np.isfinite(g0), g0, start)
            big = np.iinfo(np.int64).max
            g0us = np.minimum.reduceat(np.where(is_dt, t_us, big), starts)
            has = g0us != big
            dt_rel = (t_us - g0us[self.gid]) / 1e6 / spu
            out = np.where(is_dt, dt_rel, out)
            start = np.where(has, g0us / 1e6 / spu, start)
            return out, start
        # streams: absolute step indices
        if d.time_unit == "step":
            out = np.where(is_num, t_num, out)
            return out, start
        step = float(d.step)
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.where(is_num, np.floor(num / step), out)
        step_us = step * spu * 1e6
        if step_us == round(step_us) and step_us >= 1:
            steps_dt = (t_us // int(round(step_us))).astype(np.float64)
        else:
            steps_dt = np.floor(t_us / step_us)
        out = np.where(is_dt, steps_dt, out)
        return out, start

    def _frame(self, rows: np.ndarray) -> pd.DataFrame:
        """The pandera frame of the rows at positions `rows` (file rows as index)."""
        plan = self.plan
        users, keys = _text(self.user_col, rows), _text(self.key_col, rows)
        cols: dict[str, object] = {
            "user_id": pd.array(np.where(np.equal(users, None), "", users), dtype="str"),
            plan.key: pd.array(np.where(np.equal(keys, None), "", keys), dtype="str"),
            "t": self.t[rows],
        }
        for i, c in enumerate(plan.inputs):
            cols[c] = self.v[rows, i]
        return pd.DataFrame(cols, index=pd.Index(self.row[rows], name=S.ROW_INDEX))

    def _suspects(self) -> np.ndarray:
        """Positions of the rows of every user with a row the numpy screen flags."""
        d, plan = self.plan.domain, self.plan
        same = ~self.gstart
        if d.kind == "curves":
            cols = {c: self.v[:, i] for i, c in enumerate(plan.inputs)}
            lon_lat = (d.lon_column, d.lat_column) if d.projection else None
            flagged = S.curve_rows_failing(self.t, cols, same=same, bad_ids=self.bad_ids,
                                           lon_lat=lon_lat, mercator=d.projection == "mercator",
                                           window=d.window)
        else:
            flagged = S.stream_rows_failing(self.t, self.v[:, 0], same=same,
                                            bad_ids=self.bad_ids, value_range=d.value_range,
                                            integer_steps=d.time_unit == "step")
        if not flagged.any():
            return np.zeros(0, dtype=np.int64)
        uid = np.cumsum(self.ustart) - 1
        bad_user = np.zeros(int(uid[-1]) + 1, dtype=bool)
        bad_user[uid[flagged]] = True
        return np.flatnonzero(bad_user[uid])

    def _validate(self) -> None:
        """Validate the batch: numpy screen of every row, then pandera on the flagged users.

        A numpy screen checks every row rule over the whole batch; pandera then
        validates the rows of the users it flags (and names each problem: row,
        column, rule), or no rows at all (the schema and dtype checks only). The
        screen flags every row pandera would reject (`schemas.samples`), and a
        user's rows are contiguous and checked together, so the problems are the
        same as validating the whole batch with pandera, at a fraction of the cost.
        """
        if self.n == 0:
            return
        d = self.plan.domain

        def range_text(rule: str, column: str) -> str | None:
            if rule == S.RULE_VALUE_RANGE and d.value_range is not None:
                lo, hi = d.value_range
                return f"domain {d.name!r} declares value_range [{lo:g}, {hi:g}] {d.value_unit}"
            return None

        rows = self._suspects()
        if not rows.size and self.plan.schema_checked:
            # no row to name, and the schema and dtype checks passed on an earlier
            # batch: the frame of every batch is built the same way
            self.problems = dedupe(self.problems)
            return
        try:
            _schema(d).validate(self._frame(rows), lazy=True)
            found: list[Problem] = []
            if not rows.size:
                self.plan.schema_checked.append(True)
        except pa_errors.SchemaErrors as err:
            user_of = dict(zip(self.row[rows].tolist(), _text(self.user_col, rows).tolist(),
                               strict=True))
            found = problems_from_schema_errors(err, file=self.plan.label,
                                                user_of_row=user_of.get, range_text=range_text)
        self.problems = dedupe([*self.problems, *found])

    # ------------------------------------------------------------------ results

    def results(self, max_problems: int = 1000
                ) -> Iterator[UserCurves | UserStreams | Rejection]:
        """Yield each user of the block, in order: accepted objects or rejections."""
        n = self.n
        if n == 0:
            return
        plan, d = self.plan, self.plan.domain
        by_user: dict[object, list[Problem]] = {}
        for p in self.problems:
            by_user.setdefault(p.user_id, []).append(p)
        values = self.v
        if d.kind == "curves" and d.projection:
            values = self._projected()
        elif d.kind == "streams" and d.value_range is not None:
            lo, hi = d.value_range
            values = (self.v - lo) / (hi - lo)
        ustarts = np.flatnonzero(self.ustart)
        ubounds = np.append(ustarts, n)
        gbounds = np.append(self.gstarts, n)
        user_ids = _text(self.user_col, ustarts).tolist()
        group_keys = _text(self.key_col, self.gstarts).tolist()
        columns = d.value_columns
        for ui, (a, b) in enumerate(zip(ubounds[:-1], ubounds[1:], strict=True)):
            user = user_ids[ui]
            probs = by_user.get(user)
            if user is None or probs:
                ps = sorted(probs or [], key=lambda p: (p.row or 0, p.column or "", p.rule))
                yield Rejection(user_id="" if user is None else user,
                                problems=_capped(ps, max_problems, plan.label))
                continue
            lo = np.searchsorted(gbounds, a)
            hi = np.searchsorted(gbounds, b)
            items: list[Curve] | list[Stream] = []
            for g0, g1 in zip(gbounds[lo:hi], gbounds[lo + 1:hi + 1], strict=True):
                if d.kind == "curves":
                    s0 = self.start_of_group[int(self.gid[g0])]
                    start = float(s0) if np.isfinite(s0) else None
                    t = self.t[g0:g1].copy()
                    items.append(Curve(curve_id=group_keys[int(self.gid[g0])], t=t,
                                       values=values[g0:g1].copy(), start=start))
                else:
                    items.append(Stream(stream_id=group_keys[int(self.gid[g0])],
                                        steps=self.t[g0:g1].astype(np.int64),
                                        values=values[g0:g1, 0].copy()))
            fp = user_fingerprint(user, items, columns)
            if d.kind == "curves":
                yield UserCurves(user_id=user, curves=items, fingerprint=fp)  # type: ignore[arg-type]
            else:
                yield UserStreams(user_id=user, streams=items, fingerprint=fp)  # type: ignore[arg-type]

    def _projected(self) -> np.ndarray:
        d = self.plan.domain
        lon, lat = self.v[:, 0], self.v[:, 1]
        # One fixed, public frame for the whole domain (the policy's projection and
        # ref_lat), independent of the data, so L2 in metres is the same metric
        # for every pair of curves.
        with np.errstate(invalid="ignore", divide="ignore"):
            x, y = project(lon, lat, projection=d.projection, ref_lat=d.ref_lat)
        return np.column_stack([x, y])


def _capped(problems: list[Problem], cap: int, label: str) -> list[Problem]:
    if len(problems) <= cap:
        return problems
    kept = problems[:cap]
    reasons = {(p.column, p.rule) for p in kept}
    for p in problems[cap:]:
        if (p.column, p.rule) not in reasons:
            reasons.add((p.column, p.rule))
            kept.append(p)
    more = len(problems) - len(kept)
    kept.append(Problem(label, None, None, "more problems",
                        f"{more} more problems of the kinds listed above are not shown",
                        user_id=problems[0].user_id))
    return kept


# --------------------------------------------------------------------------- public API


def iter_users(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    *,
    table: str | None = None,
    batch_rows: int = 200_000,
    input_time_unit: str | None = None,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    max_problems_per_user: int = 1000,
    spill: bool = True,
) -> Iterator[UserCurves | UserStreams | Rejection]:
    """Stream the validated users of an input, in sorted user-id order.

    Args:
        source: CSV (optionally ``.gz``), Parquet or DuckDB file, or a DataFrame.
            Columns: ``user_id``, ``curve_id`` (curves) or ``stream_id``
            (streams), ``t``, and the domain's value columns (``lon``/``lat``
            columns for a projected domain). Other columns are ignored.
        domain: the policy domain that fixes units, projection and range.
        table: the table name inside a DuckDB file.
        batch_rows: rows per Arrow batch read from DuckDB (memory bound; a user
            is never split, so one user larger than this makes a larger batch).
        input_time_unit: unit of plain numbers in ``t`` (ns, us, ms, s, min, h,
            d); None means they are already in the domain's time unit. ISO 8601
            strings and date/time columns are always understood.
        memory_limit: DuckDB memory limit for reading and sorting (DuckDB uses it
            as a cache and spills beyond it, so it bounds memory, not the file).
        max_problems_per_user: problems listed per rejected user; beyond it the
            first problem of each further (column, rule) is still listed, and one
            "more problems" entry counts the rest, so every reason appears.
        spill: True: the scan's rows go to a private file first, which is read
            back as it is when it came in (user, key) order and sorted
            otherwise. False (a straight read): users are yielded as the scan
            reaches them, with no copy of the rows, and `NeedsSpill` is raised
            at the first row out of order (or that ends a CSV's typed read):
            for callers that can start again with ``spill=True`` (see
            `read_users`). Both give the same users, problems and fingerprints.

    Returns:
        An iterator (parameters are checked when this is called, the file is
        opened on the first ``next``) that yields `UserCurves` or `UserStreams`
        for accepted users, `Rejection` for users with any invalid row
        (``user_id == ""``: rows that carry no user id).

    Raises:
        ValidationError: file-level problems (missing or unreadable file,
            missing column, wrong dtype for a whole column, empty input), from
            the first ``next``.
        ParameterError: invalid arguments, from this call (before any file is read).
    """
    _check_parameters(domain, batch_rows, input_time_unit, max_problems_per_user)
    return _iter_users(source, domain, table, batch_rows, input_time_unit,
                       memory_limit, max_problems_per_user, spill)


def _iter_users(source: str | Path | pd.DataFrame, domain: Domain, table: str | None,
                batch_rows: int, input_time_unit: str | None,
                memory_limit: str, max_problems: int, spill: bool = True, typed: bool = True
                ) -> Iterator[UserCurves | UserStreams | Rejection]:
    with open_source(source, table=table, memory_limit=memory_limit) as src:
        plan = _plan(src, domain, input_time_unit)
        if not typed:
            plan = replace(plan, typed_sql=None)
        for block in _blocks(src, plan, batch_rows, spill):
            yield from _Batch(block, plan).results(max_problems)


T = TypeVar("T")


def _two_reads(read: Callable[[bool, bool], T]) -> T:
    """``read(spill, typed)`` straight, or once more spilled if that read stopped.

    The second read skips the typed CSV read when a cell ended it in the first
    (it would end there again), so an input costs at most the two reads its
    spilled read alone costs when a cell is not a number.
    """
    try:
        return read(False, True)
    except NeedsSpill as stop:
        typed = not stop.typed_read_ended
    return read(True, typed)


def read_users(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    consume: Callable[[Iterator[UserCurves | UserStreams | Rejection]], T],
    *,
    table: str | None = None,
    batch_rows: int = 200_000,
    input_time_unit: str | None = None,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    max_problems_per_user: int = 1000,
) -> T:
    """``consume(users)`` over a straight read, or again over the spilled one.

    `consume` gets the users of `iter_users` with ``spill=False`` (the other
    arguments as there) and returns its result. If that read raises
    `NeedsSpill`, which passes through `consume` (it may clean up on the way),
    `consume` is called once more on a spilled read: so `consume` must start
    from nothing each time. An input already in (user, key) order (a sorted
    export, the usual case) is then parsed once with no private copy of its
    rows; any other costs the straight read up to its first row out of order,
    then the spilled read.

    Raises:
        ValidationError, ParameterError: as `iter_users`.
    """
    _check_parameters(domain, batch_rows, input_time_unit, max_problems_per_user)
    args = (source, domain, table, batch_rows, input_time_unit, memory_limit,
            max_problems_per_user)
    return _two_reads(lambda spill, typed: consume(_iter_users(*args, spill, typed)))


def scan(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    *,
    table: str | None = None,
    batch_rows: int = 200_000,
    input_time_unit: str | None = None,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    max_problems_per_user: int = 1000,
) -> IngestReport:
    """Validate a whole input in one streaming pass and summarise it.

    Same arguments as `iter_users` but `spill`: like `read_users`, an input
    in (user, key) order is read straight, any other one again through the
    private spill file. Per-user arrays are dropped as soon as a user is
    counted, so memory does not grow with the input.

    Returns:
        An `IngestReport` (counts, time span, value ranges, rejections,
        per-user and whole-input fingerprints).

    Raises:
        ValidationError: file-level problems (see `iter_users`).
        ParameterError: invalid arguments.
    """
    _check_parameters(domain, batch_rows, input_time_unit, max_problems_per_user)
    args = (source, domain, table, batch_rows, input_time_unit, memory_limit,
            max_problems_per_user)
    return _two_reads(lambda spill, typed: _scan(*args, spill, typed))


def _scan(source: str | Path | pd.DataFrame, domain: Domain, table: str | None,
          batch_rows: int, input_time_unit: str | None, memory_limit: str,
          max_problems_per_user: int, spill: bool, typed: bool) -> IngestReport:
    users = items = points = rows = 0
    t_lo, t_hi = np.inf, -np.inf
    ncols = len(domain.value_columns)
    v_lo, v_hi = np.full(ncols, np.inf), np.full(ncols, -np.inf)
    rejected: list[Rejection] = []
    file_problems: list[Problem] = []
    fps: dict[str, str] = {}
    with open_source(source, table=table, memory_limit=memory_limit) as src:
        plan = _plan(src, domain, input_time_unit)
        if not typed:
            plan = replace(plan, typed_sql=None)
        label = src.label
        for block in _blocks(src, plan, batch_rows, spill):
            rows += block.num_rows
            for r in _Batch(block, plan).results(max_problems_per_user):
                if isinstance(r, Rejection):
                    if r.user_id == "" and all(p.user_id is None for p in r.problems):
                        file_problems.extend(r.problems)
                    else:
                        rejected.append(r)
                    continue
                users += 1
                fps[r.user_id] = r.fingerprint
                parts = r.curves if isinstance(r, UserCurves) else r.streams
                for it in parts:
                    items += 1
                    tt = it.t if isinstance(it, Curve) else it.steps
                    points += len(tt)
                    t_lo, t_hi = min(t_lo, float(tt[0])), max(t_hi, float(tt[-1]))
                    if isinstance(it, Curve):
                        raw = it.values
                    elif domain.value_range is not None:
                        lo, hi = domain.value_range
                        raw = (it.values * (hi - lo) + lo)[:, None]
                    else:
                        raw = it.values[:, None]
                    v_lo = np.minimum(v_lo, raw.min(axis=0))
                    v_hi = np.maximum(v_hi, raw.max(axis=0))
    return IngestReport(
        source=label, kind=domain.kind, domain=domain.name, rows=rows, users=users,
        curves_or_streams=items, points=points,
        t_span=(t_lo, t_hi) if users else None,
        value_ranges=({c: (float(v_lo[i]), float(v_hi[i]))
                       for i, c in enumerate(domain.value_columns)} if users else {}),
        rejected=rejected, file_problems=file_problems,
        fingerprint=input_fingerprint(fps, (r.user_id for r in rejected)),
        user_fingerprints=fps, time_unit=domain.time_unit,
    )
