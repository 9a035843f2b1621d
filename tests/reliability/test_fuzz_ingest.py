"""Hypothesis over ingestion: CSV files with random bad content.

`ingest.scan` either summarises the file or raises a privpipe error; every
rejection names file, rule and message (and a row or column when it is about
one); `privpipe validate` exits 0 or 2 and never prints a traceback.
"""

from __future__ import annotations

import csv
import io
import tempfile
from pathlib import Path

import harness
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from flows.cli import app
from ingest import scan
from schemas.errors import PrivpipeError, ValidationError
from schemas.policy import load_policy

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
CELLS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**6, 10**20).map(str),
    st.sampled_from(["", "nan", "NaN", "inf", "-inf", "1e400", "abc", "1,5", "'; DROP TABLE t;--",
                     "\"quoted\"", "2024-01-01T00:00:00Z", "2024-13-45", "NULL", " ", "0x10",
                     "user-0", "c0", "🙂", "\\N"]),
    st.text(max_size=8),
)
CURVE_COLUMNS = ["user_id", "curve_id", "t", "x", "y"]
STREAM_COLUMNS = ["user_id", "stream_id", "t", "value"]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return harness.write_policy(tmp_path_factory.mktemp("pol") / "policy.toml")


def _csv(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _table(columns):
    """A header (the right columns, some dropped/renamed/duplicated) and random rows."""
    header = st.lists(st.one_of(st.sampled_from(columns), st.text(max_size=5)), min_size=0,
                      max_size=len(columns) + 2).flatmap(
        lambda h: st.just(h) if h else st.just(list(columns)))
    good = st.just(list(columns))
    return st.one_of(good, good, header).flatmap(lambda h: st.tuples(
        st.just(h), st.lists(st.lists(CELLS, min_size=len(h), max_size=len(h)), max_size=12)))


def _check_scan(path: Path, dom) -> None:
    try:
        rep = scan(path, dom)
    except ValidationError as err:
        assert err.problems
        for p in err.problems:
            assert p.file and p.rule and p.message
        return
    except PrivpipeError as err:
        assert str(err)
        return
    for p in rep.problems:
        assert p.file and p.rule and p.message
        assert p.row is not None or p.column is not None or p.user_id is not None, p


@SETTINGS
@given(kind=st.sampled_from(["curves", "streams"]), data=st.data())
def test_scan_random_csv(policy, kind, data):
    cols = CURVE_COLUMNS if kind == "curves" else STREAM_COLUMNS
    header, rows = data.draw(_table(cols))
    dom = load_policy(policy).domain("tracks" if kind == "curves" else "meters")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.csv"
        path.write_text(_csv(header, rows), encoding="utf-8")
        _check_scan(path, dom)


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_scan_random_bytes(policy, raw):
    dom = load_policy(policy).domain("tracks")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.csv"
        path.write_bytes(b"user_id,curve_id,t,x,y\n" + raw)
        _check_scan(path, dom)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["curves", "streams"]), data=st.data(),
       fmt=st.sampled_from(["table", "csv", "json"]))
def test_validate_cli_random_csv(policy, kind, data, fmt):
    cols = CURVE_COLUMNS if kind == "curves" else STREAM_COLUMNS
    header, rows = data.draw(_table(cols))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.csv"
        path.write_text(_csv(header, rows), encoding="utf-8")
        res = CliRunner().invoke(app, ["validate", str(path), "--kind", kind, "--policy",
                                       str(policy), "--format", fmt])
    assert res.exit_code in (0, 2), res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
