"""The population view's tables from two aggregations over a release's reports.

`tasks.population` computed the per-step (and per-phase) mean and
distribution tables from the reports themselves, sorted by (step, y), chunk
by chunk: at 10^6 streams x 1,000 steps that is 10^9 reports written to a
scratch split, read back and sorted (873 s of a 2,138 s release). Both tables
depend on the reports only through a few sums per cell:

- the mean and its band on the count, Σy and Σy² of each cell
  (`population_mean_from_sums`);
- the EM distribution on the count of reports per (cell, grid interval
  [lo, hi)) (`population_distribution_from_intervals`).

So two DuckDB aggregations (``GROUP BY step`` and ``GROUP BY (step, lo, hi)``;
both cores, any order) give every table: phases are sums of their steps.
Sums are exact: released stream reports lie on the public grid Λ = 2^-24
(`tasks.stream_draw.STREAM_GRID`), so y = k·Λ with an integer k, and Σk,
Σk² are integer (HUGEINT) sums. Reports that are not all on the grid (or
not finite, or out of Square Wave's support, or at a negative step) are
left to the report-by-report path (`scan_sums` returns None), which also
names what is wrong with them.
"""

from __future__ import annotations

from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mechanisms.reconstruct import (
    population_distribution_from_intervals,
    population_mean_from_sums,
)
from mechanisms.reconstruct.em import SUPPORT_SLACK
from mechanisms.streams.square_wave import square_wave_params
from tasks import _popsums
from tasks.stream_draw import STREAM_GRID

#: B of the population distribution (`population_distribution`'s default)
GRID_SIZE = 64

# lo = #{j: g_j < t}, hi = #{j: g_j <= u} for the grid g_j = (j + ½)/B, t = y − b,
# u = y + b (`em._intervals`), as ceil(tB − ½) and floor(uB − ½) + 1 clamped to
# [0, B]. Exact for B a power of two: g_j, tB and uB are exact doubles, and
# x − ½ is exact for x >= ½ (a multiple of ulp(x) below x); for x = tB (uB)
# < ½ the rounded x − ½ is still negative, so both clamp to 0, as the counts
# are (t, u < g_0). Tested against searchsorted at exact ties.
assert GRID_SIZE & (GRID_SIZE - 1) == 0, "the interval SQL needs a power-of-two grid"
# constant SQL; values bound as $b, $inv, $nb
_MOMENTS = """
SELECT step, count(*) AS n, sum(k)::HUGEINT AS s1, sum(k::HUGEINT * k) AS s2,
       bool_and(coalesce(k::DOUBLE = y * $inv, false)) AS on_grid,
       min(y) AS ymin, max(y) AS ymax
FROM (SELECT step, y, TRY_CAST(round(y * $inv) AS BIGINT) AS k FROM s) GROUP BY step
"""
# one BIGINT key per (step, lo, hi): a one-column GROUP BY (cheaper than three columns)
_INTERVALS = """
WITH c AS (
  SELECT step,
         CAST(least(greatest(ceil(t * $nb - 0.5), 0), $nb) AS BIGINT) AS lo0,
         CAST(least(greatest(floor(u * $nb - 0.5) + 1, 0), $nb) AS BIGINT) AS hi0
  FROM (SELECT step, y - $b AS t, y + $b AS u FROM s))
SELECT key // (($nb + 1) * ($nb + 1))::BIGINT AS step,
       (key // ($nb + 1)::BIGINT) % ($nb + 1)::BIGINT AS lo, key % ($nb + 1)::BIGINT AS hi, n
FROM (SELECT (step * ($nb + 1)::BIGINT + lo0) * ($nb + 1)::BIGINT + hi0 AS key,
             count(*) AS n FROM c GROUP BY key)
"""  # noqa: S608


