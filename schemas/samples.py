"""Pandera schemas of the sample tables that enter privpipe: curves and streams.

Ingestion converts each batch of input rows to the domain's units and then
validates it with the schema built here. The frame's index is the 1-based data
row of the input file (header excluded), so every failure maps back to a row.
Rows arrive sorted by (user, curve or stream, file row), which is what the two
frame-wide rules ("t strictly increasing", "at least 2 points") rely on.

Rule names (the ``check`` of each failure) are stable: `schemas.problems` turns
them into `Problem` records with text that never includes the failing value.

Every row rule also exists in vectorised form (`curve_rows_failing`,
`stream_rows_failing`: numpy over whole arrays, the same helpers the pandera
checks call), so that ingestion can screen a large batch in one pass and hand
only the users that may fail to pandera, which then names each problem. The
screen may flag more rows than pandera rejects, never fewer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pandera.pandas as pa

ROW_INDEX = "_row"
LON_RANGE = (-180.0, 180.0)
LAT_RANGE = (-90.0, 90.0)

RULE_FINITE = "finite"
RULE_INCREASING = "t strictly increasing"
RULE_MIN_POINTS = "at least 2 points"
RULE_INTEGER_STEP = "integer step"
RULE_STEP_RANGE = "step in [0, 2^53)"
RULE_ID_TEXT = "id without control characters"
MAX_STEP = 2.0**53
RULE_VALUE_RANGE = "value range"
RULE_LON = "lon in [-180, 180]"
RULE_LAT = "lat in [-90, 90]"
RULE_LAT_MERCATOR = "lat in (-90, 90)"
# Float-range rules: every quantity a curve mechanism computes from a curve that
# passes them (∫‖q‖² dt, Gram moments, noise added to coefficients) stays far
# inside the float64 range, so a mechanism cannot fail after its reservation.
MAX_MAGNITUDE = 1e100
RULE_MAGNITUDE = "|value| <= 1e100"
MAX_TIME = 1e15
RULE_TIME_RANGE = "t within 1e15 time units of the curve's start"
RULE_WINDOW = "t within the domain's window"


def _finite(s: pd.Series) -> pd.Series:
    return pd.Series(np.isfinite(s.to_numpy(dtype=np.float64)), index=s.index)


def _in_range(v: np.ndarray, low: float, high: float, strict: bool) -> np.ndarray:
    """Whether low <= v <= high (strictly inside with `strict`); NaN is False."""
    with np.errstate(invalid="ignore"):
        return ((v > low) & (v < high)) if strict else ((v >= low) & (v <= high))


def same_group_as_previous(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row i belongs to the same (id, key) group as row i - 1 (row 0: False)."""
    same = np.zeros(len(ids), dtype=bool)
    if len(ids) > 1:
        same[1:] = (ids[1:] == ids[:-1]) & (keys[1:] == keys[:-1])
    return same


def not_increasing(t: np.ndarray, same: np.ndarray) -> np.ndarray:
    """Rows whose t does not exceed the previous row's t in the same group.

    Rows whose t (or the previous row's t) is not finite are not flagged: they
    already fail the "finite" rule.
    """
    bad = np.zeros(len(t), dtype=bool)
    if len(t) > 1:
        with np.errstate(invalid="ignore"):
            bad[1:] = same[1:] & (t[1:] <= t[:-1]) & np.isfinite(t[1:]) & np.isfinite(t[:-1])
    return bad


def too_few_points(same: np.ndarray, minimum: int = 2) -> np.ndarray:
    """Rows of groups (runs of `same`) with fewer than `minimum` rows.

    A group starts at each row where `same` is False, and at row 0 whatever
    `same[0]` says (`same_group_as_previous` makes it False).
    """
    if len(same) == 0:
        return np.zeros(0, dtype=bool)
    starts = np.flatnonzero(~same)
    if starts.size == 0 or starts[0] != 0:
        starts = np.concatenate([[0], starts])
    counts = np.diff(np.append(starts, len(same)))
    return np.repeat(counts < minimum, counts)


