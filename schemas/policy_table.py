"""The budget policy as a table: one row per domain (for the domains view and exports).

`schemas.policy.load_policy` stays the loader of the TOML file; `policy_table`
flattens a loaded `Policy` to a DataFrame and validates it with `PolicyTable`,
and `validate_policy_table` checks a table coming back (e.g. a ledger export)
and names the key and the allowed values on failure.
"""

from __future__ import annotations

import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa
from pandera.typing import Series

from schemas.errors import PolicyError, Problem
from schemas.policy import (
    KINDS,
    NOTIONS_BY_KIND,
    PROJECTIONS,
    STREAM_TIME_UNITS,
    TIME_UNITS,
    Policy,
)

NOTIONS = tuple(sorted({n for ns in NOTIONS_BY_KIND.values() for n in ns}))
COLUMNS = (
    "domain", "kind", "notion", "cap", "cap_float", "w", "time_unit", "step",
    "value_columns", "value_unit", "projection", "value_low", "value_high", "sort",
    "schedule", "units",
)

_ALLOWED = {
    "kind": ", ".join(KINDS),
    "notion": "gp, cgp (curves); wevent (streams)",
    "time_unit": f"{', '.join(TIME_UNITS)} (curves); step, {', '.join(TIME_UNITS)} (streams)",
    "projection": ", ".join(PROJECTIONS) + " or empty",
    "cap": "a positive exact ratio \"p/q\"",
    "cap_float": "a positive number",
    "w": "an integer >= 1 for streams, empty for curves",
    "step": "a positive number, only for streams with a duration time_unit",
    "value_columns": "a comma-separated list of names",
    "value_low": "a number below value_high (streams), empty for curves",
    "value_high": "a number above value_low (streams), empty for curves",
    "domain": "unique names of letters, digits, '_' and '-'",
    "sort": "true or false",
}


def _is_ratio(s: pd.Series) -> pd.Series:
    def ok(v: object) -> bool:
        from fractions import Fraction
        try:
            return Fraction(str(v)) > 0
        except (ValueError, ZeroDivisionError):
            return False
    return s.map(ok).astype(bool)


class PolicyTable(pa.DataFrameModel):
    """One row per policy domain.

    Columns: ``domain`` (unique name), ``kind`` (curves|streams), ``notion``
    (gp|cgp|wevent, matching the kind), ``cap`` (exact ratio text, e.g.
    ``"10"`` or ``"1/2"``) and ``cap_float``, ``w`` (window, streams only),
    ``time_unit``, ``step`` (stream step length in a duration unit), the value
    columns (comma-joined) and their unit, the optional ``projection``, the
    declared stream value range (``value_low``, ``value_high``), the ``sort``
    flag, the optional cron ``schedule`` and ``units`` (text printed next to
    every ε or ρ).
    """

    domain: Series[str] = pa.Field(unique=True, str_matches=r"^[A-Za-z0-9_\-]+$")
    kind: Series[str] = pa.Field(isin=list(KINDS))
    notion: Series[str] = pa.Field(isin=list(NOTIONS))
    cap: Series[str]
    cap_float: Series[float] = pa.Field(gt=0)
    w: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1)
    time_unit: Series[str] = pa.Field(isin=list(STREAM_TIME_UNITS))
    step: Series[float] = pa.Field(nullable=True, gt=0)
    value_columns: Series[str] = pa.Field(str_length={"min_value": 1})
    value_unit: Series[str]
    projection: Series[str] = pa.Field(nullable=True, isin=list(PROJECTIONS))
    value_low: Series[float] = pa.Field(nullable=True)
    value_high: Series[float] = pa.Field(nullable=True)
    sort: Series[bool]
    schedule: Series[str] = pa.Field(nullable=True)
    units: Series[str]

    class Config:
        """Exactly these columns, in any order."""

        strict = True
        coerce = False

    @pa.check("cap", name="cap")
    @classmethod
    def _cap_ratio(cls, s: Series[str]) -> Series[bool]:
        return _is_ratio(s)

    @pa.dataframe_check(name="notion")
    @classmethod
    def _notion_matches_kind(cls, df: pd.DataFrame) -> Series[bool]:
        return pd.Series([n in NOTIONS_BY_KIND.get(k, ()) for k, n in zip(
            df["kind"], df["notion"], strict=True)], index=df.index)

    @pa.dataframe_check(name="w")
    @classmethod
    def _w_iff_streams(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["kind"] == "streams") == df["w"].notna()

    @pa.dataframe_check(name="time_unit")
    @classmethod
    def _curve_time_unit(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["kind"] == "streams") | df["time_unit"].isin(list(TIME_UNITS))

    @pa.dataframe_check(name="value_low")
    @classmethod
    def _range_iff_streams(cls, df: pd.DataFrame) -> Series[bool]:
        streams = df["kind"] == "streams"
        has = df["value_low"].notna() & df["value_high"].notna()
        ordered = (df["value_low"] < df["value_high"]).fillna(False).astype(bool)
        return (streams & has & ordered) | (~streams & df["value_low"].isna()
                                            & df["value_high"].isna())

    @pa.dataframe_check(name="projection")
    @classmethod
    def _projection_curves_only(cls, df: pd.DataFrame) -> Series[bool]:
        return df["projection"].isna() | (df["kind"] == "curves")


