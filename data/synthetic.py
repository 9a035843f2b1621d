"""Seeded synthetic generators for tests, examples and benchmarks.

Every generator takes a ``seed`` and returns the same table for the same
arguments. Tables use the ingestion columns (see `data.loaders`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from data import loaders


def gaussian_mixture_curves(n_curves: int, *, seed: int, n_points: int = 1001) -> pd.DataFrame:
    """Curves on [0, 100] that are sums of 1-5 Gaussian bumps (spec §3, Paper 1 setup 2).

    Each curve draws k ~ U{1..5} bumps with means ~ U[0, 100], widths
    σ ~ U[2, 20] and weights ~ U[0.5, 2]: q(t) = Σ w·exp(-(t-μ)²/(2σ²)).

    Args:
        n_curves: number of curves (one user each: ``gm_00000`` ...).
        seed: generator seed.
        n_points: samples per curve on the uniform grid of [0, 100].

    Returns:
        ``user_id, curve_id, t, value`` with ``curve_id == "gm"``.
    """
    if n_curves < 1 or n_points < 2:
        raise ValueError("n_curves must be >= 1 and n_points >= 2")
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 100.0, n_points)
    values = np.empty((n_curves, n_points))
    for i in range(n_curves):
        k = rng.integers(1, 6)
        mu = rng.uniform(0, 100, k)
        sigma = rng.uniform(2, 20, k)
        w = rng.uniform(0.5, 2, k)
        values[i] = (w[:, None] * np.exp(-((t[None, :] - mu[:, None]) ** 2)
                                          / (2 * sigma[:, None] ** 2))).sum(axis=0)
    return pd.DataFrame({
        "user_id": np.repeat([f"gm_{i:05d}" for i in range(n_curves)], n_points),
        "curve_id": "gm",
        "t": np.tile(t, n_curves),
        "value": values.reshape(-1),
    })


def periodic_stream(
    n_periods: int,
    period: int,
    *,
    seed: int,
    jitter: float = 0.01,
    source: np.ndarray | None = None,
) -> pd.DataFrame:
    """A stream that repeats one real (or given) segment with jitter (CPR setup, spec §3).

    Args:
        n_periods: number of repeats.
        period: segment length in steps (the known period).
        seed: generator seed (segment choice and jitter).
        jitter: standard deviation of the Gaussian jitter added to each sample.
        source: the segment to repeat (length `period`, any scale); None takes
            `period` consecutive values of the bundled Taylor demand at a seeded
            offset. The segment is min-max normalised to [0, 1].

    Returns:
        ``user_id`` (``synthetic``), ``stream_id`` (``periodic``), ``t`` (step
        0 .. n-1), ``value`` in [0, 1] (clipped after jitter); the period is in
        ``df.attrs["period"]``.
    """
    if n_periods < 1 or period < 2 or jitter < 0:
        raise ValueError("n_periods must be >= 1, period >= 2 and jitter >= 0")
    rng = np.random.default_rng(seed)
    if source is None:
        demand = loaders.taylor_stream()["value"].to_numpy()
        start = int(rng.integers(0, len(demand) - period))
        seg = demand[start:start + period]
    else:
        seg = np.asarray(source, dtype=np.float64)
        if seg.shape != (period,) or not np.all(np.isfinite(seg)):
            raise ValueError("source must be a finite array of length `period`")
    span = seg.max() - seg.min()
    seg = (seg - seg.min()) / span if span > 0 else np.full(period, 0.5)
    x = np.tile(seg, n_periods) + rng.normal(0.0, jitter, n_periods * period)
    df = pd.DataFrame({"user_id": "synthetic", "stream_id": "periodic",
                       "t": np.arange(n_periods * period, dtype=np.int64),
                       "value": np.clip(x, 0.0, 1.0)})
    df.attrs["period"] = period
    return df


def trajectories(n_users: int, *, seed: int, n_points: int = 500) -> pd.DataFrame:
    """Smooth 2-D trajectories in metres, one per user, sampled at 1 Hz.

    Heading and speed are sums of a few random low-frequency sinusoids (speed
    kept in [2, 15] m/s), integrated from a random start in a 10 km square.

    Args:
        n_users: number of users (``traj_00000`` ...).
        seed: generator seed.
        n_points: samples per trajectory (t = 0 .. n_points-1 seconds).

    Returns:
        ``user_id, curve_id, t, x, y`` with x, y in metres.
    """
    if n_users < 1 or n_points < 2:
        raise ValueError("n_users must be >= 1 and n_points >= 2")
    rng = np.random.default_rng(seed)
    t = np.arange(n_points, dtype=np.float64)
    xs, ys = np.empty((n_users, n_points)), np.empty((n_users, n_points))
    for i in range(n_users):
        f = rng.uniform(1 / 600, 1 / 60, 3)
        ph = rng.uniform(0, 2 * np.pi, 3)
        amp = rng.uniform(0.2, 1.0, 3)
        heading = rng.uniform(0, 2 * np.pi) + (amp[:, None] * np.sin(
            2 * np.pi * f[:, None] * t + ph[:, None])).sum(axis=0)
        speed = 8.5 + 6.5 * np.sin(2 * np.pi * rng.uniform(1 / 900, 1 / 120) * t
                                   + rng.uniform(0, 2 * np.pi))
        x0, y0 = rng.uniform(-5000, 5000, 2)
        xs[i] = x0 + np.concatenate([[0.0], np.cumsum(speed[:-1] * np.cos(heading[:-1]))])
        ys[i] = y0 + np.concatenate([[0.0], np.cumsum(speed[:-1] * np.sin(heading[:-1]))])
    return pd.DataFrame({
        "user_id": np.repeat([f"traj_{i:05d}" for i in range(n_users)], n_points),
        "curve_id": "0",
        "t": np.tile(t, n_users),
        "x": xs.reshape(-1),
        "y": ys.reshape(-1),
    })


def curve_table(n_users: int, n_points: int, *, seed: int, first_user: int = 0) -> pd.DataFrame:
    """Many users' curves, fast (vectorised), for benchmarks.

    Each user has one curve of `n_points` samples at t = 0, 1, ... seconds:
    a random-frequency sine plus Gaussian noise, ids ``u{first_user+i:08d}``.

    Args:
        n_users: number of users.
        n_points: samples per curve (>= 2).
        seed: generator seed.
        first_user: index of the first user id (to generate a big table in
            chunks with distinct ids).

    Returns:
        ``user_id, curve_id, t, value``.
    """
    if n_users < 1 or n_points < 2:
        raise ValueError("n_users must be >= 1 and n_points >= 2")
    rng = np.random.default_rng(seed)
    t = np.arange(n_points, dtype=np.float64)
    freq = rng.uniform(0.001, 0.05, n_users)[:, None]
    phase = rng.uniform(0, 2 * np.pi, n_users)[:, None]
    v = np.sin(2 * np.pi * freq * t[None, :] + phase) + 0.1 * rng.standard_normal(
        (n_users, n_points))
    ids = np.array([f"u{first_user + i:08d}" for i in range(n_users)], dtype=object)
    return pd.DataFrame({"user_id": np.repeat(ids, n_points), "curve_id": "c0",
                         "t": np.tile(t, n_users), "value": v.reshape(-1)})
