"""The straight read: an input in (user, key) order goes through without a private copy.

`iter_users(..., spill=False)` yields users as the scan reaches them and
raises `NeedsSpill` at the first batch out of order (or at the first cell that
ends a CSV's typed read); `read_users`, `scan` and the release's staging then
read again through the spill file. Whichever path a read takes, the users,
fingerprints and problems (with the file's rows) are those of the spilled read,
and a staging that started over leaves none of its first chunks behind.
"""

import random
from pathlib import Path

import pytest

import ingest
import ingest.pipeline as pipeline
import ingest.spill as spill
from files.staging import items_path
from ingest import NeedsSpill, iter_users, read_users, scan
from tasks import stage
from tasks.stage import stage_input_fn
from tests.ingest.conftest import write_csv
from tests.ingest.test_read_order import HEADER, _rows, _summary


def _shuffled(rows):
    curve_key = [random.Random(k).random() for k in range(len(rows) // 5)]
    order = sorted(range(len(rows)), key=lambda i: (curve_key[i // 5], i))
    return [rows[i] for i in order]


def _counting(calls):
    def consume(users):
        calls.append(1)
        return _summary(users)
    return consume


def _no_spill(*_a, **_k):
    raise AssertionError("an input in order was copied to the spill file")


@pytest.mark.parametrize("batch_rows", [1, 7, 200_000])
def test_an_input_in_order_is_read_once_with_no_copy(tmp_path, curves_domain, monkeypatch,
                                                     batch_rows):
    rows = _rows()
    rows[33][3] = "oops"
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    spilled = _summary(iter_users(f, curves_domain, batch_rows=batch_rows))
    spilled_scan = scan(f, curves_domain, batch_rows=batch_rows)
    monkeypatch.setattr(spill, "_spill", _no_spill)
    calls = []
    assert read_users(f, curves_domain, _counting(calls), batch_rows=batch_rows) == spilled
    assert calls == [1]
    assert scan(f, curves_domain, batch_rows=batch_rows) == spilled_scan


@pytest.mark.parametrize("batch_rows", [1, 7, 200_000])
def test_an_input_out_of_order_is_read_again_through_the_spill(tmp_path, curves_domain,
                                                               batch_rows):
    rows = _rows()
    rows[33][3] = "oops"
    f = write_csv(tmp_path / "in.csv", HEADER, _shuffled(rows))
    spilled = _summary(iter_users(f, curves_domain, batch_rows=batch_rows))
    with pytest.raises(NeedsSpill):
        list(iter_users(f, curves_domain, batch_rows=batch_rows, spill=False))
    calls = []
    assert read_users(f, curves_domain, _counting(calls), batch_rows=batch_rows) == spilled
    assert calls == [1, 1]
    report = scan(f, curves_domain, batch_rows=batch_rows)
    assert report.user_fingerprints == {u: v for u, v in spilled.items() if u != "u03"}
    assert [(r.user_id, [p.row for p in r.problems]) for r in report.rejected] == [
        ("u03", [p for p, _, _ in spilled["u03"]])]


def test_the_straight_read_stops_before_the_batch_out_of_order(tmp_path, curves_domain):
    rows = [["a", "c", 0, 1.0], ["a", "c", 1, 2.0], ["b", "c", 0, 3.0], ["b", "c", 1, 4.0],
            ["a", "d", 0, 5.0], ["a", "d", 1, 6.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    seen = []
    with pytest.raises(NeedsSpill):
        for user in iter_users(f, curves_domain, batch_rows=2, spill=False):
            seen.append(user.user_id)
    assert seen == ["a"]  # "b" was pending when the third batch came out of order
    (a, b) = iter_users(f, curves_domain, batch_rows=2)
    assert [c.curve_id for c in a.curves] == ["c", "d"] and b.user_id == "b"


def test_a_late_cell_that_ends_the_typed_read_reads_again_as_text(tmp_path, curves_domain):
    # numbers in the head: the plan reads the CSV typed; the bad cell is far past the head
    rows = [[f"u{u:04d}", "c", t, float(t)] for u in range(1000) for t in range(4)]
    rows[3001][3] = "n/a"
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    with pipeline.open_source(f) as src:  # the plan reads this file typed
        assert pipeline._plan(src, curves_domain, None).typed_sql is not None
    with pytest.raises(NeedsSpill):
        list(iter_users(f, curves_domain, batch_rows=500, spill=False))
    calls = []
    out = read_users(f, curves_domain, _counting(calls), batch_rows=500)
    assert calls == [1, 1]
    assert out["u0750"] == [(3002, "value", "number")]
    assert out == _summary(iter_users(f, curves_domain, batch_rows=500))


def test_staging_that_starts_over_keeps_no_chunk_of_its_first_read(tmp_path, curves_domain,
                                                                   monkeypatch):
    rows = _rows()
    rows = rows[:60] + rows[80:] + rows[60:80]  # users u06 and u07 come last
    shuffled = write_csv(tmp_path / "late.csv", HEADER, rows)
    ordered = write_csv(tmp_path / "ordered.csv", HEADER, _rows())
    real = ingest.read_users
    starts = []

    def small_batches(*args, **kwargs):
        starts.append(1)
        return real(*args, batch_rows=5, **kwargs)

    monkeypatch.setattr(ingest, "read_users", small_batches)
    late = stage_input_fn(str(shuffled), curves_domain, str(tmp_path / "a"), chunk_users=1)
    good = stage_input_fn(str(ordered), curves_domain, str(tmp_path / "b"), chunk_users=1)
    assert len(late.chunks) == len(good.chunks) == 12
    assert [c.user_ids for c in late.chunks] == [c.user_ids for c in good.chunks]
    assert [c.fingerprints for c in late.chunks] == [c.fingerprints for c in good.chunks]
    assert late.fingerprint == good.fingerprint
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert len(names) == 24  # a samples file and an item file per chunk, nothing else
    for chunk in late.chunks:
        for path in (chunk.path, str(items_path(chunk.path))):
            other = path.replace(str(tmp_path / "a"), str(tmp_path / "b"))
            assert open(path, "rb").read() == open(other, "rb").read()


def test_staging_that_starts_over_removes_what_it_wrote(tmp_path, curves_domain, monkeypatch):
    # every user staged by the first read; a bad row of u00..u05 at the end stops it,
    # and rejects those six users in the second: no chunk file of the first read stays
    rows = _rows() + [[f"u{u:02d}", "c1", 99, "oops"] for u in range(6)]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    real = ingest.read_users
    monkeypatch.setattr(ingest, "read_users", lambda *a, **k: real(*a, batch_rows=5, **k))
    staged = []
    real_flush = stage._flush

    def flush(*args):
        chunk = real_flush(*args)
        staged.append(chunk.user_ids)
        return chunk

    monkeypatch.setattr(stage, "_flush", flush)
    plan = stage_input_fn(str(f), curves_domain, str(tmp_path / "s"), chunk_users=1)
    assert [r["user_id"] for r in plan.rejected] == [f"u{u:02d}" for u in range(6)]
    assert [c.user_ids for c in plan.chunks] == [(f"u{u:02d}",) for u in range(6, 12)]
    # the first read staged u00..u10 (u11 was pending when the bad rows came), then stopped
    assert staged == [(f"u{u:02d}",) for u in [*range(11), *range(6, 12)]]
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(
        name for c in plan.chunks for name in (Path(c.path).name, items_path(c.path).name))
