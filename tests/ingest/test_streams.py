"""Stream ingestion: step indices, duplicates, declared range and normalisation."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from ingest import Rejection, UserStreams, iter_users, scan
from schemas.errors import ValidationError
from tests.ingest.conftest import make_domain, write_csv

HEADER = ["user_id", "stream_id", "t", "value"]


def _run(tmp_path, rows, domain=None, **kw):
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    return {r.user_id: r for r in iter_users(f, domain or make_domain(kind="streams"), **kw)}


def test_step_streams_normalised_by_declared_range(tmp_path):
    rows = [["u", "s", 10, 0.0], ["u", "s", 11, 25.0], ["u", "s", 13, 100.0]]
    u = _run(tmp_path, rows)["u"]
    assert isinstance(u, UserStreams)
    (s,) = u.streams
    assert s.steps.dtype == np.int64
    np.testing.assert_array_equal(s.steps, [10, 11, 13])      # absolute, gaps kept
    np.testing.assert_array_equal(s.values, [0.0, 0.25, 1.0])


def test_values_outside_range_rejected_not_clipped(tmp_path):
    rows = [["u", "s", 0, 50.0], ["u", "s", 1, 100.5], ["u", "s", 2, -0.1], ["v", "s", 0, 1.0]]
    res = _run(tmp_path, rows)
    assert isinstance(res["v"], UserStreams)
    probs = res["u"].problems
    assert [(p.row, p.column, p.rule) for p in probs] == [(2, "value", "value range"),
                                                          (3, "value", "value range")]
    assert "[0, 100]" in probs[0].message
    assert "100.5" not in probs[0].message


def test_step_unit_needs_integers(tmp_path):
    rows = [["u", "s", 0, 1.0], ["u", "s", 1.5, 1.0], ["u", "s", "2020-01-01", 1.0]]
    probs = _run(tmp_path, rows)["u"].problems
    assert {(p.row, p.rule) for p in probs} == {(2, "integer step"), (3, "integer step")}


def test_duplicate_and_decreasing_steps_rejected(tmp_path):
    rows = [["u", "s", 0, 1.0], ["u", "s", 1, 1.0], ["u", "s", 1, 1.0], ["u", "s", 0, 1.0]]
    probs = _run(tmp_path, rows)["u"].problems
    assert [(p.row, p.rule) for p in probs] == [(3, "t strictly increasing"),
                                                (4, "t strictly increasing")]


def test_duration_unit_floors_to_steps_from_epoch(tmp_path):
    dom = make_domain(kind="streams", time_unit="min", step=30)
    t0 = datetime(2021, 3, 1, tzinfo=UTC)
    rows = [["u", "s", (t0 + timedelta(minutes=m, seconds=sec)).isoformat(), 1.0]
            for m, sec in ((0, 0), (30, 0), (95, 59))]
    (s,) = _run(tmp_path, rows, dom)["u"].streams
    base = int(t0.timestamp()) // 1800          # 30-minute steps since 1970-01-01 UTC
    np.testing.assert_array_equal(s.steps, [base, base + 1, base + 3])
    # plain numbers are minutes since the epoch in this domain
    rows = [["u", "s", m, 1.0] for m in (0, 29.9, 30, 61)]
    probs = _run(tmp_path, rows, dom)["u"].problems
    assert [(p.row, p.rule) for p in probs] == [(2, "t strictly increasing")]  # 0 and 29.9 share
    rows = [["u", "s", m, 1.0] for m in (0, 30, 61, 95)]
    (s,) = _run(tmp_path, rows, dom)["u"].streams
    np.testing.assert_array_equal(s.steps, [0, 1, 2, 3])
    rows = [["u", "s", ms, 1.0] for ms in (0, 1_800_000, 5_400_000)]
    (s,) = _run(tmp_path, rows, dom, input_time_unit="ms")["u"].streams
    np.testing.assert_array_equal(s.steps, [0, 1, 3])


def test_multiple_streams_per_user_and_sort(tmp_path):
    rows = [["u", "b", 3, 10.0], ["u", "a", 2, 20.0], ["u", "b", 1, 30.0], ["u", "a", 5, 40.0]]
    res = _run(tmp_path, rows)
    assert isinstance(res["u"], Rejection)   # stream b is unsorted
    res = _run(tmp_path, rows, make_domain(kind="streams", sort=True))
    a, b = res["u"].streams
    assert (a.stream_id, b.stream_id) == ("a", "b")
    np.testing.assert_array_equal(b.steps, [1, 3])
    np.testing.assert_array_equal(b.values, [0.3, 0.1])


def test_default_streams_domain_only_finiteness(tmp_path):
    from ingest import default_domain

    rows = [["u", "s", 0, 1e6], ["u", "s", 1, -5.0]]
    (s,) = _run(tmp_path, rows, default_domain("streams"))["u"].streams
    np.testing.assert_array_equal(s.values, [1e6, -5.0])
    rows = [["u", "s", 0, "nan"], ["u", "s", 1, 1.0]]
    assert isinstance(_run(tmp_path, rows, default_domain("streams"))["u"], Rejection)


def test_stream_scan_reports_raw_value_range(tmp_path):
    rows = [["u", "s", 0, 20.0], ["u", "s", 1, 80.0], ["v", "s", 7, 50.0]]
    rep = scan(write_csv(tmp_path / "in.csv", HEADER, rows), make_domain(kind="streams"))
    assert rep.valid and rep.kind == "streams"
    assert rep.t_span == (0.0, 7.0)
    assert rep.value_ranges["value"] == pytest.approx((20.0, 80.0))


def test_date_column_in_step_domain_is_file_error(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"user_id": "u", "stream_id": "s", "value": 1.0,
                       "t": pd.to_datetime(["2020-01-01", "2020-01-02"], utc=True)})
    with pytest.raises(ValidationError) as exc:
        scan(df, make_domain(kind="streams"))
    assert (exc.value.problems[0].column, exc.value.problems[0].rule) == ("t", "dtype")


def test_huge_step_indices_rejected_not_overflowed(tmp_path):
    rows = [["u", "s", 0, 1.0], ["u", "s", "1e300", 1.0], ["v", "s", 2**53, 1.0],
            ["w", "s", 2**53 - 1, 1.0]]
    res = _run(tmp_path, rows)
    assert [(p.row, p.rule) for p in res["u"].problems] == [(2, "step in [0, 2^53)")]
    # 2^53 is refused: 2^53 + 1 reads as the same double; 2^53 - 1 is the last exact step
    assert [(p.row, p.rule) for p in res["v"].problems] == [(3, "step in [0, 2^53)")]
    (s,) = res["w"].streams
    assert s.steps[0] == 2**53 - 1
