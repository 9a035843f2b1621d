"""The reader's one scan in record order: inputs already in user order, and the others.

`ingest.pipeline` scans a source once, writes the converted rows to a private
Arrow file and sorts them only when they did not come in (user, key) order.
Both paths must give the same users, fingerprints and problems (with the
rows of the file), whatever the batch size; a CSV that DuckDB cannot parse is
a file-level problem wherever the bad record is.
"""

import random

import pandas as pd
import pytest

import ingest.spill as spill
import ingest.straight as straight
from ingest import Rejection, UserCurves, iter_users, scan
from schemas.errors import ValidationError
from tests.ingest.conftest import write_csv

HEADER = ["user_id", "curve_id", "t", "value"]


def _rows() -> list[list[object]]:
    rows = []
    for u in range(12):
        for c in ("c0", "c1"):
            rows += [[f"u{u:02d}", c, t, float(u * 100 + t)] for t in range(5)]
    return rows


def _summary(results):
    out = {}
    for r in results:
        if isinstance(r, Rejection):
            out[r.user_id] = sorted((p.row, p.column, p.rule) for p in r.problems)
        else:
            assert isinstance(r, UserCurves)
            out[r.user_id] = r.fingerprint
    return out


@pytest.fixture
def sorts(monkeypatch):
    """Counts the DuckDB sorts of the reader's rows (the path taken)."""
    calls = []
    real = spill._in_order  # the order check of both reads (`ingest.rows._in_order`)

    def spy(users, keys, last):
        ok = real(users, keys, last)
        calls.append(ok)
        return ok

    for module in (spill, straight):
        monkeypatch.setattr(module, "_in_order", spy)
    return calls


@pytest.mark.parametrize("batch_rows", [1, 3, 7, 200_000])
def test_sorted_and_shuffled_files_give_the_same_users(tmp_path, curves_domain, batch_rows):
    rows = _rows()
    rows[33][3] = "oops"  # user u03, curve c0: a bad value
    sorted_csv = write_csv(tmp_path / "sorted.csv", HEADER, rows)
    # curves (runs of 5 rows) in a random order; within a curve the rows keep
    # their order (t strictly increasing)
    curve_key = [random.Random(k).random() for k in range(len(rows) // 5)]
    order = sorted(range(len(rows)), key=lambda i: (curve_key[i // 5], i))
    shuffled = [rows[i] for i in order]
    shuffled_csv = write_csv(tmp_path / "shuffled.csv", HEADER, shuffled)
    a = _summary(iter_users(sorted_csv, curves_domain, batch_rows=batch_rows))
    b = _summary(iter_users(shuffled_csv, curves_domain, batch_rows=batch_rows))
    assert list(a) == sorted(a) == list(b)  # users come out in id order either way
    assert {u: v for u, v in a.items() if u != "u03"} == {u: v for u, v in b.items()
                                                         if u != "u03"}
    # the problem names the row of each file (1-based data rows)
    bad_in_shuffled = order.index(33) + 1
    assert a["u03"] == [(34, "value", "number")]
    assert b["u03"] == [(bad_in_shuffled, "value", "number")]


def test_a_user_out_of_place_at_a_batch_boundary_is_sorted(tmp_path, curves_domain, sorts):
    # each batch of 3 rows is in order by itself; only the boundary is not
    rows = [["b", "c", 0, 1.0], ["b", "c", 1, 2.0], ["b", "c", 2, 3.0],
            ["a", "c", 0, 4.0], ["a", "c", 1, 5.0], ["a", "c", 2, 6.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    out = list(iter_users(f, curves_domain, batch_rows=3))
    assert [u.user_id for u in out] == ["a", "b"]
    assert False in sorts
    assert [c.values[:, 0].tolist() for c in out[0].curves] == [[4.0, 5.0, 6.0]]


def test_keys_out_of_order_within_a_user_are_sorted(tmp_path, curves_domain, sorts):
    rows = [["a", "z", 0, 1.0], ["a", "z", 1, 2.0], ["a", "y", 0, 3.0], ["a", "y", 1, 4.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    (user,) = iter_users(f, curves_domain)
    assert [c.curve_id for c in user.curves] == ["y", "z"]
    assert sorts == [False]


def test_an_input_in_user_order_is_read_without_a_sort(tmp_path, curves_domain, sorts,
                                                       monkeypatch):
    f = write_csv(tmp_path / "in.csv", HEADER, _rows())
    # the rows that come in order are read as they were written, never sorted
    def no_register(*_a, **_k):
        raise AssertionError("the rows were sorted though they came in order")

    monkeypatch.setattr(spill, "_sorted_rows", no_register)
    out = list(iter_users(f, curves_domain, batch_rows=10))
    assert len(out) == 12 and all(sorts)


def test_a_malformed_record_deep_in_a_csv_is_a_file_problem(tmp_path, curves_domain):
    f = tmp_path / "in.csv"
    lines = ["user_id,curve_id,t,value"] + [f"u{i:05d},c,0,1.0" for i in range(50_000)]
    lines[40_001] = "u40000,c,0"  # a record with a field missing
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValidationError) as exc:
        scan(f, curves_domain)
    (p,) = exc.value.problems
    # lines[40_001] is the file's line 40,002 and its data row 40,001
    assert (p.rule, p.row, p.column) == ("csv field count", 40_001, None) and str(f) in p.file
    assert "line 40002 has 3 fields, the header has 4" in p.message
    assert "u40000" not in p.message  # the record's text is never repeated


def test_a_csv_column_named_row_is_reserved(tmp_path, curves_domain):
    f = write_csv(tmp_path / "in.csv", [*HEADER, "_row"], [["u", "c", 0, 1.0, 7]])
    with pytest.raises(ValidationError) as exc:
        scan(f, curves_domain)
    assert exc.value.problems[0].rule == "reserved column"


def test_null_ids_sort_last_and_are_rejected(tmp_path, curves_domain, sorts):
    frame = pd.DataFrame({"user_id": [None, "a", "a"], "curve_id": ["c", "c", "c"],
                          "t": [0.0, 0.0, 1.0], "value": [1.0, 2.0, 3.0]})
    out = list(iter_users(frame, curves_domain))
    assert isinstance(out[0], UserCurves) and out[0].user_id == "a"
    assert isinstance(out[1], Rejection) and out[1].user_id == ""
    assert sorts == [False]
