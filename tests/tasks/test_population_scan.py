"""The population view from one aggregation (`tasks.population_scan`) against report by report."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mechanisms.reconstruct import population_distribution, population_mean
from mechanisms.reconstruct.em import _intervals, em_grid
from mechanisms.safe_sampling import snap_to_grid
from mechanisms.streams import square_wave
from mechanisms.streams.square_wave import square_wave_params
from tasks import population, population_scan
from tasks.population import population_view_fn
from tasks.stream_draw import STREAM_GRID

E0 = 0.7
FILES = ("step_mean", "step_distribution", "phase_mean", "phase_distribution")


def _samples(path: Path, users: int = 40, steps: int = 96, seed: int = 3) -> pd.DataFrame:
    """Released-like reports: Square Wave outputs on the release grid, some steps missing."""
    rng = np.random.default_rng(seed)
    b, _, _ = square_wave_params(E0)
    x = np.clip(0.5 + 0.3 * np.sin(np.arange(steps) / 8.0)[None, :]
                + 0.1 * rng.standard_normal((users, steps)), 0, 1)
    y = snap_to_grid(square_wave(x.ravel(), epsilon_per_step=E0, rng=rng), grid=STREAM_GRID,
                     bound=1 + b)
    df = pd.DataFrame({"user_id": np.repeat([f"u{i:03d}" for i in range(users)], steps),
                       "stream_id": "s", "step": np.tile(np.arange(steps, dtype=np.int64), users),
                       "y": y})
    df = df[rng.random(len(df)) > 0.1]  # users missing at some steps
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    return df


def _beyond(b: float, side: str) -> float:
    """A report on the release grid, 32 grid steps outside the support [-b, 1 + b] + slack."""
    if side == "above":
        return (np.ceil((1 + b) / STREAM_GRID) + 32) * STREAM_GRID
    return (np.floor(-b / STREAM_GRID) - 32) * STREAM_GRID


def _view(samples: Path, out: Path) -> dict[str, bytes]:
    population_view_fn(str(samples), str(out), epsilon_per_step=E0, value_range=(0.0, 4.0),
                       value_unit="kWh", period=24)
    return {f: (out / "population" / f"{f}.csv").read_bytes() for f in FILES}


@pytest.mark.parametrize("chunk_rows", [2_000_000, 500])
def test_one_aggregation_writes_the_bytes_of_the_report_by_report_path(
        tmp_path, monkeypatch, chunk_rows):
    """Same four CSV files, byte for byte (one chunk, and many chunks of steps)."""
    monkeypatch.setattr(population, "CHUNK_ROWS", chunk_rows)
    _samples(tmp_path / "samples.parquet")
    calls: list[object] = []
    real = population_scan.scan_sums
    monkeypatch.setattr(population, "scan_sums",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    new = _view(tmp_path / "samples.parquet", tmp_path / "new")
    assert calls and calls[0] is not None  # the aggregation path ran
    monkeypatch.setattr(population, "scan_sums", lambda *a: None)
    old = _view(tmp_path / "samples.parquet", tmp_path / "old")
    assert new == old


def test_the_aggregates_are_the_estimators_on_the_reports(tmp_path):
    """π bit for bit; counts exact; mean and band to rounding (exact sums vs float sums)."""
    df = _samples(tmp_path / "samples.parquet", users=30, steps=40, seed=8)
    con = duckdb.connect()
    con.read_parquet(str(tmp_path / "samples.parquet")).create_view("s")
    assert population_scan.scan_sums(con, E0) is not None
    df = df.sort_values(["step", "y"])
    for period in (None, 7):
        mean, dist = population_scan.cell_tables(con, period, E0, 0.9)
        m = population_mean(df["y"].to_numpy(), steps=df["step"].to_numpy(),
                            epsilon_per_step=E0, period=period, confidence=0.9)
        d = population_distribution(df["y"].to_numpy(), steps=df["step"].to_numpy(),
                                    epsilon_per_step=E0, period=period)
        np.testing.assert_array_equal(mean["cell"], m.cells)
        np.testing.assert_array_equal(mean["reports"], m.reports)
        np.testing.assert_allclose(mean["mean"], m.mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(mean["upper"], m.upper, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(dist["reports"], d.reports)
        np.testing.assert_array_equal(dist["mean"], d.mean)
        np.testing.assert_array_equal(dist[["q10", "q50", "q90"]].to_numpy(),
                                      d.quantiles[:, [0, 2, 4]])


@pytest.mark.parametrize("b", [None, 0.25])
def test_grid_intervals_are_searchsorted_at_the_boundaries(monkeypatch, b):
    """lo/hi of the SQL equal `em._intervals` where y ∓ b falls on or next to a grid point.

    With b = 1/4 (a multiple of the release grid) y ∓ b hits grid points exactly.
    """
    if b is None:
        b, _, _ = square_wave_params(E0)
    else:
        monkeypatch.setattr(population_scan, "square_wave_params", lambda e: (b, 0.0, 0.0))
    grid = em_grid(population_scan.GRID_SIZE)
    near = np.concatenate([grid + b, grid - b])
    y = snap_to_grid((near[:, None] + STREAM_GRID * np.arange(-3, 4)[None, :]).ravel(),
                     grid=STREAM_GRID, bound=1 + b)
    y = y[(y >= -b) & (y <= 1 + b)]
    con = duckdb.connect()
    con.register("s", pd.DataFrame({"step": np.arange(y.size, dtype=np.int64), "y": y}))
    sums = population_scan.scan_sums(con, E0)
    lo, hi = _intervals(y, grid, b)
    np.testing.assert_array_equal(sums["lo"], lo)
    np.testing.assert_array_equal(sums["hi"], hi)


@pytest.mark.parametrize("bad", ["off_grid", "nan", "outside"])
def test_reports_the_aggregation_cannot_take_go_report_by_report(tmp_path, bad):
    """Off the release grid, not finite or outside the support: None (the old path decides)."""
    b, _, _ = square_wave_params(E0)
    y = np.array([0.25, 0.5, {"off_grid": 0.1, "nan": np.nan, "outside": _beyond(b, "above")}[bad]])
    con = duckdb.connect()
    con.register("s", pd.DataFrame({"step": np.array([0, 1, 2]), "y": y}))
    assert population_scan.scan_sums(con, E0) is None


def _chunks_of_users(df: pd.DataFrame, sizes: list[int]) -> list[pa.Table]:
    """The reports cut into chunks of whole users, as a release collects them."""
    users = sorted(df["user_id"].unique())
    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] == len(users)
    return [pa.Table.from_pandas(df[df["user_id"].isin(users[a:b])], preserve_index=False)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@pytest.mark.parametrize("first_step", [0, 1000])
@pytest.mark.parametrize("sizes", [[40], [1, 7, 0, 12, 20], [1] * 40])
def test_sums_added_chunk_by_chunk_write_the_bytes_of_the_file_scan(tmp_path, monkeypatch, sizes,
                                                                   first_step):
    """Same four CSV files and summary, byte for byte, whatever the chunks (compacted or not).

    Streams starting at step 1000 (a later release's new ranges): every chunk's first
    step is then above 0, where a step and its index among the chunk's steps differ.
    """
    monkeypatch.setattr(population_scan.ScanSums, "COMPACT_EVERY", 3)
    df = _samples(tmp_path / "samples.parquet")
    if first_step:
        df = df.assign(step=df["step"] + first_step)
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "samples.parquet")
    summed = population_scan.ScanSums(E0)
    for table in _chunks_of_users(df, sizes):
        summed.add(table)
    assert summed.valid and summed.users == 40 and summed.rows == len(df)
    scanned: list[object] = []
    monkeypatch.setattr(population, "_open", lambda *a: scanned.append(a))  # must not run
    got = population_view_fn(str(tmp_path / "none.parquet"), str(tmp_path / "summed"),
                             epsilon_per_step=E0, value_range=(0.0, 4.0), value_unit="kWh",
                             period=24, summed=summed)
    assert scanned == []
    monkeypatch.undo()
    want = population_view_fn(str(tmp_path / "samples.parquet"), str(tmp_path / "file"),
                              epsilon_per_step=E0, value_range=(0.0, 4.0), value_unit="kWh",
                              period=24)
    for f in FILES:
        name = f"population/{f}.csv"
        assert (tmp_path / "summed" / name).read_bytes() == (tmp_path / "file" / name).read_bytes()
    assert {k: v for k, v in got.items() if k != "plots"} == {
        k: v for k, v in want.items() if k != "plots"}


@pytest.mark.parametrize("bad", ["off_grid", "nan", "outside", "negative_step"])
def test_a_chunk_the_scan_would_refuse_sends_the_view_back_to_the_file(tmp_path, monkeypatch,
                                                                       bad):
    """One bad report in a later chunk: the sums are not valid and the file path decides."""
    df = _samples(tmp_path / "samples.parquet", users=25, steps=30)
    good, last = _chunks_of_users(df, [20, 5])
    summed = population_scan.ScanSums(E0)
    summed.add(good)
    assert summed.tables() is not None
    b, _, _ = square_wave_params(E0)
    y, step = last.column("y").to_numpy().copy(), last.column("step").to_numpy().copy()
    if bad == "negative_step":
        step[3] = -1
    else:
        y[3] = {"off_grid": 0.1, "nan": np.nan, "outside": _beyond(b, "above")}[bad]
    last = last.set_column(last.schema.get_field_index("y"), "y", pa.array(y))
    last = last.set_column(last.schema.get_field_index("step"), "step", pa.array(step))
    summed.add(last)
    assert not summed.valid and summed.tables() is None
    opened: list[str] = []
    real = population._open
    monkeypatch.setattr(population, "_open", lambda path, *a: opened.append(path) or real(path, *a))
    got = population_view_fn(str(tmp_path / "samples.parquet"), str(tmp_path / "out"),
                             epsilon_per_step=E0, value_range=(0.0, 4.0), value_unit="kWh",
                             summed=summed)
    assert opened == [str(tmp_path / "samples.parquet")] and got["users"] == 25


def test_summed_view_refuses_too_few_users_like_the_file_path(tmp_path):
    from schemas.errors import ParameterError

    df = _samples(tmp_path / "samples.parquet", users=5, steps=10)
    summed = population_scan.ScanSums(E0)
    for table in _chunks_of_users(df, [2, 3]):
        summed.add(table)
    with pytest.raises(ParameterError, match="at least 20 released users.*; 5 were released"):
        population_view_fn(str(tmp_path / "samples.parquet"), str(tmp_path / "out"),
                           epsilon_per_step=E0, value_range=None, value_unit="kWh",
                           summed=summed)


def test_users_are_counted_by_their_ids_not_by_dictionary_codes(tmp_path):
    """A dictionary listing one id twice (a remote worker may encode so) is one user."""
    twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1], pa.int32()),
                                           pa.array(["u1", "u1", "u2"]))
    summed = population_scan.ScanSums(E0)
    summed.add(pa.table({"user_id": twice, "step": pa.array([0, 1, 0, 2]),
                         "y": pa.array([0.5, 0.25, 0.75, 0.5])}))
    summed.add(pa.table({"user_id": pa.array(["u3", "u3"]), "step": pa.array([0, 1]),
                         "y": pa.array([0.5, 0.5])}))
    assert summed.valid and summed.users == 3 and summed.rows == 6


def _sql_sums(step: np.ndarray, y: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`scan_sums`' SQL over the same reports: per-step moments, per-interval counts."""
    con = duckdb.connect()
    con.register("s", pd.DataFrame({"step": step, "y": y}))
    intervals = population_scan.scan_sums(con, E0)
    assert intervals is not None
    moments = con.execute("SELECT step, n, CAST(s1 AS VARCHAR) AS s1, CAST(s2 AS VARCHAR) AS s2 "
                          "FROM population_moments ORDER BY step").df()
    return moments, intervals


def _kernel_sums(step: np.ndarray, y: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`chunk_sums` of the same reports, Σk² put together in Python integers."""
    b, _, _ = square_wave_params(E0)
    got = population_scan.chunk_sums(step, y, b)
    assert got is not None
    m, i = (t.to_pandas() for t in got)
    s2 = [str(int(hh) * 2**26 + int(hl) * 2**14 + int(ll))
          for hh, hl, ll in zip(m["hh"], m["hl"], m["ll"], strict=True)]
    moments = pd.DataFrame({"step": m["step"], "n": m["n"], "s1": m["s1"].astype(str), "s2": s2})
    return moments, i.sort_values(["step", "lo", "hi"], ignore_index=True)


@pytest.mark.parametrize("spread", ["dense", "sparse"])
def test_kernel_sums_are_the_sql_sums(spread):
    """Per step n, Σk, Σk² and per (step, lo, hi) n: `chunk_sums` equals `scan_sums`' SQL.

    Reports across the whole support (negative k too), at the grid's edges; steps dense
    (counted by offset) or spread over 10^12 (counted after sorting).
    """
    b, _, _ = square_wave_params(E0)
    rng = np.random.default_rng(11)
    y = snap_to_grid(rng.uniform(-b, 1 + b, 20_000), grid=STREAM_GRID, bound=1 + b)
    y[:4] = [-b, 1 + b, 0.0, STREAM_GRID]
    y = snap_to_grid(y, grid=STREAM_GRID, bound=1 + b)
    step = rng.integers(0, 300, y.size)
    if spread == "sparse":
        step = step * 3_000_000_000 + 7
    want_m, want_i = _sql_sums(step, y)
    got_m, got_i = _kernel_sums(step, y)
    pd.testing.assert_frame_equal(got_m, want_m, check_dtype=False)
    pd.testing.assert_frame_equal(got_i, want_i, check_dtype=False)


def test_sums_are_exact_where_doubles_would_round():
    """Σk² of 4,096 reports at k near 2^25 is above 2^53: still exact, to the unit."""
    b = 4.0  # support [-4, 5]: |k| up to 2^26 - 1 (y just inside ±4)
    k = np.array([2**26 - 1, -(2**26 - 1), 2**25 + 3, 12345], dtype=np.int64)
    k = np.tile(k, 1024)
    m, _ = population_scan.chunk_sums(np.zeros(k.size, dtype=np.int64), k * STREAM_GRID, b)
    row = m.to_pylist()[0]
    s2 = row["hh"] * 2**26 + row["hl"] * 2**14 + row["ll"]
    assert (row["n"], row["s1"]) == (k.size, int(sum(int(v) for v in k)))
    assert s2 == sum(int(v) ** 2 for v in k) > 2**53
    for k_out in (2.0**26, -(2.0**26)):  # |k| = 2^26: beyond the exact range
        assert population_scan.chunk_sums(np.zeros(1, np.int64), np.array([k_out * STREAM_GRID]),
                                          b) is None


@pytest.mark.parametrize("b", [None, 0.25])
def test_kernel_intervals_are_searchsorted_at_the_boundaries(monkeypatch, b):
    """The kernel's lo/hi equal `em._intervals` where y ∓ b falls on or next to a grid point.

    One report per step, so each step's interval row names its report's (lo, hi);
    with b = 1/4 (a multiple of the release grid) y ∓ b hits grid points exactly, and
    y ∓ b runs below 0 and above 1 (the clamps, and floor/ceil of negative numbers).
    """
    if b is None:
        b, _, _ = square_wave_params(E0)
    grid = em_grid(population_scan.GRID_SIZE)
    near = np.concatenate([grid + b, grid - b, [-b, 1 + b, 0.0, 1.0]])
    y = snap_to_grid((near[:, None] + STREAM_GRID * np.arange(-3, 4)[None, :]).ravel(),
                     grid=STREAM_GRID, bound=1 + b)
    y = y[(y >= -b) & (y <= 1 + b)]
    got = population_scan.chunk_sums(np.arange(y.size, dtype=np.int64), y, b)
    assert got is not None
    rows = got[1].sort_by("step")
    lo, hi = _intervals(y, grid, b)
    np.testing.assert_array_equal(rows["step"].to_numpy(), np.arange(y.size))
    np.testing.assert_array_equal(rows["lo"].to_numpy(), lo)
    np.testing.assert_array_equal(rows["hi"].to_numpy(), hi)


def test_kernel_sums_take_any_layout_of_the_columns():
    """Strided views and int32 steps give the sums of the same values made contiguous."""
    b, _, _ = square_wave_params(E0)
    rng = np.random.default_rng(5)
    y = snap_to_grid(rng.uniform(-b, 1 + b, 4_000), grid=STREAM_GRID, bound=1 + b)
    step = rng.integers(0, 50, y.size)
    want = population_scan.chunk_sums(step, y, b)
    got = population_scan.chunk_sums(np.repeat(step, 2)[::2].astype(np.int32),
                                     np.repeat(y, 2)[::2], b)
    assert want is not None and got is not None
    assert all(g.equals(w) for g, w in zip(got, want, strict=True))


def test_kernel_checks_its_arguments():
    """Wrong dtypes, shapes, grid or cells are errors naming the argument, not wrong sums."""
    from tasks import _popsums

    b, _, _ = square_wave_params(E0)
    idx, y = np.array([0, 1], np.int64), np.array([0.25, 0.5])
    width = population_scan.GRID_SIZE + 1
    out = [np.zeros(2, np.int64) for _ in range(5)]
    pairs = np.zeros(width * width, np.int64)

    def moments(idx=idx, y=y, offset=0, grid=population_scan.GRID_SIZE, out=out, pairs=pairs):
        return _popsums.moments(idx, y, offset, b, grid, STREAM_GRID, -b - 1, 2 + b, 2.0**26,
                                13, *out, pairs)

    assert moments() is True
    with pytest.raises(TypeError, match="moments: y has the wrong dtype"):
        moments(y=y.astype(np.float32))
    with pytest.raises(TypeError, match="moments: idx has the wrong dtype"):
        moments(idx=idx.astype(np.int32))
    with pytest.raises(ValueError, match="built for a grid of 64, not 32"):
        moments(grid=32)
    with pytest.raises(ValueError, match="outside the arrays"):
        moments(offset=-5)
    with pytest.raises(ValueError, match="inconsistent shapes"):
        moments(pairs=np.zeros(10, np.int64))
    with pytest.raises(ValueError, match="inconsistent shapes"):
        moments(out=[np.zeros(2, np.int64)] * 4 + [np.zeros(3, np.int64)])
    code = np.full(width * width, -1, np.int64)  # no pair numbered
    with pytest.raises(ValueError, match="cell or pair is outside counts"):
        _popsums.interval_counts(idx, y, 0, b, population_scan.GRID_SIZE, code,
                                 np.zeros(4, np.int64))


@pytest.mark.parametrize("at", [0, 1, 2])
@pytest.mark.parametrize("bad", ["off_grid", "nan", "inf", "outside", "below", "negative_step"])
def test_kernel_sums_refuse_what_the_sql_refuses(bad, at):
    """Whichever report is the bad one (the kernel stops at the first: no partial sums)."""
    b, _, _ = square_wave_params(E0)
    y, step = np.array([0.25, 0.5, 0.75]), np.array([0, 1, 2])
    if bad == "negative_step":
        step[at] = -1
    else:
        y[at] = {"off_grid": 0.1, "nan": np.nan, "inf": np.inf, "outside": _beyond(b, "above"),
                "below": _beyond(b, "below")}[bad]
    assert population_scan.chunk_sums(step, y, b) is None
    con = duckdb.connect()
    con.register("s", pd.DataFrame({"step": step, "y": y}))
    assert population_scan.scan_sums(con, E0) is None


def test_a_chunk_longer_than_sum_rows_is_summed_in_slices(tmp_path, monkeypatch):
    """Slices of `SUM_ROWS` rows give the tables of one slice (the limit that keeps sums exact)."""
    df = _samples(tmp_path / "samples.parquet", users=30, steps=40)
    table = pa.Table.from_pandas(df, preserve_index=False)
    whole = population_scan.ScanSums(E0)
    whole.add(table)
    monkeypatch.setattr(population_scan, "SUM_ROWS", 97)
    sliced = population_scan.ScanSums(E0)
    sliced.add(table)
    query = ("SELECT step, n, s1, s2 FROM population_moments ORDER BY step",
             "SELECT * FROM population_intervals ORDER BY step, lo, hi")
    for q in query:
        assert sliced.tables().execute(q).fetchall() == whole.tables().execute(q).fetchall()
    assert (sliced.users, sliced.rows) == (whole.users, whole.rows) == (30, len(df))
    with pytest.raises(ValueError, match="at most 97 rows"):
        population_scan.chunk_sums(np.zeros(98, np.int64), np.zeros(98), 0.5)


def test_the_em_batches_change_no_bit(tmp_path, monkeypatch):
    """Each cell's EM is its own: batches of 1, 3 or all cells give the same tables, bit for bit."""
    _samples(tmp_path / "samples.parquet", users=30, steps=40, seed=9)
    con = duckdb.connect()
    con.read_parquet(str(tmp_path / "samples.parquet")).create_view("s")
    assert population_scan.scan_sums(con, E0) is not None
    got = []
    for cells in (1, 3, population_scan.EM_BATCH_CELLS):
        monkeypatch.setattr(population_scan, "EM_BATCH_CELLS", cells)
        got.append([population_scan.cell_tables(con, period, E0, 0.9) for period in (None, 7)])
    for tables in got[1:]:
        for (mean, dist), (mean0, dist0) in zip(tables, got[0], strict=True):
            pd.testing.assert_frame_equal(mean, mean0, check_exact=True)
            pd.testing.assert_frame_equal(dist, dist0, check_exact=True)
    assert len(got[0][0][1]) == 40 and len(got[0][1][1]) == 7
