"""Inputs for the report tests: a policy with a projected, a plain and a stream domain."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

POLICY = textwrap.dedent("""
    [domains.geo]
    kind = "curves"
    public = { duration = true, points = true, rejections = true }
    notion = "gp"
    cap = "4"
    time_unit = "s"
    projection = "equirectangular"
    ref_lat = 40.6
    value_columns = ["x", "y"]
    value_unit = "m"

    [domains.plain]
    kind = "curves"
    public = { duration = false, points = false }
    window = 10.0
    grid_points = 200
    notion = "gp"
    cap = "3"
    time_unit = "s"
    value_columns = ["value"]
    value_unit = "mV"

    [domains.meters]
    kind = "streams"
    notion = "wevent"
    cap = "8"
    w = 4
    time_unit = "min"
    step = 30
    value_range = [-5.0, 15.0]   # a low end off zero: scaling must add it
    value_unit = "kW"
""")

#: curves per user of `geo_csv`; the rejected user is not counted
GEO_CURVES = {"vessel-0": 1, "vessel-1": 2, "vessel-2": 1, "vessel-3": 2}
REJECTED_USER = "vessel-bad"
REJECTED_SENTINEL_LAT = 95.123456789


def write_policy(path: Path) -> Path:
    """Write the report tests' policy."""
    path.write_text(POLICY)
    return path


def geo_frame(seed: int = 5) -> pd.DataFrame:
    """Lon/lat tracks in New York Harbor, 10 s apart, ISO 8601 UTC times."""
    rng = np.random.default_rng(seed)
    rows = []
    for u, (user, n_curves) in enumerate(GEO_CURVES.items()):
        for c in range(n_curves):
            n = 100 + 20 * u + 10 * c
            secs = np.arange(n) * 10.0
            lon = -74.05 + 0.02 * u + 0.0004 * np.cumsum(rng.uniform(0.5, 1.5, n))
            lat = 40.60 + 0.01 * c + 0.003 * np.sin(secs / 300 + u)
            t = pd.Timestamp("2020-12-01T00:00:00Z") + pd.to_timedelta(secs + 3600 * c, "s")
            rows.append(pd.DataFrame({"user_id": user, "curve_id": f"trip{c}",
                                      "t": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "lon": lon,
                                      "lat": lat}))
    return pd.concat(rows, ignore_index=True)


def write_geo_csv(path: Path, *, with_rejected: bool = True) -> Path:
    """The geo input; with a user whose one latitude is out of range (rejected)."""
    df = geo_frame()
    if with_rejected:
        bad = df[df.user_id == "vessel-0"].copy()
        bad["user_id"] = REJECTED_USER
        bad.loc[bad.index[3], "lat"] = REJECTED_SENTINEL_LAT
        df = pd.concat([df, bad], ignore_index=True)
    df.to_csv(path, index=False, float_format="%.9f")
    return path


def meters_frame(seed: int = 11) -> pd.DataFrame:
    """Three users' periodic streams (period 12 steps = 6 h), t in minutes, values in kW."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(3):
        steps = np.arange(240)
        v = 5 + 9 * np.sin(2 * np.pi * steps / 12 + u) + rng.normal(0, 0.2, 240)
        rows.append(pd.DataFrame({"user_id": f"meter-{u}", "stream_id": "main",
                                  "t": steps * 30.0, "value": np.clip(v, -5, 15)}))
    return pd.concat(rows, ignore_index=True)
