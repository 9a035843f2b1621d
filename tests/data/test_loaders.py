"""Every bundled loader yields a table that passes the real validation."""

import math

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from data import loaders
from flows.cli_validate import validate
from ingest import UserCurves, UserStreams, iter_users, scan
from schemas.policy import load_policy


@pytest.fixture(scope="module")
def policy():
    return load_policy(loaders.POLICY_FILE)


def test_ais_raw(policy):
    df = loaders.ais_raw()
    assert list(df.columns) == ["user_id", "curve_id", "t", "lon", "lat"]
    assert len(df) == 172_679
    assert df["user_id"].nunique() == 140 and df["curve_id"].nunique() == 513
    assert str(df["t"].dt.tz) == "UTC"
    rep = scan(df, policy.domain("ais_tracks"))
    assert rep.valid and (rep.users, rep.curves_or_streams, rep.points) == (140, 513, 172_679)


def test_ais_curves_in_metres_and_seconds():
    df = loaders.ais_curves(time_unit="s")
    assert list(df.columns) == ["user_id", "curve_id", "t", "x", "y"]
    assert len(df) == 172_679
    assert (df.groupby("curve_id")["t"].first() == 0).all()
    # first two points of trajectory 0 (from the raw file): 11:31:39 and 11:34:20
    raw = loaders.ais_raw()
    tr0 = df[df["curve_id"] == "0"]
    assert tr0["t"].iloc[1] == 161.0
    r0 = raw[raw["curve_id"] == "0"]
    phi0 = math.radians(loaders.AIS_REF_LAT)  # the policy's public standard parallel
    dx = 6_371_000 * math.radians(r0["lon"].iloc[1] - r0["lon"].iloc[0]) * math.cos(phi0)
    dy = 6_371_000 * math.radians(r0["lat"].iloc[1] - r0["lat"].iloc[0])
    assert tr0["x"].iloc[1] - tr0["x"].iloc[0] == pytest.approx(dx, rel=1e-9)
    assert tr0["y"].iloc[1] - tr0["y"].iloc[0] == pytest.approx(dy, rel=1e-9)
    hours = loaders.ais_curves(time_unit="h")
    np.testing.assert_allclose(hours["t"].to_numpy() * 3600, df["t"].to_numpy(), rtol=1e-12)
    assert loaders.ais_curves_xy is loaders.ais_curves


def test_ecg_curves(policy):
    df = loaders.ecg_curves()
    assert list(df.columns) == ["user_id", "curve_id", "t", "value"]
    assert df["user_id"].nunique() == 30 and len(df) == 30_000
    one = df[df["user_id"] == "mitbih208_00"]
    np.testing.assert_allclose(one["t"].to_numpy(), np.arange(1000) / 100)
    rep = scan(df, policy.domain("ecg"))
    assert rep.valid and rep.users == 30 and rep.t_span == (0.0, 9.99)


@pytest.mark.parametrize("fn, name, n", [(loaders.taylor_stream, "power_taylor", 4032),
                                         (loaders.italy_power_stream, "power_italy", 26_304)])
def test_streams(policy, fn, name, n):
    df = fn()
    assert list(df.columns) == ["user_id", "stream_id", "t", "value"]
    assert len(df) == n
    (u,) = iter_users(df, policy.domain(name))
    assert isinstance(u, UserStreams)
    (s,) = u.streams
    np.testing.assert_array_equal(s.steps, np.arange(n))
    assert 0.0 < s.values.min() and s.values.max() < 1.0


def test_italy_order_is_file_order():
    from numpy import load

    with load(loaders.ITALY_FILE) as z:
        first_day = z["X"][0, 0, :].astype(float)
    np.testing.assert_allclose(loaders.italy_power_stream()["value"].to_numpy()[:24], first_day)


def test_demo_inputs_pass_validate_with_bundled_policy(tmp_path, policy):
    paths = loaders.write_demo_inputs(tmp_path)
    assert set(paths) == set(policy.domains)
    text = paths["ais_tracks"].read_text(encoding="utf-8").splitlines()
    assert text[0] == "user_id,curve_id,t,lon,lat"
    assert text[1].split(",")[2].endswith("Z")          # ISO 8601 UTC
    app = typer.Typer()
    app.command("validate")(validate)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    for name, path in paths.items():
        kind = policy.domain(name).kind
        res = runner.invoke(app, ["validate", str(path), "--kind", kind, "--policy",
                                  str(loaders.POLICY_FILE), "--domain", name, "--format", "csv"])
        assert res.exit_code == 0, (name, res.output)
    # the ISO round trip keeps the projected curves of the in-memory loader
    (first,) = [u for u in iter_users(paths["ais_tracks"], policy.domain("ais_tracks"))][:1]
    assert isinstance(first, UserCurves)
    ref = loaders.ais_curves()
    ref = ref[ref["user_id"] == first.user_id]
    got = pd.concat([pd.DataFrame({"t": c.t, "x": c.values[:, 0]}) for c in first.curves])
    np.testing.assert_allclose(got["t"].to_numpy(), ref["t"].to_numpy())
    np.testing.assert_allclose(got["x"].to_numpy(), ref["x"].to_numpy(), rtol=1e-12)
