"""Time conversion: ISO 8601 strings, epoch seconds and milliseconds, date/time columns.

Expected values are computed independently with the standard library's
datetime arithmetic (integer seconds), never with the code under test.
"""

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from ingest import Rejection, iter_users
from tests.ingest.conftest import make_domain, write_csv

HEADER = ["user_id", "curve_id", "t", "value"]
T0 = datetime(2020, 12, 1, 11, 31, 39, tzinfo=UTC)
OFFSETS_S = [0, 1, 61, 3599, 86_400 + 7, 6 * 86_400 + 13]   # up to a week


def _one(tmp_path, values, domain=None, **kw):
    rows = [["u", "c", v, float(i)] for i, v in enumerate(values)]
    (u,) = iter_users(write_csv(tmp_path / "in.csv", HEADER, rows), domain or make_domain(), **kw)
    assert not isinstance(u, Rejection), u
    return u.curves[0]


@pytest.mark.parametrize("fmt", ["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"])
def test_iso_strings_to_seconds_from_start(tmp_path, fmt):
    stamps = [(T0 + timedelta(seconds=s)).strftime(fmt) for s in OFFSETS_S]
    c = _one(tmp_path, stamps)
    np.testing.assert_array_equal(c.t, np.array(OFFSETS_S, dtype=float))
    assert c.t[0] == 0.0
    assert c.start == T0.timestamp()


def test_iso_with_offsets_are_instants(tmp_path):
    # the same instants written in three time zones
    zones = [timezone(timedelta(hours=h)) for h in (0, 1, -5)]
    stamps = [(T0 + timedelta(seconds=s)).astimezone(zones[i % 3]).isoformat()
              for i, s in enumerate(OFFSETS_S)]
    c = _one(tmp_path, stamps)
    np.testing.assert_array_equal(c.t, np.array(OFFSETS_S, dtype=float))


def test_fractional_seconds_keep_microseconds(tmp_path):
    stamps = ["2020-12-01T00:00:00.000001Z", "2020-12-01T00:00:00.500000Z",
              "2020-12-01T00:00:01.250000Z"]
    c = _one(tmp_path, stamps)
    np.testing.assert_allclose(c.t, [0.0, 0.499999, 1.249999], rtol=0, atol=1e-9)


def test_epoch_seconds_are_plain_numbers_in_seconds(tmp_path):
    epoch = int(T0.timestamp())
    c = _one(tmp_path, [epoch + s for s in OFFSETS_S])
    np.testing.assert_array_equal(c.t, np.array(OFFSETS_S, dtype=float))
    assert c.start == float(epoch)


def test_epoch_milliseconds_with_input_time_unit(tmp_path):
    epoch_ms = int(T0.timestamp()) * 1000
    c = _one(tmp_path, [epoch_ms + 1000 * s + 250 for s in OFFSETS_S], input_time_unit="ms")
    np.testing.assert_allclose(c.t, np.array(OFFSETS_S, dtype=float), rtol=0, atol=1e-6)


def test_domain_time_unit_hours(tmp_path):
    stamps = [(T0 + timedelta(seconds=s)).isoformat() for s in (0, 1800, 7200)]
    c = _one(tmp_path, stamps, make_domain(time_unit="h"))
    np.testing.assert_allclose(c.t, [0.0, 0.5, 2.0], rtol=0, atol=1e-12)
    c = _one(tmp_path, [0, 90, 7200], make_domain(time_unit="min"), input_time_unit="s")
    np.testing.assert_allclose(c.t, [0.0, 1.5, 120.0], rtol=0, atol=1e-12)


def test_datetime_column_pandas3_microseconds_not_kiloseconds(tmp_path):
    # pandas >= 3 parses to datetime64[us]: .astype("int64") / 1e9 would give
    # kiloseconds. The ingested t must be seconds.
    ts = pd.to_datetime([(T0 + timedelta(seconds=s)).isoformat() for s in OFFSETS_S], utc=True)
    df = pd.DataFrame({"user_id": "u", "curve_id": "c", "t": ts, "value": 1.0})
    df["value"] = np.arange(len(df), dtype=float)
    (u,) = iter_users(df, make_domain())
    np.testing.assert_array_equal(u.curves[0].t, np.array(OFFSETS_S, dtype=float))
    df.to_parquet(tmp_path / "in.parquet")
    (u,) = iter_users(tmp_path / "in.parquet", make_domain())
    np.testing.assert_array_equal(u.curves[0].t, np.array(OFFSETS_S, dtype=float))
    naive = df.assign(t=ts.tz_localize(None))
    (u,) = iter_users(naive, make_domain())
    np.testing.assert_array_equal(u.curves[0].t, np.array(OFFSETS_S, dtype=float))


def test_bad_and_mixed_time_formats(tmp_path):
    rows = [["u", "c", "2020-12-01T00:00:00Z", 1.0], ["u", "c", "yesterday", 1.0],
            ["u", "c", "2020-12-01T00:00:09Z", 1.0], ["v", "c", "2020-12-01T00:00:00Z", 1.0],
            ["v", "c", 5, 1.0], ["w", "c", "", 1.0], ["w", "c", 3, 1.0]]
    res = {r.user_id: r for r in iter_users(write_csv(tmp_path / "in.csv", HEADER, rows),
                                             make_domain())}
    assert [(p.row, p.column, p.rule, p.value) for p in res["u"].problems] == [
        (2, "t", "t format", "yesterday")]
    assert [(p.row, p.rule) for p in res["v"].problems] == [(5, "t format")]
    assert [(p.row, p.rule) for p in res["w"].problems] == [(6, "required")]