def scan_sums(con: duckdb.DuckDBPyConnection, epsilon_per_step: float) -> pd.DataFrame | None:
    """Per (step, lo, hi) the number of reports of view ``s``; None if not all valid.

    Two aggregations over the reports, into the connection's temporary
    tables for `cell_tables`: ``population_moments`` (per step: n, Σk, Σk²
    as exact HUGEINTs) and ``population_intervals`` (per step and grid
    interval: n), which is returned sorted. None (and no interval pass) when
    a report is off the release grid, not finite, outside [−b, 1 + b] (with
    `SUPPORT_SLACK`) or at a negative step: the report-by-report path
    handles (and names) those.
    """
    b, _, _ = square_wave_params(epsilon_per_step)
    con.execute("CREATE OR REPLACE TEMP TABLE population_moments AS " + _MOMENTS,
                {"inv": 1.0 / STREAM_GRID})
    ok, step_min, ymin, ymax = con.execute(
        "SELECT bool_and(on_grid), min(step), min(ymin), max(ymax) FROM population_moments"
    ).fetchone()
    if not ok or step_min < 0 or ymin < -b - SUPPORT_SLACK or ymax > 1 + b + SUPPORT_SLACK:
        return None
    con.execute("CREATE OR REPLACE TEMP TABLE population_intervals AS " + _INTERVALS,
                {"b": b, "nb": float(GRID_SIZE)})
    return con.execute("SELECT step, lo, hi, n FROM population_intervals ORDER BY step, lo, hi"
                       ).df()


#: rows summed at once by `chunk_sums`: with |k| < 2^26, every sum of k, kh², kh·kl
#: and kl² over this many rows stays below 2^52 (exact in int64, and in the doubles
#: of DuckDB's SQL these sums are checked against)
SUM_ROWS = 2**26
_K_LIMIT = 2**26
_LOW_BITS = 13  # k = kh·2^13 + kl, 0 <= kl < 2^13: k² = kh²·2^26 + kh·kl·2^14 + kl²