def policy_table(policy: Policy) -> pd.DataFrame:
    """Flatten a loaded policy into a validated `PolicyTable` frame, sorted by domain."""
    rows = []
    for name in sorted(policy.domains):
        d = policy.domains[name]
        rows.append({
            "domain": d.name, "kind": d.kind, "notion": d.notion,
            "cap": str(d.cap), "cap_float": float(d.cap),
            "w": d.w, "time_unit": d.time_unit, "step": d.step,
            "value_columns": ",".join(d.value_columns), "value_unit": d.value_unit,
            "projection": d.projection,
            "value_low": d.value_range[0] if d.value_range else None,
            "value_high": d.value_range[1] if d.value_range else None,
            "sort": d.sort, "schedule": d.schedule, "units": d.units_label(),
        })
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = df.astype({"w": "Int64", "step": "float64", "value_low": "float64",
                    "value_high": "float64", "cap_float": "float64", "sort": "bool"})
    for c in ("domain", "kind", "notion", "cap", "time_unit", "value_columns", "value_unit",
              "projection", "schedule", "units"):
        df[c] = df[c].astype("str") if df[c].notna().all() else df[c].astype("str").where(
            df[c].notna(), None)
    return validate_policy_table(df, source=policy.source)


def validate_policy_table(df: pd.DataFrame, *, source: str = "<policy table>") -> pd.DataFrame:
    """Validate a policy table; failures name the key (column) and the allowed values.

    Raises:
        PolicyError: one problem per failing (row, key); the row is the 1-based
            table row, the column the policy key.
    """
    try:
        return PolicyTable.validate(df, lazy=True)
    except pa_errors.SchemaErrors as err:
        problems: list[Problem] = []
        seen: set[tuple[object, object]] = set()
        for rec in err.failure_cases.itertuples(index=False):
            col = None if pd.isna(rec.column) else str(rec.column)
            check = str(rec.check)
            if rec.schema_context == "DataFrameSchema" and check in _ALLOWED:
                # a frame-wide rule reports every non-missing cell of the row: name
                # the key it is about instead
                col = check
            row = None if rec.index is None or pd.isna(rec.index) else int(rec.index) + 1
            if (row, col) in seen:
                continue
            seen.add((row, col))
            key = col or "<table>"
            if check == "column_in_schema":
                msg = "unknown column; allowed: " + ", ".join(COLUMNS)
                key = str(rec.failure_case)
            elif check == "column_in_dataframe":
                msg = "required column is missing"
                key = str(rec.failure_case)
            else:
                msg = f"invalid value; allowed: {_ALLOWED.get(key, 'see the policy documentation')}"
            problems.append(Problem(source, row, key, "policy", msg, value=str(rec.failure_case)))
        raise PolicyError(problems) from None