def finite_check() -> pa.Check:
    """Pandera check: every value is a finite float (NaN, missing and ±inf fail).

    Float columns are declared nullable so that a NaN reaches this check and is
    reported as "finite" (pandera would otherwise call it a null); a genuinely
    missing cell is reported as "required" by ingestion before validation.
    """
    return pa.Check(_finite, name=RULE_FINITE, ignore_na=False)


def range_check(low: float, high: float, name: str, *, strict: bool = False) -> pa.Check:
    """Pandera check: low <= value <= high (strictly inside with `strict`); NaN skipped."""

    def _check(s: pd.Series) -> pd.Series:
        return pd.Series(_in_range(s.to_numpy(dtype=np.float64), low, high, strict),
                         index=s.index)

    return pa.Check(_check, name=name)


def _same_group_as_previous(df: pd.DataFrame, key: str) -> np.ndarray:
    return same_group_as_previous(df["user_id"].to_numpy(dtype=object),
                                  df[key].to_numpy(dtype=object))


def increasing_check(key: str) -> pa.Check:
    """Frame check: within a (user, `key`) group, t strictly increases row by row.

    Rows whose t (or the previous row's t) is missing pass here: they already
    fail the "required" or "finite" rule, and one cause is reported once.
    """

    def _check(df: pd.DataFrame) -> pd.Series:
        t = df["t"].to_numpy(dtype=np.float64)
        bad = not_increasing(t, _same_group_as_previous(df, key))
        return pd.Series(~bad, index=df.index)

    return pa.Check(_check, name=RULE_INCREASING)


def min_points_check(key: str, minimum: int = 2) -> pa.Check:
    """Frame check: every (user, `key`) group has at least `minimum` rows."""

    def _check(df: pd.DataFrame) -> pd.Series:
        return pd.Series(~too_few_points(_same_group_as_previous(df, key), minimum),
                         index=df.index)

    return pa.Check(_check, name=RULE_MIN_POINTS)


def _step_out_of_range(v: np.ndarray) -> np.ndarray:
    """Steps outside [0, 2^53): below 0, or where a float64 no longer tells n from n + 1.

    2^53 itself is refused: the text ``9007199254740993`` (2^53 + 1) reads as the
    double 2^53, so a step read as 2^53 may not be the step written. Every
    integer strictly below 2^53 is exact. Negative steps are refused: w-event
    windows and the ledger's step runs count from step 0.
    """
    with np.errstate(invalid="ignore"):
        return (v < 0) | (v >= MAX_STEP)


