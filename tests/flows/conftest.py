"""One Prefect test harness for the whole session, plus small release inputs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="session", autouse=True)
def prefect_harness(prefect_api):
    """Every flow test runs against the session's one Prefect harness (tests/conftest.py)."""
    return prefect_api


@pytest.fixture(scope="session")
def policy_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "policy.toml"
    path.write_text(textwrap.dedent("""
        [domains.tracks]
        kind = "curves"
        public = { duration = true, points = true, rejections = true }
        notion = "gp"
        cap = "2"
        time_unit = "s"
        value_columns = ["x", "y"]
        value_unit = "m"

        [domains.meters]
        kind = "streams"
        public = { rejections = true }
        notion = "wevent"
        cap = "2"
        w = 4
        time_unit = "step"
        value_range = [0.0, 10.0]
        value_unit = "kW"
    """))
    return path


@pytest.fixture(scope="session")
def curves_csv(tmp_path_factory) -> Path:
    """Six users, 1-2 smooth 2-D curves each, 120-200 points, seconds from 0."""
    rng = np.random.default_rng(7)
    rows = []
    for u in range(6):
        for c in range(1 + u % 2):
            n = 120 + 16 * u
            t = np.cumsum(rng.uniform(0.5, 1.5, n))
            t -= t[0]
            x = 50 * np.sin(t / 40 + u) + 3 * t
            y = 30 * np.cos(t / 25 + c)
            rows.append(pd.DataFrame({"user_id": f"user-{u}", "curve_id": f"c{c}", "t": t,
                                      "x": x, "y": y}))
    path = tmp_path_factory.mktemp("inputs") / "curves.csv"
    pd.concat(rows).to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def streams_csv(tmp_path_factory) -> Path:
    """Three users with a periodic stream (period 12) of 240 steps in [0, 10]."""
    rng = np.random.default_rng(11)
    rows = []
    for u in range(3):
        steps = np.arange(240)
        v = 5 + 4 * np.sin(2 * np.pi * steps / 12 + u) + rng.normal(0, 0.2, 240)
        rows.append(pd.DataFrame({"user_id": f"meter-{u}", "stream_id": "s0", "t": steps,
                                  "value": np.clip(v, 0, 10)}))
    path = tmp_path_factory.mktemp("inputs") / "streams.csv"
    pd.concat(rows).to_csv(path, index=False)
    return path


@pytest.fixture()
def ledger_path(tmp_path, policy_file) -> Path:
    from ledger import Ledger
    from schemas.policy import load_policy

    path = tmp_path / "ledger.duckdb"
    Ledger.init(path).apply_policy(load_policy(policy_file))
    return path
