"""The population view of a release folder: tables in units, groups, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data import households as hh
from flows.cli import app
from mechanisms.streams import square_wave

E0 = 1.0  # epsilon 5 per window of w = 5, as in the manifest below


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """A stream release folder (samples + manifest) of 60 households over 4 days."""
    df = hh.households(60, 4, seed=5)
    rng = np.random.default_rng(1)
    y = square_wave(df["value"].to_numpy() / hh.VALUE_MAX, epsilon_per_step=E0, rng=rng)
    rdir = tmp_path_factory.mktemp("out") / "rs-households-test"
    rdir.mkdir()
    pq.write_table(pa.table({"user_id": df["user_id"].to_numpy(),
                             "stream_id": df["stream_id"].to_numpy(),
                             "step": df["t"].to_numpy(), "y": y}), rdir / "samples.parquet")
    (rdir / "manifest.json").write_text(json.dumps({
        "flow": "release_streams", "domain": "households", "files": {"samples": "samples.parquet"},
        "parameters": {"epsilon": "5", "w": 5, "mechanism": "square_wave"}}))
    return rdir, df


def test_cli_writes_the_tables_in_kwh_and_charges_nothing(release, tmp_path, monkeypatch):
    rdir, df = release
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["population", str(rdir), "--period", "48"])
    assert res.exit_code == 0, res.output
    phase = pd.read_csv(rdir / "population" / "phase_mean.csv")
    truth = df.assign(ph=df["t"] % 48).groupby("ph")["value"].mean().to_numpy()
    assert phase["upper"].max() <= hh.VALUE_MAX and phase["lower"].min() >= 0.0
    assert np.mean((phase["lower"] <= truth) & (truth <= phase["upper"])) >= 0.85
    step = pd.read_csv(rdir / "population" / "step_distribution.csv")
    assert list(step.columns) == ["step", "reports", "mean", "q10", "q25", "q50", "q75", "q90"]
    assert step["reports"].sum() == len(df)
    # post-processing only: no ledger anywhere
    assert not list(tmp_path.rglob("*.duckdb")) and not (tmp_path / ".privpipe").exists()


def test_a_group_smaller_than_k_is_refused(release, tmp_path):
    rdir, df = release
    ids = sorted(df["user_id"].unique())
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("\n".join(ids[:5]))
    big.write_text("\n".join(ids[:25] + ["not-a-user"]))
    res = CliRunner().invoke(app, ["population", str(rdir), "--users", str(small)])
    assert res.exit_code == 2 and "at least 20 released users" in res.output
    res = CliRunner().invoke(app, ["population", str(rdir), "--users", str(big),
                                   "--out", str(tmp_path / "g")])
    assert res.exit_code == 0, res.output
    step = pd.read_csv(tmp_path / "g" / "population" / "step_mean.csv")
    assert step["reports"].max() <= 25
    res = CliRunner().invoke(app, ["population", str(tmp_path)])
    assert res.exit_code == 2 and "not a release folder" in res.output


def test_chunks_of_steps_give_the_tables_of_one_chunk(release, tmp_path, monkeypatch):
    """Reports split by chunk in one scan: every report in exactly one chunk, same tables."""
    import tempfile

    from tasks import population

    rdir, _ = release
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tables = {}
    for rows in (10**9, 3_000):  # one chunk; chunks of a few steps (and phases)
        monkeypatch.setattr(population, "CHUNK_ROWS", rows)
        out = tmp_path / f"out-{rows}"
        population.population_view_fn(str(rdir / "samples.parquet"), str(out),
                                      epsilon_per_step=E0, value_range=(0.0, hh.VALUE_MAX),
                                      value_unit="kWh", period=48)
        tables[rows] = {p.name: p.read_bytes() for p in (out / "population").iterdir()}
    assert sorted(tables[3_000]) == ["phase_distribution.csv", "phase_mean.csv",
                                     "step_distribution.csv", "step_mean.csv"]
    assert tables[3_000] == tables[10**9]
    assert not list((tmp_path / "tmp").iterdir())  # the split reports are removed
