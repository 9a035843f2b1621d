"""The population view's tables from ONE aggregation over a release's reports.

`tasks.population` computed the per-step (and per-phase) mean and
distribution tables from the reports themselves, sorted by (step, y), chunk
by chunk: at 10^6 streams x 1,000 steps that is 10^9 reports written to a
scratch split, read back and sorted (873 s of a 2,138 s release). Both tables
depend on the reports only through a few sums per cell:

- the mean and its band on the count, Σy and Σy² of each cell
  (`population_mean_from_sums`);
- the EM distribution on the count of reports per (cell, grid interval
  [lo, hi)) (`population_distribution_from_intervals`).

So one DuckDB ``GROUP BY step, lo, hi`` (both cores, any order) gives every
table: phases are sums of their steps. Sums are exact: released stream
reports lie on the public grid Λ = 2^-24 (`tasks.stream_draw.STREAM_GRID`),
so y = k·Λ with an integer k, and Σk, Σk² are integer (HUGEINT) sums. Reports
that are not all on the grid (or not finite, or out of Square Wave's
support, or at a negative step) are left to the report-by-report path
(`scan_cells` returns None), which also names what is wrong with them.
"""

from __future__ import annotations

from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd

from mechanisms.reconstruct import (
    population_distribution_from_intervals,
    population_mean_from_sums,
)
from mechanisms.reconstruct.em import SUPPORT_SLACK
from mechanisms.streams.square_wave import square_wave_params
from tasks.stream_draw import STREAM_GRID

#: B of the population distribution (`population_distribution`'s default)
GRID_SIZE = 64

# lo = #{j: g_j < t}, hi = #{j: g_j <= u} for the grid g_j = (j + ½)/B
# (`em._intervals`): a first guess from t·B, then one step either way, checked
# against the grid's own doubles so that the integers are searchsorted's.
_G = "((({j})::DOUBLE + 0.5) / $nb)"
_LO = (f"(lo0 - (lo0 > 0 AND {_G.format(j='lo0 - 1')} >= t)::INTEGER"
       f" + (lo0 < $nb AND {_G.format(j='lo0')} < t)::INTEGER)")
_HI = (f"(hi0 - (hi0 > 0 AND {_G.format(j='hi0 - 1')} > u)::INTEGER"
       f" + (hi0 < $nb AND {_G.format(j='hi0')} <= u)::INTEGER)")
# constant SQL (only the grid helpers above are formatted in); values bound as $b, $inv, $nb
_SCAN = f"""
WITH r AS (
  SELECT step, y, y - $b AS t, y + $b AS u, TRY_CAST(round(y * $inv) AS BIGINT) AS k FROM s),
c AS (
  SELECT step, y, t, u, k,
         TRY_CAST(least(greatest(ceil(t * $nb - 0.5), 0), $nb) AS INTEGER) AS lo0,
         TRY_CAST(least(greatest(floor(u * $nb - 0.5) + 1, 0), $nb) AS INTEGER) AS hi0
  FROM r)
SELECT step, {_LO} AS lo, {_HI} AS hi, count(*) AS n,
       sum(k)::HUGEINT AS s1, sum(k::HUGEINT * k) AS s2,
       bool_and(coalesce(k::DOUBLE = y * $inv, false)) AS on_grid,
       min(y) AS ymin, max(y) AS ymax
FROM c GROUP BY step, lo, hi
"""  # noqa: S608


