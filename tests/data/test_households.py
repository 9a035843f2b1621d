"""The household population: real day shapes, known periods, missing days, chunks."""

import numpy as np
import pandas as pd
import pytest

from data import households as hh
from ingest import scan
from tests.ingest.conftest import make_domain


def test_households_have_their_declared_period_and_missing_days():
    df = hh.households(60, 10, seed=4)
    periods = hh.household_periods(60, seed=4)
    assert df.attrs["periods"] == {f"hh_{i:07d}": int(p) for i, p in enumerate(periods)}
    assert set(periods) <= {24, 48, 96}
    assert 0.0 <= df["value"].min() and df["value"].max() <= hh.VALUE_MAX
    steps = df.groupby("user_id")["t"].agg(["min", "max", "count"])
    assert (steps["min"] == 0).all() and (steps["count"] % 48 == 0).all()
    assert (steps["count"] < 480).any()  # some days are missing ...
    assert steps["count"].sum() > 0.9 * 60 * 480  # ... about 3 % of them
    # the declared period repeats: the lag-P differences are smaller than at another lag
    better = []
    for user, g in df.groupby("user_id"):
        p = df.attrs["periods"][user]
        v = pd.Series(g["value"].to_numpy(), index=g["t"].to_numpy())

        def lag_sd(k, v=v):
            both = v.index[np.isin(v.index + k, v.index)]
            return np.std(v.loc[both + k].to_numpy() - v.loc[both].to_numpy())

        better.append(lag_sd(p) < lag_sd(p + 7))
    assert np.mean(better) >= 0.9
    assert scan(df, make_domain(kind="streams", value_range=[0.0, hh.VALUE_MAX])).valid


def test_households_are_seeded_and_chunks_make_one_population():
    a = hh.households(30, 3, seed=9)
    pd.testing.assert_frame_equal(a, hh.households(30, 3, seed=9))
    b = hh.households(30, 3, seed=9, first_household=30)
    assert set(a["user_id"]).isdisjoint(b["user_id"])
    assert not np.allclose(a["value"].to_numpy()[:100], b["value"].to_numpy()[:100])
    with pytest.raises(ValueError):
        hh.households(0, 3, seed=1)
