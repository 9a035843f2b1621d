"""Population view of one stream release: tables and plots, post-processing only.

Reads the release's privatized samples (never raw data), and writes, for all
released users or a chosen group of at least `min_users`:

- ``population/step_mean.csv``: per step, the mean of the users' values with
  a confidence band (`mechanisms.reconstruct.population_mean`);
- ``population/phase_mean.csv`` (with a public `period`): the same per phase
  (e.g. the average daily profile across households);
- ``population/step_distribution.csv`` and ``phase_distribution.csv``: the
  distribution of the values at each step / phase (Square Wave EM with EMS
  smoothing), as quantiles;
- a plot, ``plots/population.png``.

Values are in the domain's declared units (its public value range maps [0, 1]
back to them). Nothing here draws noise or touches the ledger: it charges
nothing. A release's reports (on its 2^-24 grid) take one DuckDB aggregation
(`tasks.population_scan`). Other reports are read in chunks of steps (or
phases), so memory is bounded by the chunk, not by the release: one scan
splits the reports by chunk into a private temporary directory (about the
size of the samples file), then each chunk reads its own.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
from prefect import task

from files.safe_files import make_dirs, write_file
from mechanisms.reconstruct import population_distribution, population_mean
from schemas.errors import ParameterError
from tasks.population_scan import ScanSums, cell_tables, scan_sums

#: rows read per chunk (every report of a chunk's steps or phases)
CHUNK_ROWS = 2_000_000
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: DuckDB's memory while it splits the reports by chunk
MEMORY_LIMIT = "512MB"


def _scale(value_range: tuple[float, float] | None):
    lo, hi = (0.0, 1.0) if value_range is None else (float(value_range[0]),
                                                        float(value_range[1]))
    return lambda x: lo + np.asarray(x) * (hi - lo)


def _chunks(con: duckdb.DuckDBPyConnection, cell_sql: str, n_rows: int,
            n_cells: int) -> list[tuple[int, int]]:
    """[first, last] cell ranges of about CHUNK_ROWS reports each."""
    per = max(1, int(CHUNK_ROWS * n_cells // max(n_rows, 1)))
    lo, hi = con.execute(f"SELECT min({cell_sql}), max({cell_sql}) FROM s").fetchone()  # noqa: S608
    return [(a, min(a + per - 1, hi)) for a in range(int(lo), int(hi) + 1, per)]


def _mean_table(y: np.ndarray, st: np.ndarray, period: int | None, epsilon_per_step: float,
                confidence: float) -> pd.DataFrame:
    """The mean rows of one chunk's reports (sorted by step, then y)."""
    m = population_mean(y, steps=st, epsilon_per_step=epsilon_per_step, period=period,
                        confidence=confidence)
    return pd.DataFrame({"cell": m.cells, "reports": m.reports, "mean": m.mean,
                         "lower": m.lower, "upper": m.upper})


def _distribution_table(y: np.ndarray, st: np.ndarray, period: int | None,
                        epsilon_per_step: float) -> pd.DataFrame:
    """The distribution rows of one chunk's reports (sorted by step, then y)."""
    d = population_distribution(y, steps=st, epsilon_per_step=epsilon_per_step,
                                period=period, quantile_levels=QUANTILES)
    return pd.DataFrame({"cell": d.cells, "reports": d.reports, "mean": d.mean,
                         **{f"q{int(100 * q)}": d.quantiles[:, i]
                            for i, q in enumerate(QUANTILES)}})