def _whole(v: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.floor(v) == v


#: Control characters (C0: NUL, tab, line breaks, escape; DEL; C1, e.g. CSI): never in an id.
CONTROL_CHARACTERS = "[\\x00-\\x1f\\x7f-\\x9f]"


def _no_control_characters(s: pd.Series) -> pd.Series:
    return ~s.astype(str).str.contains(CONTROL_CHARACTERS, regex=True)


def _id_column() -> pa.Column:
    """A non-empty text id (user, curve or stream) without control characters.

    A NUL, line break or escape in an id would cut or forge lines in the
    reports, the ledger's text exports and terminal output; the row is
    rejected (its user only), naming the row.
    """
    return pa.Column(str, nullable=False, checks=[
        pa.Check.str_length(min_value=1),
        pa.Check(_no_control_characters, name=RULE_ID_TEXT)])


def _float_column(*checks: pa.Check) -> pa.Column:
    """A float column, nullable so that NaN reaches `finite_check` (see there)."""
    return pa.Column(float, nullable=True, checks=[finite_check(), *checks])


def _step_range_check() -> pa.Check:
    return pa.Check(lambda s: pd.Series(~_step_out_of_range(s.to_numpy(dtype=np.float64)),
                                        index=s.index), name=RULE_STEP_RANGE)


# The schemas are built with pandera's object API, not as DataFrameModel classes:
# building a model's schema asks pandera for every installed backend's index
# types, which imports dask.dataframe when the dask extra is installed (1.2 s of
# CPU in every release). Extra columns (raw helpers) are allowed; dtypes are
# checked, not coerced.

#: Curve samples after conversion: one row per (user, curve, time) sample.
#: Columns: ``user_id`` (non-empty text), ``curve_id`` (non-empty text), ``t``
#: (float, domain time unit from the curve's start) and one or more float value
#: columns added per domain by `curve_samples_schema`. Rules: finite numbers;
#: t strictly increasing within a curve; at least 2 points per curve.
CurveSamples = pa.DataFrameSchema(
    {"user_id": _id_column(), "t": _float_column(), "curve_id": _id_column()},
    checks=[increasing_check("curve_id"), min_points_check("curve_id")],
    strict=False, coerce=False, name="CurveSamples")

#: Stream samples after conversion: one row per (user, stream, step) sample.
#: Columns: ``user_id``, ``stream_id`` (non-empty text), ``t`` (the absolute
#: step index as a float, integral) and ``value`` (float, the domain's value
#: unit before normalisation). Rules: finite; steps strictly increasing within
#: a stream (no duplicates); step indices in [0, 2^53) (exact as float64 and
#: int64); values inside the declared range when one is given (added by
#: `stream_samples_schema`).
StreamSamples = pa.DataFrameSchema(
    {"user_id": _id_column(), "t": _float_column(_step_range_check()),
     "stream_id": _id_column(), "value": _float_column()},
    checks=[increasing_check("stream_id")], strict=False, coerce=False, name="StreamSamples")


def finite_range_check(low: float, high: float, name: str) -> pa.Check:
    """Check low <= v <= high for finite values (non-finite ones fail `finite` only)."""

    def _check(s: pd.Series) -> pd.Series:
        v = s.to_numpy(dtype=np.float64)
        return pd.Series(~np.isfinite(v) | _in_range(v, low, high, False), index=s.index)

    return pa.Check(_check, name=name, ignore_na=False)


def _time_limit(window: float | None) -> tuple[float, str]:
    return (MAX_TIME, RULE_TIME_RANGE) if window is None else (window, RULE_WINDOW)


def curve_samples_schema(
    value_columns: Sequence[str],
    *,
    lon_lat: tuple[str, str] | None = None,
    mercator: bool = False,
    window: float | None = None,
) -> pa.DataFrameSchema:
    """Build the curve-sample schema of one domain.

    Args:
        value_columns: the float value columns (e.g. ``["value"]``), each finite
            and at most `MAX_MAGNITUDE` in absolute value.
        lon_lat: for projected domains, the (lon, lat) input columns instead of
            value columns: finite, lon in [-180, 180], lat in [-90, 90].
        mercator: with `lon_lat`, require lat strictly inside (-90, 90) (the
            Mercator y is infinite at the poles).
        window: the domain's fixed time window (t from the curve's start must
            stay inside [0, window]); None: t within `MAX_TIME`.

    Returns:
        A `pandera.DataFrameSchema` (the `CurveSamples` model plus the columns).
    """
    schema = CurveSamples
    limit, rule = _time_limit(window)
    col_t = schema.columns["t"]
    schema = schema.update_columns(
        {"t": {"checks": [*col_t.checks, finite_range_check(0.0, limit, rule)]}})
    cols: dict[str, pa.Column] = {}
    if lon_lat is None:
        for c in value_columns:
            cols[c] = pa.Column(float, checks=[
                finite_check(), finite_range_check(-MAX_MAGNITUDE, MAX_MAGNITUDE, RULE_MAGNITUDE)],
                nullable=True)
    else:
        lon, lat = lon_lat
        lat_check = (range_check(*LAT_RANGE, RULE_LAT_MERCATOR, strict=True) if mercator
                     else range_check(*LAT_RANGE, RULE_LAT))
        cols[lon] = pa.Column(float, checks=[finite_check(), range_check(*LON_RANGE, RULE_LON)],
                              nullable=True)
        cols[lat] = pa.Column(float, checks=[finite_check(), lat_check], nullable=True)
    return schema.add_columns(cols)


def stream_samples_schema(
    value_range: tuple[float, float] | None = None, *, integer_steps: bool = False
) -> pa.DataFrameSchema:
    """Build the stream-sample schema of one domain.

    Args:
        value_range: the declared [low, high] of raw values; values outside are
            rejected (never clipped). None: only finiteness is checked.
        integer_steps: require t to be a whole number (time_unit ``"step"``).

    Returns:
        A `pandera.DataFrameSchema` (the `StreamSamples` model plus range rules).
    """
    schema = StreamSamples
    updates: dict[str, pa.Column] = {}
    if value_range is not None:
        lo, hi = value_range
        col = schema.columns["value"]
        updates["value"] = col.set_checks(
            [*col.checks, range_check(lo, hi, RULE_VALUE_RANGE)])
    if integer_steps:
        col = schema.columns["t"]
        updates["t"] = col.set_checks([*col.checks, pa.Check(
            lambda s: pd.Series(_whole(s.to_numpy()), index=s.index),
            name=RULE_INTEGER_STEP)])
    if updates:
        schema = schema.update_columns({k: {"checks": v.checks} for k, v in updates.items()})
    return schema


# --------------------------------------------------------------------------- vectorised screen


def _not_finite(v: np.ndarray) -> np.ndarray:
    return ~np.isfinite(np.asarray(v, dtype=np.float64))


def curve_rows_failing(
    t: np.ndarray,
    columns: dict[str, np.ndarray],
    *,
    same: np.ndarray,
    bad_ids: np.ndarray,
    lon_lat: tuple[str, str] | None = None,
    mercator: bool = False,
    window: float | None = None,
) -> np.ndarray:
    """Rows that may fail a rule of `curve_samples_schema`, in one numpy pass.

    Args:
        t: float times, rows in (user, curve) order as for the schema.
        columns: the float value columns by name (the lon and lat columns for
            a projected domain).
        same: row i is in the same (user, curve) group as row i - 1
            (`same_group_as_previous`).
        bad_ids: rows whose user id or curve id is missing or empty.
        lon_lat: the (lon, lat) column names of a projected domain.
        mercator: as in `curve_samples_schema`.
        window: as in `curve_samples_schema`.

    Returns:
        A boolean mask over the rows: every row pandera would reject is True.
    """
    tt = np.asarray(t, dtype=np.float64)
    bad = np.asarray(bad_ids, dtype=bool) | _not_finite(tt)
    bad |= ~_in_range(tt, 0.0, _time_limit(window)[0], False)
    for name, v in columns.items():
        bad |= _not_finite(v)
        if lon_lat is None:
            bad |= ~_in_range(v, -MAX_MAGNITUDE, MAX_MAGNITUDE, False)
        elif name == lon_lat[0]:
            bad |= ~_in_range(v, *LON_RANGE, False)
        elif lon_lat is not None and name == lon_lat[1]:
            bad |= ~_in_range(v, *LAT_RANGE, mercator)
    bad |= not_increasing(tt, same)
    bad |= too_few_points(same)
    return bad


def stream_rows_failing(
    t: np.ndarray,
    value: np.ndarray,
    *,
    same: np.ndarray,
    bad_ids: np.ndarray,
    value_range: tuple[float, float] | None = None,
    integer_steps: bool = False,
) -> np.ndarray:
    """Rows that may fail a rule of `stream_samples_schema`, in one numpy pass.

    Args:
        t: float step indices, rows in (user, stream) order as for the schema.
        value: float values (the domain's unit, before normalisation).
        same: row i is in the same (user, stream) group as row i - 1.
        bad_ids: rows whose user id or stream id is missing or empty.
        value_range: as in `stream_samples_schema`.
        integer_steps: as in `stream_samples_schema`.

    Returns:
        A boolean mask over the rows: every row pandera would reject is True.
    """
    tt = np.asarray(t, dtype=np.float64)
    v = np.asarray(value, dtype=np.float64)
    bad = np.asarray(bad_ids, dtype=bool) | _not_finite(tt) | _not_finite(v)
    bad |= _step_out_of_range(tt)
    if value_range is not None:
        bad |= ~_in_range(v, value_range[0], value_range[1], False)
    if integer_steps:
        bad |= ~_whole(tt)
    bad |= not_increasing(tt, same)
    return bad
