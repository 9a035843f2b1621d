"""Validated ingestion of curves: rules, rejections, row numbers, grouping, chunking."""

import hashlib
import random

import numpy as np
import pandas as pd
import pytest

from ingest import Curve, Rejection, UserCurves, iter_users, scan
from ingest.fingerprint import OrderedInputFingerprint, input_fingerprint
from schemas.errors import ParameterError, ValidationError
from tests.ingest.conftest import make_domain, write_csv

HEADER = ["user_id", "curve_id", "t", "value"]


def _users(results):
    return {r.user_id: r for r in results}


def test_valid_file_yields_sorted_users_with_curves(tmp_path, curves_domain):
    rows = [["b", "c1", 10, 1.0], ["b", "c1", 11.5, 2.0], ["a", "z", 3, 5.0],
            ["a", "z", 4, 6.0], ["a", "y", 0, 7.0], ["a", "y", 2, 8.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    out = list(iter_users(f, curves_domain))
    assert [u.user_id for u in out] == ["a", "b"]
    a, b = out
    assert isinstance(a, UserCurves)
    assert [c.curve_id for c in a.curves] == ["y", "z"]
    y, z = a.curves
    np.testing.assert_array_equal(y.t, [0.0, 2.0])
    np.testing.assert_array_equal(z.t, [0.0, 1.0])  # from the curve's start (3 s)
    assert z.start == 3.0
    np.testing.assert_array_equal(z.values, [[5.0], [6.0]])
    assert z.values.shape == (2, 1) and z.t.dtype == np.float64
    np.testing.assert_array_equal(b.curves[0].t, [0.0, 1.5])
    assert len(a.fingerprint) == 64


def test_nan_in_row_17_names_row_and_column(tmp_path, curves_domain):
    rows = [["u", "c", i, float(i)] for i in range(30)]
    rows[16][3] = "nan"
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    rep = scan(f, curves_domain)
    assert not rep.valid and rep.users == 0
    (rej,) = rep.rejected
    (p,) = rej.problems
    assert (p.row, p.column, p.rule, p.user_id) == (17, "value", "finite", "u")
    assert "row 17" in p.describe() and "'value'" in p.describe()


def test_bad_user_rejected_whole_with_every_reason_others_go_on(tmp_path, curves_domain):
    rows = [["good", "c", 0, 1.0], ["good", "c", 1, 1.0],
            ["bad", "c", 0, 1.0], ["bad", "c", 0, "inf"], ["bad", "c", 2, "x"],
            ["bad", "d", 5, 1.0],
            ["good2", "c", 0, 1.0], ["good2", "c", 1, 1.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    res = _users(iter_users(f, curves_domain))
    assert isinstance(res["good"], UserCurves) and isinstance(res["good2"], UserCurves)
    rej = res["bad"]
    assert isinstance(rej, Rejection)
    got = {(p.row, p.column, p.rule) for p in rej.problems}
    assert got == {(4, "t", "t strictly increasing"), (4, "value", "finite"),
                   (5, "value", "number"), (6, "curve_id", "at least 2 points")}
    assert all(p.user_id == "bad" and p.file == str(f) for p in rej.problems)


def test_unsorted_rejected_unless_sort_true(tmp_path):
    rows = [["u", "c", 5, 50.0], ["u", "c", 1, 10.0], ["u", "c", 3, 30.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    (rej,) = iter_users(f, make_domain())
    assert {(p.row, p.rule) for p in rej.problems} == {(2, "t strictly increasing")}
    (ok,) = iter_users(f, make_domain(sort=True))
    np.testing.assert_array_equal(ok.curves[0].t, [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(ok.curves[0].values[:, 0], [10.0, 30.0, 50.0])


def test_sort_true_still_rejects_duplicates(tmp_path):
    rows = [["u", "c", 5, 1.0], ["u", "c", 1, 1.0], ["u", "c", 5, 2.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    (rej,) = iter_users(f, make_domain(sort=True))
    assert isinstance(rej, Rejection)
    assert [(p.row, p.rule) for p in rej.problems] == [(3, "t strictly increasing")]


def test_one_point_curve_rejected(tmp_path, curves_domain):
    f = write_csv(tmp_path / "in.csv", HEADER, [["u", "c", 0, 1.0]])
    (rej,) = iter_users(f, curves_domain)
    assert [(p.row, p.column, p.rule) for p in rej.problems] == [(1, "curve_id",
                                                                  "at least 2 points")]


def test_missing_user_id_rows_are_file_problems(tmp_path, curves_domain):
    rows = [["", "c", 0, 1.0], ["", "c", 1, 1.0], ["u", "c", 0, 1.0], ["u", "c", 1, 1.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    rep = scan(f, curves_domain)
    assert rep.users == 1 and not rep.rejected
    assert {(p.row, p.column, p.rule) for p in rep.file_problems} == {
        (1, "user_id", "required"), (2, "user_id", "required")}
    assert not rep.valid


def test_empty_string_id_from_parquet_is_rejected(tmp_path, curves_domain):
    df = pd.DataFrame({"user_id": ["", "", "u", "u"], "curve_id": ["c", "c", "", ""],
                       "t": [0.0, 1.0, 0.0, 1.0], "value": 1.0})
    df.to_parquet(tmp_path / "in.parquet")
    res = list(iter_users(tmp_path / "in.parquet", curves_domain))
    assert all(isinstance(r, Rejection) for r in res)
    rules = {(p.row, p.column, p.rule) for r in res for p in r.problems}
    assert {(1, "user_id", "non-empty id"), (3, "curve_id", "non-empty id")} <= rules


@pytest.mark.parametrize("uid", [
    "o'brien", 'say "hi"', "x'; DROP TABLE users; --", "Robert'); DELETE FROM t;--",
    "ünïcødé 用户 🚢", "  spaced  ", "NULL", "a,b",
])
def test_hostile_ids_are_just_text(tmp_path, curves_domain, uid):
    rows = [[uid, uid, 0, 1.0], [uid, uid, 1, 2.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    (u,) = iter_users(f, curves_domain)
    assert isinstance(u, UserCurves)
    assert u.user_id == uid and u.curves[0].curve_id == uid


@pytest.mark.parametrize("uid", ["new\nline", "nul\x00", "esc\x1b[2J", "csi\x9b"])
def test_ids_with_control_characters_are_rejected_naming_the_row(tmp_path, curves_domain, uid):
    rows = [["ok", "c", 0, 1.0], ["ok", "c", 1, 2.0], [uid, "c", 0, 1.0], [uid, "c", 1, 2.0]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    users = {u.user_id: u for u in iter_users(f, curves_domain)}
    ok, bad = users["ok"], users[uid]
    assert isinstance(ok, UserCurves) and isinstance(bad, Rejection)
    assert (bad.problems[0].row, bad.problems[0].column, bad.problems[0].rule) == (
        3, "user_id", "id without control characters")


def test_large_user_is_never_split_across_batches(tmp_path, curves_domain):
    rows = [["big", "c", i, float(i)] for i in range(50)] + [["small", "c", i, 1.0]
                                                             for i in range(3)]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    for batch in (1, 7, 49, 50, 51, 10_000):
        res = _users(iter_users(f, curves_domain, batch_rows=batch))
        assert len(res["big"].curves[0].t) == 50
        assert len(res["small"].curves[0].t) == 3


def test_fingerprints_independent_of_row_order_and_chunking(tmp_path, curves_domain):
    rng = np.random.default_rng(3)
    rows = [[f"u{u}", f"c{c}", t, float(rng.normal())] for u in range(6) for c in range(2)
            for t in range(5)]
    f1 = write_csv(tmp_path / "a.csv", HEADER, rows)
    # interleave users and curves, keeping each curve's own order
    inter = sorted(rows, key=lambda r: (r[2], r[0], r[1]))
    f2 = write_csv(tmp_path / "b.csv", HEADER, inter)
    r1 = scan(f1, curves_domain)
    r2 = scan(f2, curves_domain, batch_rows=4)
    r3 = scan(f2, curves_domain, batch_rows=1)
    assert r1.user_fingerprints == r2.user_fingerprints == r3.user_fingerprints
    assert r1.fingerprint == r2.fingerprint == r3.fingerprint
    # any change of a converted value changes the user's and the input's fingerprint
    rows[7][3] += 1e-9
    r4 = scan(write_csv(tmp_path / "c.csv", HEADER, rows), curves_domain)
    changed = {u for u in r1.user_fingerprints if r1.user_fingerprints[u]
               != r4.user_fingerprints[u]}
    assert changed == {"u0"}
    assert r4.fingerprint != r1.fingerprint


def test_input_fingerprint_is_hash_of_sorted_user_fingerprints(tmp_path, curves_domain):
    import hashlib
    import struct

    from ingest.fingerprint import _VERSION, input_fingerprint

    rows = [[u, "c", t, 1.0] for u in ("b", "a") for t in range(3)]
    rep = scan(write_csv(tmp_path / "in.csv", HEADER, rows), curves_domain)
    h = hashlib.sha256(_VERSION + b"input\0")
    for u in ("a", "b"):
        h.update(struct.pack("<Q", 1) + u.encode())
        h.update(bytes.fromhex(rep.user_fingerprints[u]))
    assert rep.fingerprint == h.hexdigest() == input_fingerprint(rep.user_fingerprints)


def test_scan_summary(tmp_path):
    rows = [["a", "c", 0, 1.0, -3.0], ["a", "c", 2, 4.0, 0.0], ["b", "c", 0, 2.0, 7.0],
            ["b", "c", 5, 3.0, 1.0], ["b", "d", 1, 9.0, 2.0], ["b", "d", 2, 9.0, 2.0]]
    f = write_csv(tmp_path / "in.csv", ["user_id", "curve_id", "t", "p", "q"], rows)
    rep = scan(f, make_domain(value_columns=["p", "q"]))
    assert rep.valid
    assert (rep.rows, rep.users, rep.curves_or_streams, rep.points) == (6, 2, 3, 6)
    assert rep.t_span == (0.0, 5.0)
    assert rep.value_ranges == {"p": (1.0, 9.0), "q": (-3.0, 7.0)}
    assert rep.kind == "curves" and rep.domain == "d"


def test_extra_columns_ignored_and_multiple_value_columns(tmp_path):
    rows = [["a", "c", 0, 1.0, 2.0, "note"], ["a", "c", 1, 3.0, 4.0, "x"]]
    f = write_csv(tmp_path / "in.csv", ["user_id", "curve_id", "t", "v1", "v2", "comment"], rows)
    (u,) = iter_users(f, make_domain(value_columns=["v2", "v1"]))
    np.testing.assert_array_equal(u.curves[0].values, [[2.0, 1.0], [4.0, 3.0]])


def test_values_a_mechanism_cannot_use_are_rejected_before_any_charge(tmp_path, curves_domain):
    # 1e308 is a finite double, but its square overflows: the mechanism would fail
    # after the reservation. Validation rejects it, naming row, column and rule.
    rows = [["u", "c", 0, 1e308], ["u", "c", 1, -1e100], ["v", "c", 0, "1e309"],
            ["v", "c", 1, 1.0], ["w", "c", 0, 1.0], ["w", "c", 1.7e308, 2.0],
            ["ok", "c", 0, 1e100], ["ok", "c", 1, -1e100]]
    res = _users(iter_users(write_csv(tmp_path / "in.csv", HEADER, rows), curves_domain))
    assert [(p.row, p.column, p.rule) for p in res["u"].problems] == [
        (1, "value", "|value| <= 1e100")]
    assert isinstance(res["v"], Rejection)
    assert res["v"].problems[0].row == 3 and res["v"].problems[0].column == "value"
    assert [(p.row, p.column, p.rule) for p in res["w"].problems] == [
        (6, "t", "t within 1e15 time units of the curve's start")]
    assert isinstance(res["ok"], UserCurves)


def test_a_fixed_window_rejects_longer_curves(tmp_path):
    dom = make_domain(public={"duration": False, "points": True}, window=2.0)
    rows = [["a", "c", 0, 1.0], ["a", "c", 2.0, 1.0], ["b", "c", 0, 1.0], ["b", "c", 2.5, 1.0]]
    res = _users(iter_users(write_csv(tmp_path / "in.csv", HEADER, rows), dom))
    assert isinstance(res["a"], UserCurves)
    assert [(p.row, p.column, p.rule) for p in res["b"].problems] == [
        (4, "t", "t within the domain's window")]


def test_curve_objects_are_independent_copies(tmp_path, curves_domain):
    rows = [["u", "c", t, 1.0] for t in range(3)] + [["v", "c", t, 2.0] for t in range(3)]
    out = list(iter_users(write_csv(tmp_path / "in.csv", HEADER, rows), curves_domain))
    out[0].curves[0].values[:] = 99.0
    assert np.all(out[1].curves[0].values == 2.0)
    assert isinstance(out[0].curves[0], Curve)


@pytest.mark.parametrize("kwargs", [
    {"batch_rows": 0}, {"batch_rows": 1.5}, {"input_time_unit": "weeks"},
    {"max_problems_per_user": 0},
])
def test_parameters_checked_before_reading(kwargs, curves_domain, tmp_path):
    with pytest.raises(ParameterError):
        scan(tmp_path / "does-not-exist.csv", curves_domain, **kwargs)


def test_input_time_unit_not_for_step_streams(tmp_path):
    with pytest.raises(ParameterError):
        scan(tmp_path / "x.csv", make_domain(kind="streams"), input_time_unit="s")


def test_errors_and_messages_never_carry_values(tmp_path, curves_domain):
    secret = "31415.9265"
    rows = [["u", "c", 0, secret], ["u", "c", 0, "inf"], ["u", "c", 1, "SECRETTEXT"]]
    rep = scan(write_csv(tmp_path / "in.csv", HEADER, rows), curves_domain)
    text = " ".join(p.describe() for p in rep.problems) + " ".join(
        p.message for p in rep.problems)
    assert "31415" not in text and "SECRETTEXT" not in text
    shown = " ".join(p.describe(show_values=True) for p in rep.problems)
    assert "SECRETTEXT" in shown


def test_file_level_errors_raise(tmp_path, curves_domain):
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path / "missing.csv", curves_domain)
    assert exc.value.problems[0].rule == "exists"
    f = write_csv(tmp_path / "nocol.csv", ["user_id", "curve_id", "time", "value"],
                  [["u", "c", 0, 1]])
    with pytest.raises(ValidationError) as exc:
        scan(f, curves_domain)
    (p,) = exc.value.problems
    assert (p.row, p.column, p.rule) == (None, "t", "required column")
    assert "time" in p.message  # names the columns the file has
    f = write_csv(tmp_path / "text.csv", HEADER, [["u", "c", 0, "a"], ["u", "c", 1, "b"]])
    with pytest.raises(ValidationError) as exc:
        scan(f, curves_domain)
    assert [(p.column, p.rule) for p in exc.value.problems] == [("value", "dtype")]
    f = write_csv(tmp_path / "empty.csv", HEADER, [])
    with pytest.raises(ValidationError) as exc:
        scan(f, curves_domain)
    assert exc.value.problems[0].rule == "not empty"
    (tmp_path / "zero.csv").write_bytes(b"")
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path / "zero.csv", curves_domain)
    assert exc.value.problems[0].rule in ("required column", "readable", "not empty")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path / "junk.parquet", curves_domain)
    assert exc.value.problems[0].rule == "readable"
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path, curves_domain)
    assert exc.value.problems[0].rule == "exists"


def test_iter_users_checks_parameters_on_call(tmp_path, curves_domain):
    with pytest.raises(ParameterError):
        iter_users(tmp_path / "does-not-exist.csv", curves_domain, batch_rows=-1)
    it = iter_users(tmp_path / "does-not-exist.csv", curves_domain)   # file opened lazily
    with pytest.raises(ValidationError):
        next(it)


def test_problem_list_is_capped_but_keeps_every_reason(tmp_path, curves_domain):
    rows = [["u", "c", t, "nan"] for t in range(30)] + [["u", "c", 30, "x"]]
    f = write_csv(tmp_path / "in.csv", HEADER, rows)
    (rej,) = iter_users(f, curves_domain, max_problems_per_user=5)
    rules = [p.rule for p in rej.problems]
    assert rules == ["finite"] * 5 + ["number", "more problems"]
    assert "25 more problems" in rej.problems[-1].message
    (full,) = iter_users(f, curves_domain)
    assert len(full.problems) == 31


def test_ordered_input_fingerprint_is_the_input_fingerprint():
    # staging hashes users as they come (in id order) and keeps only the rejected ids
    rng = random.Random(4)
    for _ in range(50):
        ids = sorted({"".join(rng.choices("abcé😀'\"; ", k=rng.randint(1, 6)))
                      for _ in range(rng.randint(0, 40))})
        accepted, rejected = {}, []
        acc = OrderedInputFingerprint()
        for u in ids:
            if rng.random() < 0.2:
                rejected.append(u)
                acc.reject(u)
            else:
                accepted[u] = hashlib.sha256(u.encode()).hexdigest()
                acc.add(u, accepted[u])
            if rng.random() < 0.1:
                acc.reject("")  # rows without a user id: not hashed
        assert acc.users == len(accepted)
        assert acc.hexdigest() == input_fingerprint(accepted, rejected + [""])
    acc = OrderedInputFingerprint()
    acc.add("b", "00" * 32)
    with pytest.raises(RuntimeError, match="unsorted"):
        acc.reject("a")
    with pytest.raises(RuntimeError, match="unsorted"):
        acc.add("b", "00" * 32)
