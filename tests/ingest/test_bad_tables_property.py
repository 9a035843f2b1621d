"""Hypothesis-generated bad tables never crash ingestion and always locate the problem.

Each example builds a table of several users, corrupts some cells of some users
with NaN, inf, 1e308-scale overflows, text, empty cells, duplicated or unsorted
times, hostile ids, and checks that ingestion:
- never raises anything but `ValidationError` (file-level problems);
- rejects exactly the corrupted users (and accepts the untouched ones);
- names a row (1-based, within the file), a column and a rule for each problem.
"""

import csv

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import Rejection, UserCurves, scan
from schemas.errors import ValidationError
from tests.ingest.conftest import make_domain

HEADER = ["user_id", "curve_id", "t", "value"]
IDS = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")),
              min_size=1, max_size=12)
CORRUPTIONS = ["nan", "inf", "-inf", "1e309", "1e300", "-1.7e308", "text", "", "dup_t",
               "unsorted_t", "bad_t", "empty_t", "one_point", "huge_t"]


@st.composite
def tables(draw):
    n_users = draw(st.integers(1, 5))
    ids = draw(st.lists(IDS, min_size=n_users, max_size=n_users, unique=True))
    users = {}
    for uid in ids:
        n = draw(st.integers(3, 8))
        t = np.cumsum(draw(st.lists(st.floats(0.5, 1e4), min_size=n, max_size=n)))
        # any double a mechanism can work with (|v| <= 1e100: squares, L2 norms and
        # noisy coefficients stay inside the float range); larger ones are corruptions
        v = draw(st.lists(st.floats(-1e100, 1e100), min_size=n, max_size=n))
        users[uid] = [[uid, "c", repr(float(a)), repr(float(b))] for a, b in zip(t, v,
                                                                                  strict=True)]
    bad = draw(st.lists(st.sampled_from(ids), unique=True, max_size=n_users))
    for uid in bad:
        rows = users[uid]
        kind = draw(st.sampled_from(CORRUPTIONS))
        i = draw(st.integers(1, len(rows) - 1))
        if kind in ("nan", "inf", "-inf", "1e309", "1e300", "-1.7e308", "text", ""):
            rows[i][3] = {"text": "abc"}.get(kind, kind)
        elif kind == "dup_t":
            rows[i][2] = rows[i - 1][2]
        elif kind == "unsorted_t":
            rows[i - 1], rows[i] = rows[i], rows[i - 1]
        elif kind == "bad_t":
            rows[i][2] = "not-a-time"
        elif kind == "empty_t":
            rows[i][2] = ""
        elif kind == "huge_t":
            rows[-1][2] = "1.7e308"
        else:
            users[uid] = rows[:1]
    order = draw(st.permutations(ids))
    return [r for uid in order for r in users[uid]], set(bad), set(ids)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=tables())
def test_bad_tables_are_located(tmp_path, data):
    rows, bad, ids = data
    path = tmp_path / "in.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        w.writerows(rows)
    try:
        rep = scan(path, make_domain(), batch_rows=7)
    except ValidationError as err:
        # only a whole-column problem may stop the file
        assert all(p.row is None and p.column and p.rule for p in err.problems)
        return
    rejected = {r.user_id for r in rep.rejected}
    assert rejected == bad
    assert set(rep.user_fingerprints) == ids - bad
    for r in rep.rejected:
        assert isinstance(r, Rejection) and r.problems
        for p in r.problems:
            assert isinstance(p.row, int) and 1 <= p.row <= len(rows)
            assert p.column in HEADER and p.rule and p.user_id == r.user_id
            assert rows[p.row - 1][0] == r.user_id


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.sampled_from(["1", "x", "", "nan", "1e308", "-0", "0x10", "1,5"]),
                      min_size=2, max_size=6))
def test_wrong_dtypes_never_crash(tmp_path, cells):
    path = tmp_path / "in.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        for i, c in enumerate(cells):
            w.writerow(["u", "c", c, c if i % 2 else "1.0"])
    try:
        rep = scan(path, make_domain())
    except ValidationError as err:
        assert all(p.rule and p.column for p in err.problems)
        return
    for p in rep.problems:
        assert p.row is not None and p.column in HEADER and p.rule
    if not rep.problems:
        assert rep.users == 1 and isinstance(rep.user_fingerprints["u"], str)
        assert UserCurves  # accepted
