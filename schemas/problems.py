"""Turn pandera's failure reports into `Problem` records without raw values in the text.

Pandera's own messages quote the failing values; privpipe's errors and logs must
not (STYLE §10). Each failure becomes a `Problem` whose ``message`` names the
rule in words and whose ``value`` field carries the failing value, which only
``privpipe validate --show-values`` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd
import pandera.errors as pa_errors

from schemas import samples as s
from schemas.errors import Problem

# Frame-wide checks report every column of a failing row; keep one column each.
_FRAME_CHECK_COLUMN = {s.RULE_INCREASING: "t", s.RULE_MIN_POINTS: None}

_MESSAGES = {
    "required": "missing value: every row needs a value in this column",
    "non-empty id": "empty id: ids must be non-empty text",
    s.RULE_FINITE: "must be a finite number (no NaN, inf or overflow)",
    s.RULE_INCREASING: (
        "t must strictly increase within a curve or stream (duplicate or out-of-order "
        "time); sort the input, or set sort = true in the domain to sort by t"
    ),
    s.RULE_MIN_POINTS: "a curve needs at least 2 points",
    s.RULE_INTEGER_STEP: "time_unit \"step\" needs whole-number step indices",
    s.RULE_STEP_RANGE: ("step indices must lie in [0, 2^53) (0 to about 9e15; above, a "
                        "float no longer tells one step from the next)"),
    s.RULE_ID_TEXT: ("ids must not contain control characters (NUL, tab, line break, "
                     "escape, DEL)"),
    s.RULE_LON: "longitude must be in [-180, 180] degrees",
    s.RULE_LAT: "latitude must be in [-90, 90] degrees",
    s.RULE_LAT_MERCATOR: "the Mercator projection needs latitude strictly inside (-90, 90)",
    s.RULE_MAGNITUDE: ("values must lie within ±1e100 (so that squares, L2 norms and noisy "
                       "coefficients stay inside the float range); rescale the value unit"),
    s.RULE_TIME_RANGE: ("a curve must span at most 1e15 time units from its first sample; "
                        "use a coarser time unit"),
    s.RULE_WINDOW: ("the curve runs past the domain's fixed time window (policy key "
                    "`window`): cut it into curves that fit the window"),
    "dtype": "wrong data type for this column",
    "required column": "the column is missing",
    "unknown column": "the column is not part of this table",
    s.RULE_VALUE_RANGE: "outside the declared value range",
}


def message_for(rule: str, detail: str | None = None) -> str:
    """Human text for a rule name (no data values), with an optional suffix."""
    text = _MESSAGES.get(rule, f"failed the rule {rule!r}")
    return f"{text}; {detail}" if detail else text


def _rule_of(check: str, column: str | None) -> str:
    if check == "not_nullable":
        return "required"
    if check.startswith("str_length"):
        return "non-empty id"
    if check.startswith("dtype("):
        return "dtype"
    if check == "column_in_dataframe":
        return "required column"
    if check == "column_in_schema":
        return "unknown column"
    return check


def _short(value: object) -> str | None:
    if value is None:
        return None
    try:
        if pd.isna(value):  # type: ignore[arg-type]
            return "NaN" if isinstance(value, float) else "missing"
    except (TypeError, ValueError):
        pass
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def problems_from_schema_errors(
    err: pa_errors.SchemaErrors,
    *,
    file: str,
    user_of_row: Callable[[int], str | None],
    range_text: Callable[[str, str], str | None] | None = None,
) -> list[Problem]:
    """Convert a lazy pandera validation failure to `Problem` records.

    Args:
        err: the `SchemaErrors` raised by ``schema.validate(df, lazy=True)`` on a
            frame indexed by the 1-based file row.
        file: the input's name, copied into each problem.
        user_of_row: maps a file row to its user id (None when unknown).
        range_text: optional ``(rule, column) -> text`` that names the allowed
            range (from the policy, never from the data).

    Returns:
        One problem per (row, column, rule), in row order; whole-column dtype
        failures come first with ``row=None``.
    """
    fc = err.failure_cases
    out: list[Problem] = []
    seen: set[tuple[int | None, str | None, str]] = set()
    present = set(zip(fc["index"], fc["check"], fc["column"], strict=True))
    for rec in fc.itertuples(index=False):
        check = str(rec.check)
        column = None if pd.isna(rec.column) else str(rec.column)
        if rec.schema_context == "DataFrameSchema" and check in _FRAME_CHECK_COLUMN:
            # a frame-wide rule reports every non-missing cell of a failing row: keep
            # one problem, on the column the rule is about
            wanted = _FRAME_CHECK_COLUMN[check]
            if wanted is None:
                wanted = next((c for c in ("curve_id", "stream_id") if c in set(fc.column)), None)
            if column != wanted and (rec.index, check, wanted) in present:
                continue
            column = wanted
        if check in ("column_in_dataframe", "column_in_schema"):
            column = str(rec.failure_case)
        rule = _rule_of(check, column)
        row = None if rec.index is None or pd.isna(rec.index) else int(rec.index)
        key = (row, column, rule)
        if key in seen:
            continue
        seen.add(key)
        detail = range_text(rule, column or "") if range_text is not None else None
        out.append(Problem(
            file=file, row=row, column=column, rule=rule,
            message=message_for(rule, detail),
            user_id=user_of_row(row) if row is not None else None,
            value=_short(rec.failure_case),
        ))
    out.sort(key=lambda p: (-1 if p.row is None else p.row, p.column or "", p.rule))
    return out


def dedupe(problems: Iterable[Problem]) -> list[Problem]:
    """Keep the first problem per (row, column): a specific cause hides a generic one."""
    out: list[Problem] = []
    seen: set[tuple[int | None, str | None]] = set()
    for p in problems:
        key = (p.row, p.column)
        if p.row is not None and key in seen:
            continue
        seen.add(key)
        out.append(p)
    return out