def _cells(con: duckdb.DuckDBPyConnection, period: int | None, epsilon_per_step: float,
           confidence: float, n_rows: int, n_cells: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean and distribution tables over steps (period None) or phases, chunk by chunk.

    The reports are first split by chunk in one scan (a Parquet file per chunk
    in a private temporary directory), so each chunk then reads only its own
    rows: one pass over the release whatever its size, where a query per
    chunk over all reports would read them once per chunk. DuckDB reads and
    sorts chunk k + 1 while a worker thread computes chunk k's tables (numpy),
    so the two overlap on two cores; at most two chunks are in memory, and the
    tables are joined in chunk order (the same tables as one chunk after another).
    """
    cell_sql = "step" if period is None else f"(step % {int(period)})"
    chunks = _chunks(con, cell_sql, n_rows, n_cells)
    lo, per = chunks[0][0], chunks[0][1] - chunks[0][0] + 1
    tables: list[tuple[Future[pd.DataFrame], Future[pd.DataFrame]]] = []
    with tempfile.TemporaryDirectory(prefix="privpipe-population-") as tmp, \
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="population") as pool:
        scratch = tmp.replace("'", "''")  # a path quoted for SQL
        # bounded: DuckDB flushes the open partitions (and spills) within the limit
        con.execute(f"SET temp_directory = '{scratch}/spill'")
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute("SET preserve_insertion_order = false")  # each chunk is sorted below
        con.execute("SET partitioned_write_flush_threshold = 65536")
        split = (f"COPY (SELECT y, step, ({cell_sql} - {int(lo)}) // {int(per)} AS part "  # noqa: S608
                 f"FROM s) TO '{scratch}/parts' (FORMAT parquet, PARTITION_BY (part))")
        con.execute(split)
        for k in range(len(chunks)):
            part = Path(tmp) / "parts" / f"part={k}"
            if not part.is_dir():
                continue
            files = str(part).replace("'", "''")
            # (step, y): a report order that does not depend on the scan's threads
            y, st = con.execute(
                f"SELECT y, step FROM read_parquet('{files}/*.parquet') ORDER BY step, y"  # noqa: S608
            ).fetchnumpy().values()
            if len(y) == 0:
                continue
            if tables:  # chunk k - 1 done: at most two chunks in memory
                wait(tables[-1])
            y, st = np.asarray(y, dtype=np.float64), np.asarray(st, dtype=np.int64)
            tables.append((pool.submit(_mean_table, y, st, period, epsilon_per_step, confidence),
                           pool.submit(_distribution_table, y, st, period, epsilon_per_step)))
        done = [(m.result(), d.result()) for m, d in tables]
    return (pd.concat([m for m, _ in done], ignore_index=True),
            pd.concat([d for _, d in done], ignore_index=True))


def _csv_bytes(df: pd.DataFrame) -> bytes:
    """The table as CSV (6 significant digits: far below the band widths)."""
    rounded = df.copy()
    for c in rounded.columns:
        if rounded[c].dtype.kind == "f":
            rounded[c] = [float(f"{v:.6g}") for v in rounded[c].to_numpy()]
    sink = pa.BufferOutputStream()
    pacsv.write_csv(pa.Table.from_pandas(rounded, preserve_index=False), sink)
    return sink.getvalue().to_pybytes()


def _in_units(df: pd.DataFrame, to_units: Any, cell: str) -> pd.DataFrame:
    out = df.rename(columns={"cell": cell})
    for c in out.columns:
        if c not in (cell, "reports"):
            out[c] = to_units(out[c].to_numpy())
    return out


def _open(samples_path: str, users: list[str] | None, min_users: int
          ) -> tuple[duckdb.DuckDBPyConnection, int, int, int]:
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # no bars on a CLI user's terminal
    con.read_parquet(samples_path).create_view("a")
    if users is not None:
        con.register("chosen", pd.DataFrame({"user_id": pd.Series(sorted(set(users)), dtype=str)}))
        con.execute("CREATE VIEW s AS SELECT a.* FROM a JOIN chosen USING (user_id)")
    else:
        con.execute("CREATE VIEW s AS SELECT * FROM a")
    n_users, n_rows, n_steps = con.execute(
        "SELECT count(DISTINCT user_id), count(*), count(DISTINCT step) FROM s").fetchone()
    if n_users < min_users:
        con.close()
        raise ParameterError(
            f"the population view needs at least {min_users} released users in the group; "
            f"{n_users} {'were released' if users is None else 'of the chosen users were'}")
    return con, int(n_users), int(n_rows), int(n_steps)


def _summed_or_open(summed: ScanSums | None, samples_path: str, users: list[str] | None,
                    min_users: int, epsilon_per_step: float
                    ) -> tuple[duckdb.DuckDBPyConnection, int, int, int, bool | None]:
    """`_open`'s connection and counts, from `summed` when it holds valid sums of every user.

    The last item is True when the connection already holds `scan_sums`'
    tables (from `summed`), None when they are still to be scanned.
    """
    con = (summed.tables() if summed is not None and users is None
           and summed.epsilon_per_step == epsilon_per_step else None)
    if con is None:
        return (*_open(samples_path, users, min_users), None)
    n_rows, n_steps = con.execute("SELECT sum(n)::BIGINT, count(*) FROM population_moments"
                                  ).fetchall()[0]
    if summed.users < min_users:
        raise ParameterError(f"the population view needs at least {min_users} released users in "
                             f"the group; {summed.users} were released")
    return con, summed.users, int(n_rows), int(n_steps), True


def population_view_fn(samples_path: str, out_dir: str, *, epsilon_per_step: float,
                       value_range: tuple[float, float] | None, value_unit: str,
                       period: int | None = None, users: list[str] | None = None,
                       min_users: int = 20, confidence: float = 0.95,
                       summed: ScanSums | None = None) -> dict[str, Any]:
    """Write the population tables and plots of one stream release; return a summary.

    `summed`: the release's reports already summed chunk by chunk (all its
    users, at `epsilon_per_step`): used instead of a scan of `samples_path`
    when valid (the same tables). Privacy: post-processing of the release's
    ε-w-event LDP Square Wave reports and public parameters (ε/w, step
    indices, value range, period): charges nothing and reads no raw data.
    Cost: O(reports) plus one EM per step and per phase.
    """
    if min_users < 1:
        raise ParameterError("min_users must be >= 1")
    if period is not None and period < 1:
        raise ParameterError("period must be >= 1")
    con, n_users, n_rows, n_steps, sums = _summed_or_open(summed, samples_path, users, min_users,
                                                          epsilon_per_step)
    out = Path(out_dir)
    make_dirs(out / "population")
    to_units = _scale(value_range)
    files: dict[str, str] = {}
    tables: dict[str, pd.DataFrame] = {}
    try:
        cuts = [("step", None, n_steps)] + ([("phase", period, period)] if period else [])
        if sums is None:
            sums = scan_sums(con, epsilon_per_step)  # one pass; None: report by report
        for cell, per, n_cells in cuts:
            mean, dist = (_cells(con, per, epsilon_per_step, confidence, n_rows, n_cells)
                          if sums is None else
                          cell_tables(con, per, epsilon_per_step, confidence))
            for kind, df in (("mean", mean), ("distribution", dist)):
                name = f"population/{cell}_{kind}.csv"
                tables[f"{cell}_{kind}"] = _in_units(df, to_units, cell)
                write_file(out / name, _csv_bytes(tables[f"{cell}_{kind}"]))
                files[f"{cell}_{kind}"] = name
    finally:
        con.close()
    from reports.plots_population import plot_population

    pngs = plot_population(tables, out / "plots", value_unit=value_unit,
                                 confidence=confidence, period=period)
    return {"users": n_users, "reports": n_rows, "steps": n_steps, "period": period,
            "confidence": confidence, "value_unit": value_unit, "files": files, "plots": pngs,
            "group": "all released users" if users is None else f"{n_users} chosen users",
            "charged": "nothing (post-processing of released reports)"}


population_view = task(population_view_fn, name="population-view", persist_result=False)