def chunk_sums(step: np.ndarray, y: np.ndarray, b: float
               ) -> tuple[pa.Table, pa.Table] | None:
    """`scan_sums`' two aggregations of some reports, in two C passes; None if not all valid.

    Returns (moments, intervals): per step ``n``, ``s1`` = Σk and ``s2`` as
    three parts ``hh`` = Σkh², ``hl`` = Σkh·kl, ``ll`` = Σkl² (k = kh·2^13 + kl,
    so Σk² = hh·2^26 + hl·2^14 + ll); per (step, lo, hi) of the grid intervals
    ``n``. Every sum is an exact int64 (at most `SUM_ROWS` rows, |k| < 2^26).
    None under `scan_sums`' refusals (off the grid, not finite, outside
    [−b, 1 + b] with `SUPPORT_SLACK`, a negative step) and when |k| >= 2^26.
    lo and hi are the SQL's, operation for operation in IEEE doubles
    (`tasks/_popsums.c`, without the GIL).
    """
    if y.size > SUM_ROWS:
        raise ValueError(f"at most {SUM_ROWS} rows at once")
    step = np.ascontiguousarray(step, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    if int(step.min()) < 0:
        return None
    cells, idx, offset = _step_index(step)
    n, s1, hh, hl, ll = (np.zeros(cells.size, np.int64) for _ in range(5))
    pairs = np.zeros(_WIDTH * _WIDTH, np.int64)
    if not _popsums.moments(idx, y, offset, b, GRID_SIZE, STREAM_GRID, -b - SUPPORT_SLACK,
                            1 + b + SUPPORT_SLACK, float(_K_LIMIT), _LOW_BITS,
                            n, s1, hh, hl, ll, pairs):
        return None
    moments = pa.table({"step": cells, "n": n, "s1": s1, "hh": hh, "hl": hl, "ll": ll}
                       ).filter(pa.array(n > 0))
    return moments, _interval_counts(cells, idx, offset, y, b, pairs)


_WIDTH = GRID_SIZE + 1  # lo and hi each take 0..B


def _interval_counts(cells: np.ndarray, idx: np.ndarray, offset: int, y: np.ndarray, b: float,
                     pairs: np.ndarray) -> pa.Table:
    """Per (step, lo, hi) the number of reports, lo and hi as `_INTERVALS` computes them.

    `pairs` counts the reports of each (lo, hi) pair. Few pairs occur (hi − lo
    is about 2bB): they are numbered, so the per-step count runs over steps x
    pairs found, not steps x (B + 1)^2 mostly empty cells.
    """
    present = np.flatnonzero(pairs)
    code = np.full(_WIDTH * _WIDTH, -1, np.int64)
    code[present] = np.arange(present.size)
    counts = np.zeros((cells.size, present.size), np.int64)
    _popsums.interval_counts(idx, y, offset, b, GRID_SIZE, code, counts.reshape(-1))
    cell, found = np.nonzero(counts)
    return pa.table({"step": cells[cell], "lo": (present // _WIDTH)[found],
                     "hi": (present % _WIDTH)[found], "n": counts[cell, found]})


def _step_index(step: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(the steps, an index of each row, its offset): row r is step cells[idx[r] − offset].

    Dense when the span allows (idx the steps themselves, offset the lowest),
    else the sorted distinct steps (idx each row's rank among them, offset 0).
    """
    low, high = int(step.min()), int(step.max())
    if high - low < 2 * step.size + 1024:
        return np.arange(low, high + 1, dtype=np.int64), step, low
    cells, idx = np.unique(step, return_inverse=True)
    return cells.astype(np.int64), idx.astype(np.int64), 0


class ScanSums:
    """`scan_sums`' two aggregations, summed chunk by chunk as a release writes its reports.

    A stream release adds each chunk's samples as the chunk is collected
    (`flows.release_kinds.StreamRelease.stash`, on the collector thread,
    while later chunks are still being privatized), so the population view
    does not read the release's reports back from ``samples.parquet`` at the
    end. Each chunk is summed in C (`chunk_sums`), its per-step and
    per-interval rows kept in DuckDB. The sums are exact integers (counts,
    Σk, Σk² as HUGEINT), so summing per-chunk aggregates gives the tables one
    scan of the whole file gives (tests/tasks/test_population_scan.py). A
    chunk whose reports `scan_sums` would refuse (off the grid, out of the
    support, a negative step) makes the sums unusable (`valid` False): the
    view then takes the report-by-report path over the file, as before.
    Every chunk holds other users (chunks are cut by users), so the users are
    the sum of each chunk's distinct users.
    Privacy: post-processing of released reports; charges nothing.
    """

    #: chunks added between two compactions of the per-chunk rows
    COMPACT_EVERY = 32

    def __init__(self, epsilon_per_step: float) -> None:
        self.epsilon_per_step = epsilon_per_step
        self._b = square_wave_params(epsilon_per_step)[0]
        self.con = duckdb.connect()
        self.con.execute("SET enable_progress_bar = false")
        self.con.execute("CREATE TEMP TABLE moment_parts (step BIGINT, n BIGINT, s1 HUGEINT, "
                         "s2 HUGEINT)")
        self.con.execute("CREATE TEMP TABLE interval_parts (step BIGINT, lo BIGINT, hi BIGINT, "
                         "n BIGINT)")
        self.valid = True
        self.users = self.rows = self._added = 0

    def add(self, samples: pa.Table) -> None:
        """Add one chunk's reports (columns user_id, step, y)."""
        if not self.valid or samples.num_rows == 0:
            return
        step = samples.column("step").to_numpy()
        y = samples.column("y").to_numpy()
        for a in range(0, y.size, SUM_ROWS):
            sums = chunk_sums(step[a:a + SUM_ROWS], y[a:a + SUM_ROWS], self._b)
            if sums is None:
                self.valid = False
                return
            self._insert(*sums)
        self.users += _distinct(samples.column("user_id"))
        self.rows += samples.num_rows
        self._added += 1
        if self._added % self.COMPACT_EVERY == 0:
            self._compact("moment_parts", "interval_parts")

    def _insert(self, moments: pa.Table, intervals: pa.Table) -> None:
        """Append one `chunk_sums` result to the per-chunk rows (Σk² rebuilt as HUGEINT)."""
        con = self.con
        con.register("m", moments)
        con.register("i", intervals)
        try:
            con.execute("INSERT INTO moment_parts SELECT step, n, s1::HUGEINT, "
                        "hh::HUGEINT * $hh + hl::HUGEINT * $hl + ll::HUGEINT FROM m",
                        {"hh": 1 << 2 * _LOW_BITS, "hl": 1 << _LOW_BITS + 1})
            con.execute("INSERT INTO interval_parts SELECT step, lo, hi, n FROM i")
        finally:
            con.unregister("m")
            con.unregister("i")

    def _compact(self, moments: str, intervals: str) -> None:
        """Sum the per-chunk rows into `moments` and `intervals` (one row per key)."""
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {moments} AS SELECT step, sum(n)::BIGINT AS n, "  # noqa: S608
            "sum(s1)::HUGEINT AS s1, sum(s2)::HUGEINT AS s2 FROM moment_parts GROUP BY step")
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {intervals} AS SELECT step, lo, hi, "  # noqa: S608
            "sum(n)::BIGINT AS n FROM interval_parts GROUP BY step, lo, hi")

    def tables(self) -> duckdb.DuckDBPyConnection | None:
        """The connection holding ``population_moments`` and ``population_intervals``.

        As `scan_sums` leaves them for `cell_tables` (their n, s1, s2 and n
        columns). None: no chunk was added, or the sums are not valid.
        """
        if not self.valid or self._added == 0:
            return None
        self._compact("population_moments", "population_intervals")
        return self.con

    def close(self) -> None:
        """Close the connection."""
        self.con.close()


def _distinct(col: pa.ChunkedArray) -> int:
    """How many distinct strings `col` holds (a dictionary column: its values, not its codes).

    A dictionary may list one id twice (a remote worker's table is checked for
    the ids its rows decode to, not for how they are encoded): counting codes
    would count that user twice.
    """
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary.take(pc.unique(arr.indices))
    return len(pc.unique(arr))


#: cells per EM batch of `cell_tables`: the EM's arrays hold (B + 1) doubles per cell
EM_BATCH_CELLS = 4096


def cell_tables(con: duckdb.DuckDBPyConnection, period: int | None, epsilon_per_step: float,
                confidence: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The mean and distribution tables over steps (period None) or phases from `scan_sums`.

    Phases are exact (HUGEINT) sums of their steps. The same columns and rows
    as `tasks.population._cells`. The EM runs on batches of `EM_BATCH_CELLS`
    cells, not on the report-by-report path's chunks of about `CHUNK_ROWS`
    reports (two cells each at 10^9 reports, with the EM loop's Python cost
    paid per batch): each cell's EM is its own (its π, iterations and stop
    depend on its own counts only, its mean is a row sum:
    `distribution_mean`), so its rows are the same bits whatever the batch
    (tests/tasks/test_population_scan.py: batches of 1, 3 or all cells, and
    the report-by-report path's CSV bytes).
    """
    cell = "step" if period is None else f"(step % {int(period)})"
    per_cell = con.execute(
        f"SELECT {cell} AS cell, sum(n)::BIGINT AS n, CAST(sum(s1) AS VARCHAR) AS s1, "  # noqa: S608
        f"CAST(sum(s2) AS VARCHAR) AS s2 FROM population_moments GROUP BY 1 ORDER BY 1").df()
    by = con.execute(
        f"SELECT {cell} AS cell, lo, hi, sum(n)::BIGINT AS n FROM population_intervals "  # noqa: S608
        f"GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").df()
    m = population_mean_from_sums(
        per_cell["cell"].to_numpy(dtype=np.int64), per_cell["n"].to_numpy(),
        [Fraction(int(v)) * STREAM_GRID for v in per_cell["s1"]],
        [Fraction(int(v)) * STREAM_GRID**2 for v in per_cell["s2"]],
        epsilon_per_step=epsilon_per_step, confidence=confidence)
    mean = pd.DataFrame({"cell": m.cells, "reports": m.reports, "mean": m.mean,
                         "lower": m.lower, "upper": m.upper})
    cells = by["cell"].to_numpy(dtype=np.int64)
    batch = np.unique(cells, return_inverse=True)[1] // EM_BATCH_CELLS
    dist = [_distribution(part, epsilon_per_step) for _, part in by.groupby(batch, sort=True)]
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
