"""The floor benchmark's statement and table, and the stream chunk benchmark's chunk."""

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.floor import VALUE_COLUMNS, floor_sql, table
from benchmarks.streams.chunk_task import make_chunk
from tasks.privatize import StreamSpec, privatize_stream_chunk


def test_the_floor_adds_bounded_noise_to_the_value_columns_only(tmp_path):
    src, out = tmp_path / "in'put.parquet", tmp_path / "out.parquet"  # a quote in the path
    rows = 2000
    pq.write_table(pa.table({"user_id": [f"u{i // 10}" for i in range(rows)],
                             "curve_id": ["c0"] * rows, "t": np.arange(rows, dtype=float),
                             "x": np.zeros(rows), "y": np.full(rows, 3.0)}), src)
    duckdb.connect().execute(floor_sql(src, out, VALUE_COLUMNS["curves"]))
    got = pq.read_table(out)
    assert got.column_names == ["user_id", "curve_id", "t", "x", "y"]
    assert got.num_rows == rows
    assert got.column("t").to_pylist() == list(np.arange(rows, dtype=float))
    x, y = got.column("x").to_numpy(), got.column("y").to_numpy() - 3.0
    for noise in (x, y):
        assert np.all(np.abs(noise) <= 0.5) and np.unique(noise).size > rows // 2
        assert abs(noise.mean()) < 4 * np.sqrt(1 / 12 / rows)  # U(-1/2, 1/2): mean 0
    assert pq.ParquetFile(out).metadata.row_group(0).column(3).compression == "ZSTD"


def test_the_table_prints_ratio_and_shares_of_the_wall():
    row = {"kind": "streams", "users": 10, "points": 10_000, "floor": 2.0, "wall": 10.0,
           "ingest": 1.0, "ledger": 2.0, "mech_span": 5.0, "report": 0.5, "other": 1.5,
           "cpu": 12.0, "rss": 500.0, "reserve_span": 2.5, "tasks": {"privatize-streams": 6.0}}
    text = table([row])
    assert ("| streams | 10 | 10,000 | 2.0 | 10.0 | 5.0x | 10 | 20 | 50 | 5 | 15 | 12.0 | 500 "
            "| 2.5 |") in text
    assert "privatize-streams 6.0" in text


def test_the_chunk_benchmark_builds_a_chunk_the_task_draws_whole():
    chunk = make_chunk(3, 8, continued=True)
    res = privatize_stream_chunk(chunk, StreamSpec(epsilon="5", w=5, reconstruct="none"))
    assert res.tables["samples"].num_rows == 24
    assert [c[2].runs[0].start for c in res.costs] == [4, 4, 4]  # only the new halves cost


def test_the_reserve_span_runs_from_the_first_plan_or_reserve_to_the_last_reserve():
    from benchmarks.floor import reserve_span

    stages = {"plan-stream-continuation": {"first": 10.0, "last": 30.0},
              "ledger-reserve": {"first": 14.0, "last": 41.0},
              "privatize-streams": {"first": 5.0, "last": 90.0}}
    assert reserve_span({"stages": stages}) == 31.0
    assert reserve_span({"stages": {"ledger-reserve": {"first": 3.0, "last": 4.5}}}) == 1.5
    assert reserve_span({"stages": {}}) == 0.0
