"""The reader's first-pass plan: required columns, dtypes, and the SQL that converts them.

`_plan` checks an opened source against a domain (every required column is
there; ids hold text or integers; values hold numbers; t holds numbers or ISO
8601 date/times; a text column has at least one cell that parses) and returns
the SELECT that converts each row to the reader's columns, plus, for a CSV
whose head holds only numbers, the same SELECT over the file read typed. Every
problem found here is file-level (a `ValidationError` with no row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.source import OpenedSource, is_numeric_type, is_temporal_type, quote_ident
from schemas.errors import ParameterError, Problem, ValidationError
from schemas.policy import TIME_UNITS, Domain

#: Units accepted for plain numbers in the time column (``input_time_unit``).
INPUT_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, **TIME_UNITS}

#: rows of the input's head that answer the dtype tests of a usable text column
_PLAN_HEAD_ROWS = 2048


@dataclass(frozen=True)
class _Plan:
    """What the reader needs to convert a source's rows for a domain."""

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
    """Refuse invalid reader arguments before any file is opened."""
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
    """(key column, time column, input value columns) the domain reads."""
    key = "curve_id" if domain.kind == "curves" else "stream_id"
    inputs = ((domain.lon_column, domain.lat_column) if domain.projection
              else tuple(domain.value_columns))
    return key, "t", inputs


def _file_problem(label: str, column: str | None, rule: str, message: str) -> Problem:
    """A file-level problem (no row)."""
    return Problem(label, None, column, rule, message)


def _plan(src: OpenedSource, domain: Domain, input_time_unit: str | None) -> _Plan:
    """Check the source's columns against `domain` and plan the converting SELECT."""
    key, t, inputs = _domain_inputs(domain)
    types = _column_types(src, domain, key, t, inputs)
    # (an empty input is refused by `_spill`, which counts the rows as it reads them)
    text_cols = [c for c in (*inputs, t) if types[c] == "VARCHAR"]
    head_numeric = _check_text_columns(src, text_cols, t) if text_cols else False
    if input_time_unit is None or domain.seconds_per_unit is None:
        factor = 1.0
    else:
        factor = INPUT_TIME_UNITS[input_time_unit] / domain.seconds_per_unit
    typed_sql = None
    if src.csv_path is not None and text_cols and head_numeric:
        typed_sql = _typed_sql(src, text_cols, key, t, inputs)
    return _Plan(domain=domain, label=src.label, key=key, inputs=inputs,
                 sql=_select_sql(src.relation, src.columns, src.numbered, key, t, inputs),
                 number_factor=factor, typed_sql=typed_sql)


def _column_types(src: OpenedSource, domain: Domain, key: str, t: str,
                  inputs: tuple[str, ...]) -> dict[str, str]:
    """The DuckDB types of the source's columns, once every required one has a usable type."""
    label = src.label
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
    return types


def _check_text_columns(src: OpenedSource, text_cols: list[str], t: str) -> bool:
    """Refuse a text column with no cell that parses; whether the head holds only numbers.

    One bad cell is one bad row, but a column with no number at all is a wrong
    dtype for the whole column (a file-level problem). Two existence tests per
    column (does any cell hold text; does any parse): the file's first rows
    answer them for a usable column; only a column they leave open is searched
    through the file, each test stopping at its first match (a filtered scan
    reads large blocks before it can stop).
    """
    q = quote_ident
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
    *found, head_numeric = src.query(f"SELECT {', '.join(aggs)} FROM {head}")[0]  # noqa: S608
    counts = [hit or _any_row(src, where) for hit, (_, where) in zip(found, tests, strict=True)]
    problems: list[Problem] = []
    for i, c in enumerate(text_cols):
        nonnull, ok = counts[2 * i], counts[2 * i + 1]
        if nonnull and not ok:
            what = "numbers or ISO 8601 date/times" if c == t else "numbers"
            problems.append(_file_problem(src.label, c, "dtype",
                                          f"no value of this column parses as {what}"))
    if problems:
        raise ValidationError(problems)
    return head_numeric


def _typed_sql(src: OpenedSource, text_cols: list[str], key: str, t: str,
               inputs: tuple[str, ...]) -> str:
    """The converting SELECT over the CSV read with `text_cols` typed DOUBLE.

    The same strict dialect and header as the text read (`ingest.csv_dialect`),
    so the same columns in the same order.
    """
    typed = {c: ("DOUBLE" if c in text_cols else "VARCHAR") for c in src.columns}
    return _select_sql(src.typed_csv(typed), typed, False, key, t, inputs)


def _any_row(src: OpenedSource, where: str) -> bool:
    """Whether any row of the source satisfies `where` (stops at the first)."""
    return bool(src.query(f"SELECT count(*) FROM (SELECT 1 FROM {src.relation} "  # noqa: S608
                          f"WHERE {where} LIMIT 1)")[0][0])


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

