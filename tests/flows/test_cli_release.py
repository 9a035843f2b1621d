"""CLI release/serve commands: argument errors exit 2 with one clear line."""

from __future__ import annotations

import textwrap
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from flows.serve import build_deployments, load_schedules

runner = CliRunner()


def test_release_curves_needs_exactly_one_of_epsilon_rho(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("user_id,curve_id,t,x,y\n")
    r = runner.invoke(app, ["release", "curves", str(f), "--domain", "d"])
    assert r.exit_code == 2
    assert "exactly one of --epsilon or --rho" in r.output
    r = runner.invoke(app, ["release", "curves", str(f), "--domain", "d", "--epsilon", "1",
                            "--rho", "1"])
    assert r.exit_code == 2


def test_release_options_must_be_json_object(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("user_id,curve_id,t,x,y\n")
    r = runner.invoke(app, ["release", "curves", str(f), "--domain", "d", "--epsilon", "1",
                            "--options", "[1, 2]"])
    assert r.exit_code == 2 and "JSON object" in r.output


def test_unknown_domain_exits_2(tmp_path, curves_csv, policy_file, ledger_path):
    r = runner.invoke(app, ["release", "curves", str(curves_csv), "--domain", "nope",
                            "--epsilon", "1", "--policy", str(policy_file),
                            "--ledger", str(ledger_path), "--out", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "unknown domain 'nope'" in r.output and "tracks" in r.output


def test_cgp_on_gp_domain_is_refused(tmp_path, curves_csv, policy_file, ledger_path):
    r = runner.invoke(app, ["release", "curves", str(curves_csv), "--domain", "tracks",
                            "--rho", "0.5", "--policy", str(policy_file),
                            "--ledger", str(ledger_path), "--out", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "GP" in r.output


def test_schedules_file_validation(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text('[[release]]\nname = "x"\nflow = "nope"\ncron = "0 2 * * *"\n')
    r = runner.invoke(app, ["serve", "--config", str(bad), "--check"])
    assert r.exit_code == 2
    assert "release[0].flow" in r.output


def test_schedules_build_deployments(tmp_path):
    good = tmp_path / "s.toml"
    good.write_text(textwrap.dedent("""
        [[release]]
        name = "daily-ais"
        flow = "release_curves"
        cron = "0 2 * * *"
        [release.parameters]
        input_path = "in.csv"
        domain = "tracks"
        epsilon = "0.5"
    """))
    schedules = load_schedules(good)
    deployments = build_deployments(schedules)
    assert deployments[0].name == "daily-ais"
    assert deployments[0].schedules[0].schedule.cron == "0 2 * * *"
    assert deployments[0].parameters["epsilon"] == "0.5"
    # read from the directory serve runs in, stored absolute ("Run again" elsewhere)
    assert deployments[0].parameters["input_path"] == str(Path.cwd() / "in.csv")


def test_cli_release_twice_same_release_id(tmp_path, curves_csv, policy_file, ledger_path):
    import hashlib

    from ledger import Ledger

    args = ["release", "curves", str(curves_csv), "--domain", "tracks", "--epsilon", "0.25",
            "--policy", str(policy_file), "--ledger", str(ledger_path), "--out",
            str(tmp_path / "out"), "--release-id", "cli-twice"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    rdir = tmp_path / "out" / "cli-twice"
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in rdir.glob("*.parquet")}
    assert set(digest) == {"values.parquet", "segments.parquet", "curves.parquet"}
    balances = Ledger(ledger_path).balances("tracks")
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert digest == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in rdir.glob("*.parquet")}
    assert Ledger(ledger_path).balances("tracks") == balances


def test_cli_audit_reports_and_verifies(tmp_path, ledger_path):
    r = runner.invoke(app, ["audit", "--ledger", str(ledger_path), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "audit" / "report.html").exists()
    assert "chain verification: ok" in r.output


def test_cli_release_streams_with_the_piecewise_mechanism(tmp_path, streams_csv, policy_file,
                                                          ledger_path):
    import json

    import pyarrow.parquet as pq

    args = ["release", "streams", str(streams_csv), "--domain", "meters", "--epsilon", "1",
            "--mechanism", "piecewise", "--policy", str(policy_file), "--ledger",
            str(ledger_path), "--out", str(tmp_path / "out"), "--release-id", "pm"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    rdir = tmp_path / "out" / "pm"
    manifest = json.loads((rdir / "manifest.json").read_text())
    assert manifest["parameters"]["mechanism"] == "piecewise"
    assert manifest["parameters"]["reconstruct"] == "none"  # the entry's only one
    assert "reconstruction" not in manifest["files"]
    y = pq.read_table(rdir / "samples.parquet").column("y").to_numpy()
    assert y.size == 3 * 240 and (y.min() < 0 or y.max() > 1)  # PM reports leave [0, 1]
    refused = runner.invoke(app, [*args[:-2], "--release-id", "pm-cpr", "--reconstruct", "cpr"])
    assert refused.exit_code == 2
    assert "reconstruct must be 'none' for mechanism 'piecewise'" in refused.output