def scan_sums(con: duckdb.DuckDBPyConnection, epsilon_per_step: float) -> pd.DataFrame | None:
    """Per (step, lo, hi): n, Σk, Σk² of the reports of view ``s``; None if not all valid.

    One pass over the reports, into the connection's temporary table
    ``population_sums`` (Σk, Σk² as exact HUGEINTs) for `cell_tables`;
    returns its (step, lo, hi, n) sorted. None when a report is off the
    release grid, not finite, outside [−b, 1 + b] (with `SUPPORT_SLACK`) or
    at a negative step: the report-by-report path handles (and names) those.
    """
    b, _, _ = square_wave_params(epsilon_per_step)
    con.execute("CREATE OR REPLACE TEMP TABLE population_sums AS " + _SCAN,
                {"b": b, "inv": 1.0 / STREAM_GRID, "nb": float(GRID_SIZE)})
    ok, step_min, ymin, ymax = con.execute(
        "SELECT bool_and(on_grid), min(step), min(ymin), max(ymax) FROM population_sums"
    ).fetchone()
    if not ok or step_min < 0 or ymin < -b - SUPPORT_SLACK or ymax > 1 + b + SUPPORT_SLACK:
        return None
    return con.execute("SELECT step, lo, hi, n FROM population_sums ORDER BY step, lo, hi").df()


def _chunk_of(cell: np.ndarray, n_rows: int, n_cells: int) -> np.ndarray:
    """The chunk of each cell, as `tasks.population._chunks` cuts them (same EM batches)."""
    from tasks.population import CHUNK_ROWS

    per = max(1, int(CHUNK_ROWS * n_cells // max(n_rows, 1)))
    return (cell - int(cell.min())) // per


def cell_tables(con: duckdb.DuckDBPyConnection, period: int | None, epsilon_per_step: float,
                confidence: float, n_cells: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The mean and distribution tables over steps (period None) or phases from `scan_sums`.

    Phases are exact (HUGEINT) sums of their steps. The same columns and rows
    as `tasks.population._cells`; the EM runs on the same batches of cells
    (chunks), so its π are the same bits.
    """
    cell = "step" if period is None else f"(step % {int(period)})"
    per_cell = con.execute(
        f"SELECT {cell} AS cell, sum(n)::BIGINT AS n, CAST(sum(s1) AS VARCHAR) AS s1, "  # noqa: S608
        f"CAST(sum(s2) AS VARCHAR) AS s2 FROM population_sums GROUP BY 1 ORDER BY 1").df()
    by = con.execute(
        f"SELECT {cell} AS cell, lo, hi, sum(n)::BIGINT AS n FROM population_sums "  # noqa: S608
        f"GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").df()
    m = population_mean_from_sums(
        per_cell["cell"].to_numpy(dtype=np.int64), per_cell["n"].to_numpy(),
        [Fraction(int(v)) * STREAM_GRID for v in per_cell["s1"]],
        [Fraction(int(v)) * STREAM_GRID**2 for v in per_cell["s2"]],
        epsilon_per_step=epsilon_per_step, confidence=confidence)
    mean = pd.DataFrame({"cell": m.cells, "reports": m.reports, "mean": m.mean,
                         "lower": m.lower, "upper": m.upper})
    chunk = _chunk_of(by["cell"].to_numpy(dtype=np.int64), int(per_cell["n"].sum()), n_cells)
    dist = [_distribution(part, epsilon_per_step) for _, part in by.groupby(chunk, sort=True)]
    return mean, pd.concat(dist, ignore_index=True)


def _distribution(part: pd.DataFrame, epsilon_per_step: float) -> pd.DataFrame:
    """The distribution rows of one chunk of cells (`_distribution_table`'s columns)."""
    from tasks.population import QUANTILES

    cells, group = np.unique(part["cell"].to_numpy(dtype=np.int64), return_inverse=True)
    d = population_distribution_from_intervals(
        cells, group, part["lo"].to_numpy(), part["hi"].to_numpy(), part["n"].to_numpy(),
        epsilon_per_step=epsilon_per_step, grid_size=GRID_SIZE, quantile_levels=QUANTILES)
    return pd.DataFrame({"cell": d.cells, "reports": d.reports, "mean": d.mean,
                         **{f"q{int(100 * q)}": d.quantiles[:, i]
                            for i, q in enumerate(QUANTILES)}})
