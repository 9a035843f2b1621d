"""Seeded synthetic generators: determinism, documented shapes and ranges, validity."""

import numpy as np
import pandas as pd
import pytest

from data import synthetic
from ingest import default_domain, scan
from tests.ingest.conftest import make_domain


def test_gaussian_mixture_curves():
    a = synthetic.gaussian_mixture_curves(12, seed=1)
    b = synthetic.gaussian_mixture_curves(12, seed=1)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(synthetic.gaussian_mixture_curves(12, seed=2))
    assert len(a) == 12 * 1001 and a["user_id"].nunique() == 12
    t = a[a["user_id"] == "gm_00000"]["t"].to_numpy()
    np.testing.assert_allclose(t, np.linspace(0, 100, 1001))
    v = a["value"].to_numpy()
    # sums of 1-5 bumps of height 0.5-2: each curve's max is in (0, 10]
    assert v.min() >= 0.0
    peaks = a.groupby("user_id")["value"].max()
    assert (peaks > 0).all() and (peaks <= 10.0).all()
    assert scan(a, make_domain()).valid


def test_gaussian_mixture_single_bump_shape():
    # recompute curve 0 independently from the same generator stream
    rng = np.random.default_rng(7)
    k = rng.integers(1, 6)
    mu, sd, w = rng.uniform(0, 100, k), rng.uniform(2, 20, k), rng.uniform(0.5, 2, k)
    t = np.linspace(0, 100, 51)
    expect = sum(w[j] * np.exp(-((t - mu[j]) ** 2) / (2 * sd[j] ** 2)) for j in range(k))
    df = synthetic.gaussian_mixture_curves(1, seed=7, n_points=51)
    np.testing.assert_allclose(df["value"].to_numpy(), expect, rtol=1e-12)


def test_periodic_stream_has_known_period():
    df = synthetic.periodic_stream(25, 40, seed=3, jitter=0.0)
    assert df.attrs["period"] == 40 and len(df) == 1000
    v = df["value"].to_numpy()
    assert v.min() == 0.0 and v.max() == 1.0
    np.testing.assert_array_equal(v[:40], v[40:80])
    j = synthetic.periodic_stream(25, 40, seed=3, jitter=0.02)["value"].to_numpy()
    assert 0.0 <= j.min() and j.max() <= 1.0
    assert 0.005 < np.std(j - v) < 0.03
    assert scan(df, make_domain(kind="streams", value_range=[0.0, 1.0])).valid


def test_periodic_stream_given_source():
    seg = np.array([3.0, 1.0, 2.0])
    df = synthetic.periodic_stream(2, 3, seed=0, jitter=0.0, source=seg)
    np.testing.assert_allclose(df["value"], [1.0, 0.0, 0.5, 1.0, 0.0, 0.5])
    with pytest.raises(ValueError):
        synthetic.periodic_stream(2, 4, seed=0, source=seg)


def test_trajectories_smooth_and_valid():
    df = synthetic.trajectories(4, seed=9, n_points=300)
    assert list(df.columns) == ["user_id", "curve_id", "t", "x", "y"]
    for _, g in df.groupby("user_id"):
        step = np.hypot(np.diff(g["x"]), np.diff(g["y"]))
        assert step.min() >= 2.0 - 1e-9 and step.max() <= 15.0 + 1e-9   # m per 1 s sample
    assert scan(df, make_domain(value_columns=["x", "y"], value_unit="m")).valid


def test_curve_table_chunks_have_distinct_ids():
    a = synthetic.curve_table(3, 10, seed=0)
    b = synthetic.curve_table(3, 10, seed=1, first_user=3)
    both = pd.concat([a, b])
    assert both["user_id"].nunique() == 6 and len(both) == 60
    assert scan(both, default_domain("curves", both)).valid
