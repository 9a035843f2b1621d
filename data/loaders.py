"""Loaders that turn each bundled real data file into a curve or stream table.

All files are in this folder with their provenance in ``SOURCES.md``; nothing is
downloaded. Tables use the ingestion columns: curves ``user_id, curve_id, t,
<values>``, streams ``user_id, stream_id, t, value``.

- `ais_raw`: AIS vessel tracks, New York Harbor, 1-7 Dec 2020 (t as UTC
  date/times, lon/lat in degrees); `mmsi` is the user, `traj` the curve.
- `ais_curves` (alias `ais_curves_xy`): the same, validated and projected by
  the real ingestion path: t from each curve's start, x/y in metres
  (equirectangular about each curve's mean latitude, R = 6 371 000 m).
- `ecg_curves`: MIT-BIH record 208 (lead MLII, 100 Hz, mV) cut into thirty
  10 s records, one user per record, t in seconds.
- `taylor_stream`: England and Wales half-hourly demand (MW), t = step index.
- `italy_power_stream`: the 1096 ItalyPowerDemand days concatenated in date
  order (24 steps a day), t = step index; each day is z-normalised in the UCR
  archive, so values are dimensionless z-scores, not MW.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ingest import Rejection, UserCurves, iter_users
from schemas.errors import ValidationError
from schemas.policy import Domain

DATA_DIR = Path(__file__).resolve().parent
AIS_FILE = DATA_DIR / "ais_nyharbor_2020_12_week1.csv.gz"
ECG_FILE = DATA_DIR / "ecg_mitbih208.npz"
TAYLOR_FILE = DATA_DIR / "taylor_halfhourly.csv"
ITALY_FILE = DATA_DIR / "ItalyPowerDemand.npz"
POLICY_FILE = DATA_DIR / "policy.toml"

ECG_RECORD_SECONDS = 10
#: the demo's household population (`data.households`): meters, days, seed
DEMO_HOUSEHOLDS = 2000
DEMO_DAYS = 7
DEMO_SEED = 2026
ECG_RECORDS = 30


@lru_cache(maxsize=1)
def _ais_raw() -> pd.DataFrame:
    df = pd.read_csv(AIS_FILE, dtype={"traj": "int64", "mmsi": "int64", "time": "str"})
    out = pd.DataFrame({
        "user_id": df["mmsi"].astype("str"),
        "curve_id": df["traj"].astype("str"),
        "t": pd.to_datetime(df["time"], format="%Y-%m-%d %H:%M:%S", utc=True),
        "lon": df["lon"].astype(np.float64),
        "lat": df["lat"].astype(np.float64),
    })
    return out


def ais_raw() -> pd.DataFrame:
    """AIS tracks as recorded: ``user_id`` (MMSI), ``curve_id`` (trajectory), ``t``, lon, lat.

    Returns:
        172 679 rows; ``t`` is a UTC datetime column (AIS times are UTC), lon/lat
        are WGS84 degrees, in file order (each trajectory sorted by time).
    """
    return _ais_raw().copy()


AIS_REF_LAT = 40.6  # the bundled policy's public standard parallel for ais_tracks


def ais_curves(time_unit: str = "s", *, projection: str = "equirectangular") -> pd.DataFrame:
    """AIS tracks validated and projected to metres by the real ingestion path.

    Args:
        time_unit: time unit of ``t`` (ms, s, min, h, d), from each curve's start.
        projection: ``"equirectangular"`` (standard parallel `AIS_REF_LAT`, as in
            the bundled policy) or ``"mercator"``.

    Returns:
        ``user_id, curve_id, t, x, y`` (x, y in metres), sorted by user, curve, t.

    Raises:
        ValidationError: the bundled file failed validation (would be a bug).
    """
    domain = Domain(name="ais_tracks", kind="curves", notion="gp", cap=Fraction(1),
                    time_unit=time_unit, value_columns=("x", "y"), value_unit="m",
                    projection=projection,
                    ref_lat=AIS_REF_LAT if projection == "equirectangular" else None)
    parts: list[pd.DataFrame] = []
    for u in iter_users(ais_raw(), domain):
        if isinstance(u, Rejection):
            raise ValidationError(u.problems)
        assert isinstance(u, UserCurves)
        for c in u.curves:
            parts.append(pd.DataFrame({
                "user_id": u.user_id, "curve_id": c.curve_id, "t": c.t,
                "x": c.values[:, 0], "y": c.values[:, 1]}))
    return pd.concat(parts, ignore_index=True)


ais_curves_xy = ais_curves


def ecg_curves() -> pd.DataFrame:
    """Thirty 10 s ECG records (100 Hz, mV), one user per record.

    Returns:
        ``user_id`` (``mitbih208_00`` .. ``_29``), ``curve_id`` (``mlii``), ``t``
        (seconds from the record's start, 0 .. 9.99), ``value`` (mV).
    """
    with np.load(ECG_FILE) as z:
        sig = np.asarray(z["ecg_100hz"], dtype=np.float64)
        fs = int(z["fs"])
    n = ECG_RECORD_SECONDS * fs
    records = min(ECG_RECORDS, len(sig) // n)
    t = np.arange(n) / fs
    return pd.DataFrame({
        "user_id": np.repeat([f"mitbih208_{i:02d}" for i in range(records)], n),
        "curve_id": "mlii",
        "t": np.tile(t, records),
        "value": sig[: records * n],
    })


def taylor_stream() -> pd.DataFrame:
    """England and Wales half-hourly electricity demand as one stream (raw MW).

    Returns:
        ``user_id`` (``taylor``), ``stream_id`` (``demand_mw``), ``t`` (step
        index 0 .. 4031, one step = 30 min), ``value`` (MW).
    """
    v = pd.read_csv(TAYLOR_FILE)["demand_mw"].to_numpy(dtype=np.float64)
    return pd.DataFrame({"user_id": "taylor", "stream_id": "demand_mw",
                         "t": np.arange(len(v), dtype=np.int64), "value": v})


def italy_power_stream() -> pd.DataFrame:
    """ItalyPowerDemand days concatenated in date order as one hourly stream.

    Returns:
        ``user_id`` (``italy``), ``stream_id`` (``demand``), ``t`` (step index,
        one step = 1 h, 26 304 steps), ``value`` (per-day z-scores).
    """
    with np.load(ITALY_FILE) as z:
        v = np.asarray(z["X"], dtype=np.float64).reshape(-1)
    return pd.DataFrame({"user_id": "italy", "stream_id": "demand",
                         "t": np.arange(len(v), dtype=np.int64), "value": v})


def write_demo_inputs(out_dir: str | Path) -> dict[str, Path]:
    """Write the demo's CSV inputs, one per domain of the bundled policy.

    Args:
        out_dir: folder to write into (created if needed).

    Returns:
        Domain name -> CSV path: ``ais_tracks`` (raw AIS with ISO 8601 UTC times
        and lon/lat), ``ecg``, ``power_taylor``, ``power_italy``, ``households``
        (`DEMO_HOUSEHOLDS` meters over `DEMO_DAYS` days, `data.households`). Each
        passes ``privpipe validate FILE --policy data/policy.toml --domain NAME``.
    """
    from data.households import households

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f"{name}.csv"
             for name in ("ais_tracks", "ecg", "power_taylor", "power_italy", "households")}
    households(DEMO_HOUSEHOLDS, DEMO_DAYS, seed=DEMO_SEED).to_csv(
        paths["households"], index=False, float_format="%.5g")
    ais = ais_raw()
    ais["t"] = ais["t"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    ais.to_csv(paths["ais_tracks"], index=False)
    ecg_curves().to_csv(paths["ecg"], index=False, float_format="%.6g")
    taylor_stream().to_csv(paths["power_taylor"], index=False)
    italy_power_stream().to_csv(paths["power_italy"], index=False, float_format="%.7g")
    return paths
