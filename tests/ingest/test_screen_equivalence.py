"""The numpy screen + pandera-on-flagged-users gives exactly what pandera on every row gives.

Ingestion validates a batch by screening every row rule with numpy and running
pandera only on the rows of the users the screen flags. These tests run the same
inputs through that path and through the reference path (pandera on the whole
batch, by making the screen flag every row) and require identical results: the
same rejected users with the same problems (file, row, column, rule, message)
and the same accepted users with the same fingerprints. They cover plain and
projected curves (lon/lat ranges, Mercator), streams with a value range and
integer steps, with NaN, inf, out-of-range values, empty ids, duplicate and
unsorted times and one-point curves.
"""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import Rejection, iter_users
from ingest import pipeline as P
from schemas import samples as S
from tests.ingest.conftest import make_domain

DOMAINS = {
    "curves": dict(),
    "curves_sorted": dict(sort=True),
    "equirectangular": dict(projection="equirectangular", ref_lat=45.0),
    "mercator": dict(projection="mercator"),
    "streams_range": dict(kind="streams"),
    "streams_sorted": dict(kind="streams", sort=True),
}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 90.0, -90.0, 180.0, 180.5, -200.0, 100.0, 100.5,
           -1.0, 0.5, 2.0**53, 2.0**54, 1e308]


@st.composite
def frames(draw, kind: str, projected: bool):
    n_users = draw(st.integers(1, 6))
    ids = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "x'y", "a;--"]),
                        min_size=n_users, max_size=n_users, unique=True))
    rows = []
    for uid in ids:
        for key in draw(st.lists(st.sampled_from(["k1", "k2"]), min_size=1, max_size=2,
                                 unique=True)):
            n = draw(st.integers(1, 6))
            t = np.cumsum(draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=n,
                                        max_size=n)))
            for i in range(n):
                a = float(draw(st.floats(0, 80)))
                b = float(draw(st.floats(0, 80)))
                rows.append([uid, key, float(t[i]), a, b])
    # corrupt some cells
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(rows) - 1))
        col = draw(st.sampled_from([2, 3, 4]))
        what = draw(st.sampled_from(["special", "special", "dup_t", "swap", "none_id",
                                     "empty_id", "half_t"]))
        if what == "special":
            rows[i][col] = draw(st.sampled_from(SPECIAL))
        elif what == "dup_t" and i > 0:
            rows[i][2] = rows[i - 1][2]
        elif what == "swap" and i > 0:
            rows[i - 1][2], rows[i][2] = rows[i][2], rows[i - 1][2]
        elif what == "none_id":
            rows[i][draw(st.sampled_from([0, 1]))] = None
        elif what == "empty_id":
            rows[i][draw(st.sampled_from([0, 1]))] = ""
        elif what == "half_t":
            rows[i][2] += 0.5
    key = "curve_id" if kind == "curves" else "stream_id"
    if kind == "streams":
        cols = ["user_id", key, "t", "value", "other"]
    elif projected:
        cols = ["user_id", key, "t", "lon", "lat"]
    else:
        cols = ["user_id", key, "t", "value", "value2"]
    return pd.DataFrame(rows, columns=cols)


def _results(source, domain, **kw):
    out = []
    for r in iter_users(source, domain, **kw):
        if isinstance(r, Rejection):
            out.append(("rejected", r.user_id, tuple(r.problems)))
        else:
            out.append(("accepted", r.user_id, r.fingerprint))
    return out


def _reference(monkeypatch, source, domain, **kw):
    """Pandera on every row of every batch: the screen flags everything."""
    with monkeypatch.context() as m:
        m.setattr(P._Batch, "_suspects", lambda self: np.arange(self.n))
        return _results(source, domain, **kw)


@pytest.mark.parametrize("source", ["frame", "csv"])
@pytest.mark.parametrize("name", sorted(DOMAINS))
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_screen_matches_pandera_on_every_row(monkeypatch, tmp_path, name, source, data):
    keys = dict(DOMAINS[name])
    kind = keys.get("kind", "curves")
    projected = "projection" in keys
    if kind == "curves" and not projected:
        keys["value_columns"] = ["value", "value2"]
    domain = make_domain(**keys)
    df = data.draw(frames(kind, projected))
    src: object = df
    if source == "csv":  # NaN and inf as text, empty cells as missing
        src = tmp_path / "in.csv"
        df.to_csv(src, index=False)
    batch_rows = data.draw(st.sampled_from([3, 7, 1000]))
    with np.errstate(all="ignore"):
        fast = _results(src, domain, batch_rows=batch_rows)
        assert fast == _reference(monkeypatch, src, domain, batch_rows=batch_rows)


def test_screen_flags_every_rule():
    """Each row rule of the curve schema, one bad row each, is flagged by the screen."""
    t = np.array([0.0, 1.0, 1.0, 3.0, np.nan, 5.0, 0.0])
    v = np.array([0.0, 1.0, 2.0, np.inf, 4.0, 5.0, 6.0])
    lat = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 91.0, 0.0])
    same = np.array([False, True, True, True, True, True, False])  # last row: a 1-point curve
    bad_ids = np.zeros(7, dtype=bool)
    flagged = S.curve_rows_failing(t, {"lon": v, "lat": lat}, same=same, bad_ids=bad_ids,
                                   lon_lat=("lon", "lat"))
    assert flagged.tolist() == [False, False, True, True, True, True, True]
