"""The inverse projection (released metres back to lon/lat), against closed forms."""

import math

import numpy as np
import pytest

from ingest.projection import project, unproject

R = 6_371_000.0


def test_equirectangular_inverse_of_known_points():
    # One degree of latitude is R·π/180 metres north; at ref_lat 60° one degree of
    # longitude is half that east (cos 60° = 1/2).
    lon, lat = unproject(np.array([R * math.pi / 360, 0.0]), np.array([0.0, R * math.pi / 180]),
                         ref_lat=60.0)
    assert lon == pytest.approx([1.0, 0.0], abs=1e-12)
    assert lat == pytest.approx([0.0, 1.0], abs=1e-12)


def test_mercator_inverse_of_known_points():
    # y = R·ln tan(π/4 + φ/2): at φ = 45°, tan(67.5°) = 1 + √2.
    lon, lat = unproject(np.array([R * math.pi]), np.array([R * math.log(1 + math.sqrt(2))]),
                         projection="mercator")
    assert lon[0] == pytest.approx(180.0, abs=1e-9)
    assert lat[0] == pytest.approx(45.0, abs=1e-9)


@pytest.mark.parametrize("projection", ["equirectangular", "mercator"])
def test_round_trip_new_york_harbor(projection):
    rng = np.random.default_rng(3)
    lon = rng.uniform(-74.3, -73.7, 500)
    lat = rng.uniform(40.3, 40.9, 500)
    x, y = project(lon, lat, projection=projection, ref_lat=40.6)
    lon2, lat2 = unproject(x, y, projection=projection, ref_lat=40.6)
    # 1e-9 degrees is about 0.1 mm
    assert np.max(np.abs(lon2 - lon)) < 1e-9 and np.max(np.abs(lat2 - lat)) < 1e-9


def test_a_data_dependent_reference_cannot_be_inverted():
    with pytest.raises(ValueError, match="ref_lat"):
        unproject(np.zeros(2), np.zeros(2), projection="equirectangular")
    with pytest.raises(ValueError, match="projection"):
        unproject(np.zeros(2), np.zeros(2), projection="utm", ref_lat=1.0)
