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
    x, _ = project(np.array([0.0, 1.0]), np.array([60.0, 60.0]), ref_lat=60.0)
    assert x[1] - x[0] == pytest.approx(R * math.pi / 180 * 0.5, rel=1e-12)


def test_equirectangular_short_distance_matches_haversine():
    lon = np.array([-74.03917, -74.0335])
    lat = np.array([40.71079, 40.71000])
    x, y = project(lon, lat, ref_lat=40.7104)
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


def test_equirectangular_needs_a_fixed_reference():
    # a data-dependent reference (the mean latitude) made the metric depend on the data
    with pytest.raises(ValueError, match="ref_lat"):
        project(np.zeros(2), np.array([59.0, 61.0]))


def _track(lats):
    n = len(lats)
    return pd.DataFrame({"user_id": "v", "curve_id": "1", "t": np.arange(n, dtype=float),
                         "lon": np.linspace(-74.0, -73.9, n), "lat": lats})


def test_ingest_projects_every_curve_in_the_domains_fixed_frame():
    # Attack (issue #10): with a per-curve reference, a track at 60°N and one at 0°
    # were projected in different frames, so the L2 distance between users (and the
    # effective ε) was magnified up to 2.8x. Every curve now uses the policy's ref_lat.
    a = _track([60.0, 60.0, 60.0]).assign(user_id="a")
    b = _track([0.0, 0.0, 0.0]).assign(user_id="b")
    df = pd.concat([a, b], ignore_index=True)
    dom = make_domain(projection="equirectangular", ref_lat=30.0, value_unit="m")
    res = {u.user_id: u for u in iter_users(df, dom)}
    phi0 = math.radians(30.0)
    for uid, track in (("a", a), ("b", b)):
        xy = res[uid].curves[0].values
        np.testing.assert_allclose(xy[:, 0], R * np.radians(track["lon"]) * math.cos(phi0),
                                   rtol=1e-12)
        np.testing.assert_allclose(xy[:, 1], R * np.radians(track["lat"]), rtol=1e-12)


def test_a_policy_without_ref_lat_is_refused():
    from schemas.errors import PolicyError

    with pytest.raises(PolicyError, match="ref_lat"):
        make_domain(projection="equirectangular")


def test_out_of_range_lon_lat_rejected(tmp_path):
    rows = [["v", "1", 0, -181.0, 40.0], ["v", "1", 1, -74.0, 95.0], ["v", "1", 2, -74, 40],
            ["w", "1", 0, 0, 90], ["w", "1", 1, 0, 0]]
    f = write_csv(tmp_path / "in.csv", ["user_id", "curve_id", "t", "lon", "lat"], rows)
    res = {r.user_id: r for r in iter_users(f, make_domain(projection="equirectangular",
                                                                   ref_lat=40.0))}
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
