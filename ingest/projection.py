"""Longitude/latitude (WGS84 degrees) to planar metres, for curve domains.

The privacy metric of a trajectory domain is L2 in metres over time, so lon/lat
are projected before anything else. Two projections, both on a sphere of radius
R = 6 371 000 m (the mean Earth radius, as in the [LY23] trajectory code):

- ``equirectangular`` (default): ``x = R·λ·cos φ₀``, ``y = R·φ`` (λ, φ in
  radians), with the standard parallel φ₀ fixed and public (the domain's
  ``ref_lat``): one frame for every curve, so the metric never depends on the
  data. Distances are accurate to well under 1 % within a few degrees of φ₀.
- ``mercator``: ``x = R·λ``, ``y = R·ln tan(π/4 + φ/2)``: conformal, and the
  projection of the [LY23] code; its scale grows as 1/cos φ, so distances at
  40°N come out about 1.3 times too long. Latitude must stay strictly inside
  (-90°, 90°).
"""

from __future__ import annotations

import numpy as np

EARTH_RADIUS_M = 6_371_000.0
PROJECTIONS = ("equirectangular", "mercator")


def project(
    lon: np.ndarray,
    lat: np.ndarray,
    *,
    projection: str = "equirectangular",
    ref_lat: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Project lon/lat degrees to (x, y) metres.

    Args:
        lon: longitudes in degrees, in [-180, 180].
        lat: latitudes in degrees, in [-90, 90] (strictly inside for Mercator).
        projection: ``"equirectangular"`` or ``"mercator"``.
        ref_lat: equirectangular standard parallel in degrees (required for
            equirectangular: a fixed, public value).

    Returns:
        (x, y) float64 arrays in metres.

    Raises:
        ValueError: unknown projection, or equirectangular without `ref_lat`.
    """
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {', '.join(PROJECTIONS)}")
    if projection == "equirectangular" and ref_lat is None:
        raise ValueError("the equirectangular projection needs a fixed, public ref_lat")
    lam = np.radians(np.asarray(lon, dtype=np.float64))
    phi = np.radians(np.asarray(lat, dtype=np.float64))
    if projection == "mercator":
        return EARTH_RADIUS_M * lam, EARTH_RADIUS_M * np.log(np.tan(np.pi / 4 + phi / 2))
    phi0 = np.radians(np.asarray(ref_lat, np.float64))
    return EARTH_RADIUS_M * lam * np.cos(phi0), EARTH_RADIUS_M * phi


def unproject(
    x: np.ndarray,
    y: np.ndarray,
    *,
    projection: str = "equirectangular",
    ref_lat: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Planar metres back to lon/lat degrees: the inverse of `project`.

    Post-processing of released coordinates with the domain's public
    projection, so it costs no budget and changes no guarantee. Only a fixed,
    public standard parallel can be inverted: a data-dependent one (a curve's
    mean latitude) was never released.

    Args:
        x: east coordinates in metres.
        y: north coordinates in metres.
        projection: ``"equirectangular"`` or ``"mercator"``.
        ref_lat: the equirectangular standard parallel in degrees (required
            for equirectangular; ignored for Mercator).

    Returns:
        (lon, lat) float64 arrays in degrees. Noisy outputs can fall outside
        [-180, 180] x [-90, 90]; they are returned as computed, not wrapped.

    Raises:
        ValueError: unknown projection, or equirectangular without `ref_lat`.
    """
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {', '.join(PROJECTIONS)}")
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if projection == "mercator":
        lat = np.degrees(2.0 * np.arctan(np.exp(ys / EARTH_RADIUS_M)) - np.pi / 2)
        return np.degrees(xs / EARTH_RADIUS_M), lat
    if ref_lat is None:
        raise ValueError("only a fixed, public ref_lat can be inverted (equirectangular)")
    scale = EARTH_RADIUS_M * np.cos(np.radians(float(ref_lat)))
    return np.degrees(xs / scale), np.degrees(ys / EARTH_RADIUS_M)
