"""Staging files and release outputs: round trips, determinism, no partial outputs."""

import hashlib
import os
import stat

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest import Curve, Stream, UserCurves, UserStreams
from tasks.outputs import ParquetAppender, merge_parquet
from tasks.staging import (
    group_spans,
    read_curve_chunk,
    read_stream_chunk,
    repeat_ids,
    stage_curve_chunk,
    stage_stream_chunk,
    write_arrow,
)


def _chunks(tmp_path, n=3):
    paths = []
    for i in range(n):
        rows = 5 + i
        table = pa.table({"user_id": repeat_ids([f"u{i}", f"v{i}"], [2, rows - 2]),
                          "t": pa.array(np.arange(rows, dtype=float) + i)})
        path = tmp_path / f"values-{i:05d}.arrow"
        write_arrow(table, path)
        paths.append(str(path))
    return paths


def test_appender_writes_the_bytes_of_merge_parquet(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    merged = merge_parquet(_chunks(tmp_path / "a"), tmp_path / "merged.parquet")
    app = ParquetAppender(tmp_path / "staging")
    for p in _chunks(tmp_path / "b"):
        app.add("values", p)
        assert not os.path.exists(p), "an appended chunk file is removed"
    assert not (tmp_path / "appended.parquet").exists()
    assert app.finish("values", tmp_path / "appended.parquet") == merged == 18
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()
              for n in ("merged.parquet", "appended.parquet")]
    assert digest[0] == digest[1]
    assert pq.ParquetFile(tmp_path / "appended.parquet").num_row_groups == 3
    assert "values" not in app


def test_curve_and_stream_chunks_round_trip_privately(tmp_path):
    users = [UserCurves("a", [Curve("c1", np.array([0.0, 1.0]), np.array([[1.0, 2.0], [3.0, 4.0]])),
                              Curve("c2", np.array([0.0, 2.0, 3.0]), np.ones((3, 2)))], ""),
             UserCurves("b'; --", [Curve("c1", np.array([0.0, 5.0]), np.zeros((2, 2)))], "")]
    path = tmp_path / "chunk-00000.arrow"
    stage_curve_chunk(users, path, ("x", "y"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = read_curve_chunk(path, ("x", "y"))
    assert [u.user_id for u in back] == ["a", "b'; --"]
    for u, v in zip(users, back, strict=True):
        assert [c.curve_id for c in u.curves] == [c.curve_id for c in v.curves]
        for c, d in zip(u.curves, v.curves, strict=True):
            np.testing.assert_array_equal(c.t, d.t)
            np.testing.assert_array_equal(c.values, d.values)
    streams = [UserStreams("m", [Stream("s0", np.array([3, 4, 5]), np.array([0.1, 0.2, 0.3]))],
                           "")]
    spath = tmp_path / "chunk-00001.arrow"
    stage_stream_chunk(streams, spath)
    (s,) = read_stream_chunk(spath)
    assert s.user_id == "m" and s.streams[0].stream_id == "s0"
    np.testing.assert_array_equal(s.streams[0].steps, [3, 4, 5])


def test_group_spans():
    assert group_spans(["a", "a", "b", "b", "b"], ["1", "2", "2", "2", "3"]) == [
        (0, 1), (1, 2), (2, 4), (4, 5)]
    assert group_spans([], []) == []
