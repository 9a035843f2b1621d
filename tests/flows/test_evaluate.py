"""`evaluate`: raw against private on public or synthetic data; no ledger, nothing charged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.evaluate import evaluate
from tests.flows import report_inputs as inputs
from tests.flows.html_report import embedded_pngs, parse


def _no_ledger_anywhere(root: Path) -> None:
    assert not list(root.rglob("*.duckdb")) and not list(root.rglob("*.key"))


def test_bundled_evaluation_labels_errors_in_each_domains_units(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "home"))
    res = evaluate(out_dir=str(tmp_path), epsilons=[0.1], seed=1, n_curves=2)
    rows = res["rows"]
    assert {r["domain"] for r in rows} == {"ais_tracks", "ecg", "power_taylor"}
    assert len({tuple(r) for r in rows}) == 1  # the same keys for every domain's rows
    page = parse(res["report"])
    ais = {r["mechanism"]: r for r in page.table_after("AIS trajectories")}
    # PrivFuncSeg is >10x better than the baseline at ε = 0.1 (benchmarks/curves)
    assert float(ais["privfuncseg"]["RMS error (m)"].replace(",", "")) < float(
        ais["baseline (k=N/10, dist_∞)"]["RMS error (m)"].replace(",", ""))
    assert "This page shows raw data." in page.text
    assert "Nothing was charged and no ledger was opened" in page.text
    headers = {h for t in page.tables for h in t[0]}
    assert {"L2 error (m·s^½)", "RMS error (m)", "L2 error (mV·s^½)", "RMS error (mV)",
            "RMS error (MW)", "cosine distance"} <= headers
    assert len(embedded_pngs(page)) == 3
    names = sorted(p.name for p in (tmp_path / "evaluate" / "plots").glob("*.png"))
    assert names == ["ais_tracks_raw_vs_private.png", "ecg_raw_vs_private.png",
                     "power_taylor_raw_vs_private.png"]
    data = json.loads((tmp_path / "evaluate" / "evaluation.json").read_text())
    assert data["charged"] == "nothing" and data["ledger"] == "none opened"
    _no_ledger_anywhere(tmp_path)


def test_evaluate_a_users_own_file_under_its_domain(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "home"))
    policy = inputs.write_policy(tmp_path / "policy.toml")
    csv = inputs.write_geo_csv(tmp_path / "tracks.csv", with_rejected=False)
    r = CliRunner().invoke(app, ["evaluate", str(csv), "--domain", "geo", "--policy",
                                 str(policy), "--epsilons", "0.5", "--n-curves", "1",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "nothing charged, no ledger opened" in r.output
    page = parse(tmp_path / "out" / "evaluate" / "report.html")
    assert "tracks.csv: domain geo" in page.heading_texts()
    [row, _baseline] = page.table_after("tracks.csv")
    # RMS error is the L2 error over √T, T the first curve's duration (in s)
    df = inputs.geo_frame()
    first = df[(df.user_id == "vessel-0") & (df.curve_id == "trip0")]
    t = pd.to_datetime(first.t)
    duration = (t.max() - t.min()).total_seconds()
    l2, rms = (float(row[k].replace(",", "")) for k in ("L2 error (m·s^½)", "RMS error (m)"))
    assert l2 / rms == pytest.approx(np.sqrt(duration), rel=2e-3)
    assert re.search(r"A shift of [\d.,]+ m+ gives a likelihood ratio", page.text)
    assert len(embedded_pngs(page)) == 1
    _no_ledger_anywhere(tmp_path)


def test_evaluate_streams_file_in_declared_units(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "home"))
    policy = inputs.write_policy(tmp_path / "policy.toml")
    csv = tmp_path / "meters.csv"
    inputs.meters_frame().to_csv(csv, index=False)
    res = evaluate(out_dir=str(tmp_path), input_path=str(csv), domain="meters",
                   policy_path=str(policy), epsilons=[8.0], n_curves=3)
    by = {r["mechanism"]: r for r in res["rows"]}
    assert set(by) == {"SW + CPR", "SW moving average"}
    assert by["SW + CPR"]["RMS error"].endswith(" kW")
    page = parse(res["report"])
    assert "steps 0–239, 240 of the stream's 240 samples" in page.text
    assert {"RMS error (kW)", "cosine distance"} <= {h for t in page.tables for h in t[0]}
    _no_ledger_anywhere(tmp_path)


def test_evaluate_file_needs_its_domain(tmp_path):
    csv = inputs.write_geo_csv(tmp_path / "t.csv", with_rejected=False)
    r = CliRunner().invoke(app, ["evaluate", str(csv), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--domain" in r.output


def test_evaluate_streams_with_another_registered_mechanism(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "home"))
    policy = inputs.write_policy(tmp_path / "policy.toml")
    csv = tmp_path / "meters.csv"
    inputs.meters_frame().to_csv(csv, index=False)
    res = evaluate(out_dir=str(tmp_path), input_path=str(csv), domain="meters",
                   policy_path=str(policy), mechanism="piecewise", epsilons=[8.0], n_curves=3)
    by = {r["mechanism"]: r for r in res["rows"]}
    assert set(by) == {"PM moving average"}  # no CPR: it reads Square Wave reports
    assert by["PM moving average"]["RMS error"].endswith(" kW")
    assert "steps 0–239, 240 of the stream's 240 samples" in parse(res["report"]).text
    _no_ledger_anywhere(tmp_path)
