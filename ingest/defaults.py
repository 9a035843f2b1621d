"""Default validation domains, for ``privpipe validate`` without a policy.

- curves: every column except the keys (``user_id``, ``curve_id``, ``t``) that
  holds numbers is a value column (for text columns, as in CSV files: at least
  half of the non-empty cells parse as numbers, so one bad cell does not hide a
  column; its bad cells are then reported row by row); plain numbers in ``t`` are taken as they are
  (seconds, or whatever unit the file uses) and ISO 8601 date/times become
  seconds from each curve's start.
- streams: ``t`` holds integer step indices and ``value`` numbers; no value
  range is declared, so values are checked for finiteness only, not
  normalised.

These domains validate a file; they are not a privacy policy (the cap of 1 is
never charged anywhere).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd

from ingest.source import is_numeric_type, open_source, quote_ident
from schemas.errors import ParameterError, Problem, ValidationError
from schemas.policy import Domain

_KEYS = ("user_id", "curve_id", "stream_id", "t")


def default_domain(
    kind: str, source: str | Path | pd.DataFrame | None = None, *, table: str | None = None
) -> Domain:
    """A permissive validation domain of `kind`, fitted to `source`'s columns.

    Args:
        kind: ``"curves"`` or ``"streams"``.
        source: the input; for curves its numeric non-key columns become the
            value columns (needed for curves, unused for streams).
        table: table name inside a DuckDB file.

    Returns:
        A `Domain` named ``default_curves`` or ``default_streams``.

    Raises:
        ParameterError: unknown kind, or curves without a source.
        ValidationError: the source has no numeric value column.
    """
    if kind == "streams":
        return Domain(name="default_streams", kind="streams", notion="wevent", cap=Fraction(1),
                      time_unit="step", value_columns=("value",), value_unit="1", w=1,
                      description="default validation domain: finiteness and step rules only")
    if kind != "curves":
        raise ParameterError("kind must be one of curves, streams")
    if source is None:
        raise ParameterError("the default curves domain needs the input to find value columns")
    types = _column_types(source, table)
    values = tuple(c for c, ty in types.items() if c not in _KEYS and is_numeric_type(ty))
    if not values:
        label = f"{source}::{table}" if table else str(source) if not isinstance(
            source, pd.DataFrame) else "<DataFrame>"
        raise ValidationError(Problem(
            label, None, None, "value columns",
            "no numeric value column besides user_id, curve_id, t; pass a policy "
            "(--policy) that names the value columns"))
    return Domain(name="default_curves", kind="curves", notion="gp", cap=Fraction(1),
                  time_unit="s", value_columns=values, value_unit="1",
                  description="default validation domain: every numeric column is a value")


def _column_types(source: str | Path | pd.DataFrame, table: str | None) -> dict[str, str]:
    with open_source(source, table=table) as src:
        types = dict(src.columns)
        text = [c for c, ty in types.items() if ty == "VARCHAR" and c not in _KEYS]
        if text:
            aggs = ", ".join(
                f"count({quote_ident(c)}), count(TRY_CAST({quote_ident(c)} AS DOUBLE))"
                for c in text)
            counts = src.query(f"SELECT {aggs} FROM {src.relation}")[0]  # noqa: S608
            for i, c in enumerate(text):
                nonnull, numbers = counts[2 * i], counts[2 * i + 1]
                if nonnull > 0 and 2 * numbers >= nonnull:
                    types[c] = "DOUBLE"
        return types
