"""Continuing stream releases: reconstruction from every release so far, population view."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from data import households as hh
from flows.release import release_streams
from ledger import Ledger

pytestmark = pytest.mark.prefect


@pytest.fixture(scope="module")
def meters(tmp_path_factory) -> pd.DataFrame:
    """25 households, 6 days (288 half-hours), kWh in the meters domain's [0, 10] kW range."""
    df = hh.households(25, 6, seed=3, missing_day_rate=0.0)
    return df


def _csv(df: pd.DataFrame, path: Path) -> str:
    df.to_csv(path, index=False)
    return str(path)


def _release(path, policy_file, ledger_path, out, **kw):
    return release_streams(input_path=path, domain="meters", epsilon="1", out_dir=str(out),
                           ledger_path=str(ledger_path), policy_path=str(policy_file),
                           chunk_users=10, **kw)


def test_population_view_is_written_and_charges_nothing(meters, policy_file, ledger_path,
                                                         tmp_path, monkeypatch):
    from tasks import population

    opened: list[str] = []  # the release sums its chunks' reports: no scan of its file
    real = population._open
    monkeypatch.setattr(population, "_open", lambda path, *a: opened.append(path) or real(path, *a))
    res = _release(_csv(meters, tmp_path / "m.csv"), policy_file, ledger_path, tmp_path,
                   population_period=48)
    assert opened == []
    man = res["manifest"]
    pop = man["population"]
    assert pop["users"] == 25 and pop["period"] == 48 and pop["reports"] == len(meters)
    rdir = Path(res["out"])
    # the tables of one scan of the published samples, byte for byte (3 chunks summed)
    again = population.population_view_fn(
        str(rdir / "samples.parquet"), str(tmp_path / "again"), epsilon_per_step=0.25,
        value_range=(0.0, 10.0), value_unit="kW", period=48)
    assert opened == [str(rdir / "samples.parquet")]
    assert again["files"] == pop["files"] and again["users"] == 25
    for name in pop["files"].values():
        assert (rdir / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    phase = pd.read_csv(rdir / pop["files"]["phase_mean"])
    assert list(phase["phase"]) == list(range(48))
    # in the domain's units (kW on [0, 10]) and bracketing the estimate
    assert phase["lower"].min() >= 0.0 and phase["upper"].max() <= 10.0
    assert (phase["lower"] <= phase["mean"].clip(0, 10)).all()
    truth = meters.assign(ph=meters["t"] % 48).groupby("ph")["value"].mean().to_numpy()
    assert np.mean((phase["lower"] <= truth) & (truth <= phase["upper"])) >= 0.85
    dist = pd.read_csv(rdir / pop["files"]["step_distribution"])
    assert len(dist) == 288 and (dist["q25"] <= dist["q75"]).all()
    assert (rdir / "plots" / "population.png").is_file()
    assert "Population view" in (rdir / "report.md").read_text()
    # the charges are those of the samples alone: ε/w per step, every window at ε
    bal = Ledger(str(ledger_path)).balances(domain="meters")
    assert len(bal) == 25 and all(Fraction(str(b["spent"])) == 1 for b in bal)


def test_next_day_reconstructs_the_whole_history(meters, policy_file, ledger_path, tmp_path):
    day12 = meters[meters["t"] < 96]
    day34 = meters[(meters["t"] >= 96) & (meters["t"] < 192)]
    first = _release(_csv(day12, tmp_path / "d12.csv"), policy_file, ledger_path, tmp_path)
    second = _release(_csv(day34, tmp_path / "d34.csv"), policy_file, ledger_path, tmp_path)
    assert second["manifest"]["history"]["releases"] == [first["release_id"]]
    rec = pq.read_table(Path(second["out"]) / "reconstruction.parquet").to_pandas()
    per_user = rec.groupby("user_id")["step"].agg(["min", "max", "count"])
    assert (per_user["min"] == 0).all() and (per_user["max"] == 191).all()
    assert (per_user["count"] == 192).all()
    summary = {p["user_id"]: p for p in second["manifest"]["periods"]}
    assert all(s["history_samples"] == 96 and s["samples"] == 96 for s in summary.values())
    assert all(s["conflicting_steps"] == 0 for s in summary.values())
    progress = second["manifest"]["history"]["progress"]
    assert [r["after release"] for r in progress] == [first["release_id"], "this release"]
    assert progress[-1]["reports per stream (median)"] == 192
    assert "every release so far" in (Path(second["out"]) / "report.md").read_text()
    # the two releases touch different steps: each step charged once, windows continue
    # across the boundary at exactly ε
    for b in Ledger(str(ledger_path)).balances(domain="meters"):
        assert Fraction(str(b["spent"])) == 1


def test_an_edited_earlier_output_is_not_used(meters, policy_file, ledger_path, tmp_path):
    # the attack: after day 1-2 was released, someone rewrites its samples file (here:
    # every report set to the top of the range) to steer the next reconstruction
    day12 = meters[meters["t"] < 96]
    day34 = meters[(meters["t"] >= 96) & (meters["t"] < 192)]
    first = _release(_csv(day12, tmp_path / "d12.csv"), policy_file, ledger_path, tmp_path)
    path = Path(first["out"]) / "samples.parquet"
    table = pq.read_table(path).to_pandas()
    table["y"] = table["y"].max()
    table.to_parquet(path, index=False)
    stored = sorted((ledger_path.parent / "published").glob("*.parquet"))
    assert len(stored) == 1  # the ledger's own copy (the fallback of another output root)
    stored[0].chmod(0o600)
    stored[0].write_bytes(path.read_bytes())  # edited there too
    second = _release(_csv(day34, tmp_path / "d34.csv"), policy_file, ledger_path, tmp_path)
    hist = second["manifest"]["history"]
    assert hist["releases"] == []
    assert hist["skipped"][0]["release_id"] == first["release_id"]
    assert "does not match the digest" in hist["skipped"][0]["reason"]
    rec = pq.read_table(Path(second["out"]) / "reconstruction.parquet").to_pandas()
    assert rec["step"].min() == 96  # only this release's own reports
    assert "Earlier releases not used" in (Path(second["out"]) / "report.md").read_text()


def test_rerun_of_an_earlier_release_ignores_later_ones(meters, policy_file, ledger_path,
                                                        tmp_path):
    day12 = meters[meters["t"] < 96]
    day34 = meters[(meters["t"] >= 96) & (meters["t"] < 192)]
    d12 = _csv(day12, tmp_path / "d12.csv")
    first = _release(d12, policy_file, ledger_path, tmp_path)
    before = (Path(first["out"]) / "reconstruction.parquet").read_bytes()
    _release(_csv(day34, tmp_path / "d34.csv"), policy_file, ledger_path, tmp_path)
    again = _release(d12, policy_file, ledger_path, tmp_path)
    assert again["release_id"] == first["release_id"]
    assert "history" not in again["manifest"]
    assert (Path(again["out"]) / "reconstruction.parquet").read_bytes() == before
