"""Lon/lat projection to metres, checked against closed forms."""

import math

import numpy as np
import pandas as pd
import pytest

from ingest import EARTH_RADIUS_M, iter_users, project
from ingest.types import Rejection
from tests.ingest.conftest import make_domain, write_csv

R = 6_371_000.0


def test_radius():
    assert EARTH_RADIUS_M == R


def test_equirectangular_one_degree():
    # one degree of longitude at the equator and of latitude anywhere: R·π/180
    x, y = project(np.array([0.0, 1.0]), np.array([0.0, 0.0]), ref_lat=0.0)
    assert x[1] - x[0] == pytest.approx(R * math.pi / 180, rel=1e-12)
    x, y = project(np.array([10.0, 10.0]), np.array([40.0, 41.0]), ref_lat=40.5)
    assert y[1] - y[0] == pytest.approx(R * math.pi / 180, rel=1e-12)
    # east-west scale shrinks by cos(reference latitude)
    x, _ = project(np.array([0.0, 1.0]), np.array([60.0, 60.0]))
    assert x[1] - x[0] == pytest.approx(R * math.pi / 180 * 0.5, rel=1e-12)


def test_equirectangular_short_distance_matches_haversine():
    lon = np.array([-74.03917, -74.0335])
    lat = np.array([40.71079, 40.71000])
    x, y = project(lon, lat)
    d_plane = math.hypot(x[1] - x[0], y[1] - y[0])
    p1, p2 = map(math.radians, lat)
    dl = math.radians(lon[1] - lon[0])
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    d_hav = 2 * R * math.asin(math.sqrt(a))
    assert d_plane == pytest.approx(d_hav, rel=1e-5)


def test_mercator_formula():
    lon = np.array([-74.0, 12.5])
    lat = np.array([40.7, -33.9])
    x, y = project(lon, lat, projection="mercator")
    for i in range(2):
        assert x[i] == pytest.approx(R * math.radians(lon[i]), rel=1e-12)
        assert y[i] == pytest.approx(
            R * math.log(math.tan(math.pi / 4 + math.radians(lat[i]) / 2)), rel=1e-12)


def test_unknown_projection():
    with pytest.raises(ValueError):
        project(np.zeros(1), np.zeros(1), projection="utm")


def _track(lats):
    n = len(lats)
    return pd.DataFrame({"user_id": "v", "curve_id": "1", "t": np.arange(n, dtype=float),
                         "lon": np.linspace(-74.0, -73.9, n), "lat": lats})


def test_ingest_projects_about_curve_mean_latitude():
    df = _track([40.0, 40.5, 41.0])
    (u,) = iter_users(df, make_domain(projection="equirectangular", value_unit="m"))
    xy = u.curves[0].values
    assert xy.shape == (3, 2)
    phi0 = math.radians(40.5)
    np.testing.assert_allclose(xy[:, 0], R * np.radians(df["lon"]) * math.cos(phi0), rtol=1e-12)
    np.testing.assert_allclose(xy[:, 1], R * np.radians(df["lat"]), rtol=1e-12)


def test_dataset_reference_latitude():
    a = _track([10.0, 10.0]).assign(user_id="a")
    b = _track([30.0, 30.0]).assign(user_id="b")
    df = pd.concat([a, b], ignore_index=True)
    res = {u.user_id: u for u in iter_users(df, make_domain(projection="equirectangular"),
                                            projection_reference="dataset")}
    phi0 = math.radians(20.0)
    np.testing.assert_allclose(res["a"].curves[0].values[:, 0],
                               R * np.radians(a["lon"]) * math.cos(phi0), rtol=1e-12)


def test_out_of_range_lon_lat_rejected(tmp_path):
    rows = [["v", "1", 0, -181.0, 40.0], ["v", "1", 1, -74.0, 95.0], ["v", "1", 2, -74, 40],
            ["w", "1", 0, 0, 90], ["w", "1", 1, 0, 0]]
    f = write_csv(tmp_path / "in.csv", ["user_id", "curve_id", "t", "lon", "lat"], rows)
    res = {r.user_id: r for r in iter_users(f, make_domain(projection="equirectangular"))}
    assert [(p.row, p.column, p.rule) for p in res["v"].problems] == [
        (1, "lon", "lon in [-180, 180]"), (2, "lat", "lat in [-90, 90]")]
    assert not isinstance(res["w"], Rejection)       # the pole is fine for equirectangular
    res = {r.user_id: r for r in iter_users(f, make_domain(projection="mercator"))}
    assert [(p.row, p.rule) for p in res["w"].problems] == [(4, "lat in (-90, 90)")]


def test_custom_lon_lat_column_names(tmp_path):
    rows = [["v", "1", 0, 10.0, 1.0], ["v", "1", 1, 11.0, 2.0]]
    f = write_csv(tmp_path / "in.csv", ["user_id", "curve_id", "t", "LAT", "LON"], rows)
    dom = make_domain(projection="mercator", lon_column="LON", lat_column="LAT",
                      value_columns=["east", "north"])
    (u,) = iter_users(f, dom)
    np.testing.assert_allclose(u.curves[0].values[:, 0], R * np.radians([1.0, 2.0]), rtol=1e-12)
