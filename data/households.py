"""A seeded population of household meters built from bundled real demand days.

Each household is one user with one stream (``load``, kWh per half-hour,
absolute half-hour steps from a common start). The daily shapes are real: the
84 days of ``taylor_halfhourly.csv`` (England and Wales demand, see
``SOURCES.md``), min-max normalised. Households differ in:

- **period**: most repeat one day shape every day (period 48); some have a
  12-hour cycle (a day shape compressed to 24 steps, e.g. a heat pump on a
  timer: period 24), some alternate two day shapes (shift work: period 96);
- **level and amplitude**: log-normal base load and daily swing;
- **noise**: Gaussian, with a per-household standard deviation;
- **clock**: a per-household shift of up to ±2 hours;
- **missing days**: whole days absent from the table (a meter that did not
  report), so their steps are missing.

Values are clipped to [0, `VALUE_MAX`] kWh (the public range of the demo
policy's ``households`` domain). Generation is vectorised over households and
can be cut into chunks of households (``first_household``) with distinct ids,
so a 10⁵-household table need not be held at once.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from data.loaders import TAYLOR_FILE

STEPS_PER_DAY = 48
VALUE_MAX = 4.0  # kWh per half-hour: the domain's public value range is [0, 4]
#: (period in steps, share of households)
PERIOD_MIX = ((48, 0.7), (24, 0.15), (96, 0.15))


@lru_cache(maxsize=1)
def _day_shapes() -> np.ndarray:
    demand = pd.read_csv(TAYLOR_FILE)["demand_mw"].to_numpy(dtype=np.float64)
    days = demand[: demand.size // STEPS_PER_DAY * STEPS_PER_DAY].reshape(-1, STEPS_PER_DAY)
    lo, hi = days.min(axis=1, keepdims=True), days.max(axis=1, keepdims=True)
    return (days - lo) / (hi - lo)


def household_periods(n_households: int, *, seed: int, first_household: int = 0) -> np.ndarray:
    """The true period of each household of `households` (same seed, same chunk).

    Args:
        n_households: number of households in the chunk.
        seed: generator seed.
        first_household: index of the chunk's first household.

    Returns:
        (n_households,) periods in steps.
    """
    return _draw(n_households, seed, first_household)["period"]


def _draw(n: int, seed: int, first: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, first])
    periods = np.array([p for p, _ in PERIOD_MIX])
    share = np.array([s for _, s in PERIOD_MIX])
    shapes = _day_shapes()
    return {
        "period": periods[rng.choice(periods.size, n, p=share)],
        "day_a": rng.integers(0, shapes.shape[0], n),
        "day_b": rng.integers(0, shapes.shape[0], n),
        "base": rng.lognormal(np.log(0.25), 0.5, n),
        "swing": rng.lognormal(np.log(0.8), 0.5, n),
        "noise": rng.uniform(0.02, 0.15, n),
        "offset": rng.integers(-4, 5, n),
        "rng": rng,
    }


def _cycles(d: dict[str, np.ndarray]) -> np.ndarray:
    """(n, 96) two days of each household's noiseless normalised pattern."""
    shapes = _day_shapes()
    a, b = shapes[d["day_a"]], shapes[d["day_b"]]
    half = a[:, ::2]  # a day shape on 24 steps
    out = np.empty((a.shape[0], 2 * STEPS_PER_DAY))
    p = d["period"]
    out[p == 48] = np.tile(a[p == 48], 2)
    out[p == 24] = np.tile(half[p == 24], 4)
    out[p == 96] = np.concatenate([a[p == 96], b[p == 96]], axis=1)
    return out


def households(n_households: int, n_days: int, *, seed: int, first_household: int = 0,
               missing_day_rate: float = 0.03) -> pd.DataFrame:
    """Half-hourly meter readings of a seeded population of households.

    Args:
        n_households: households in this chunk (users ``hh_{index:07d}``).
        n_days: days of readings (48 steps each), from step 0.
        seed: generator seed (one population for one seed).
        first_household: index of the chunk's first household: chunks of one
            seed with disjoint ranges make one population.
        missing_day_rate: probability that a household's day is absent.

    Returns:
        ``user_id, stream_id, t, value`` (kWh per half-hour in [0, VALUE_MAX]),
        sorted by user and step; ``df.attrs["periods"]`` maps user to period.
    """
    if n_households < 1 or n_days < 1 or not 0 <= missing_day_rate < 1:
        raise ValueError("need n_households >= 1, n_days >= 1 and 0 <= missing_day_rate < 1")
    d = _draw(n_households, seed, first_household)
    rng = d["rng"]
    steps = n_days * STEPS_PER_DAY
    cyc = _cycles(d)
    # phase offset: households do not all wake up at the same half-hour (±2 h)
    idx = (np.arange(steps)[None, :] + d["offset"][:, None]) % cyc.shape[1]
    pattern = np.take_along_axis(cyc, idx, axis=1)
    load = d["base"][:, None] + d["swing"][:, None] * pattern
    load += rng.normal(0.0, 1.0, load.shape) * (d["noise"] * d["swing"])[:, None]
    load = np.clip(load, 0.0, VALUE_MAX)
    keep_day = rng.random((n_households, n_days)) >= missing_day_rate
    keep_day[:, 0] = True  # every household reports on day 1
    keep = np.repeat(keep_day, STEPS_PER_DAY, axis=1)
    ids = np.array([f"hh_{first_household + i:07d}" for i in range(n_households)], dtype=object)
    rows, cols = np.nonzero(keep)
    df = pd.DataFrame({"user_id": ids[rows], "stream_id": "load",
                       "t": cols.astype(np.int64), "value": load[rows, cols]})
    df.attrs["periods"] = dict(zip(ids.tolist(), d["period"].tolist(), strict=True))
    return df
