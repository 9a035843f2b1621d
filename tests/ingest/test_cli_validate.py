"""`privpipe validate` through typer's CliRunner (on a small app of its own)."""

import json

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from data.loaders import POLICY_FILE
from flows.cli_validate import validate
from schemas.policy import load_policy

app = typer.Typer()
app.command("validate")(validate)


@app.command("noop")
def _noop() -> None:  # a second command keeps "validate" a named subcommand
    """Do nothing."""


runner = CliRunner()


def _curve_csv(path, nan_row=None):
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"user_id": ["a"] * 20 + ["b"] * 20, "curve_id": "c",
                       "t": list(range(20)) * 2, "value": rng.normal(size=40)})
    df["value"] = df["value"].map(lambda v: f"{v:.6f}")
    if nan_row is not None:
        df.loc[nan_row - 1, "value"] = "NaN"
    df.to_csv(path, index=False)
    return path


def test_nan_in_row_17_exits_2_and_names_row_and_column(tmp_path):
    f = _curve_csv(tmp_path / "in.csv", nan_row=17)
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--format", "json"])
    assert res.exit_code == 2, res.output
    rows = json.loads(res.stdout)
    assert [(r["row"], r["column"], r["rule"], r["user"]) for r in rows] == [
        (17, "value", "finite", "a")]
    assert "value" not in rows[0]   # raw values only with --show-values


def test_valid_file_exits_0_with_summary(tmp_path):
    f = _curve_csv(tmp_path / "in.csv")
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--format", "json"])
    assert res.exit_code == 0, res.output
    fields = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    assert fields["users"] == 2 and fields["curves"] == 2 and fields["points"] == 40
    assert "default curves domain" in fields["note"]
    assert fields["t span (from each curve's start)"] == "0 .. 19 s"
    local = next(k for k in fields if k.startswith("content sha256"))
    assert len(fields[local]) == 64 and "--ledger" in local


def test_show_values_only_on_request(tmp_path):
    f = tmp_path / "in.csv"
    f.write_text("user_id,curve_id,t,value\nu,c,0,SECRET1\nu,c,1,2\n", encoding="utf-8")
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--format", "csv"])
    assert res.exit_code == 2 and "SECRET1" not in res.output
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--format", "csv",
                              "--show-values"])
    assert res.exit_code == 2 and "SECRET1" in res.stdout
    assert res.stdout.splitlines()[0] == "file,row,column,rule,user,message,value"


def test_table_format_prints_rejections(tmp_path):
    f = _curve_csv(tmp_path / "in.csv", nan_row=3)
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves"], terminal_width=200)
    assert res.exit_code == 2
    assert "finite" in res.stdout and "rejected" in res.stdout


def test_file_level_problem_exits_2(tmp_path):
    f = tmp_path / "in.csv"
    f.write_text("user_id,curve_id,time,value\nu,c,0,1\n", encoding="utf-8")
    res = runner.invoke(app, ["validate", str(f), "--kind", "streams", "--format", "json"])
    assert res.exit_code == 2
    rows = json.loads(res.stdout)
    assert {r["column"] for r in rows} == {"stream_id", "t"}
    res = runner.invoke(app, ["validate", str(tmp_path / "none.csv"), "--kind", "curves"])
    assert res.exit_code == 2


@pytest.mark.parametrize("args, words", [
    (["--policy", str(POLICY_FILE)], "power_italy, power_taylor"),
    (["--policy", str(POLICY_FILE), "--domain", "ecg"], "curves domain"),
    (["--policy", str(POLICY_FILE), "--domain", "nope"], "ais_tracks"),
    (["--domain", "ecg"], "--policy"),
])
def test_domain_selection_errors(tmp_path, args, words, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "home"))  # no ledger there
    f = _curve_csv(tmp_path / "in.csv")
    res = runner.invoke(app, ["validate", str(f), "--kind", "streams", *args])
    assert res.exit_code == 2
    assert words in " ".join(res.output.split())


def test_policy_domain_streams(tmp_path):
    f = tmp_path / "s.csv"
    pd.DataFrame({"user_id": "u", "stream_id": "s", "t": range(10),
                  "value": np.linspace(20000, 30000, 10)}).to_csv(f, index=False)
    res = runner.invoke(app, ["validate", str(f), "--kind", "streams", "--policy",
                              str(POLICY_FILE), "--domain", "power_taylor", "--format", "json"])
    assert res.exit_code == 0, res.output
    fields = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    assert fields["step span"] == "0 .. 9 step"
    assert fields["range of value"] == "20000 .. 30000 MW"
    f2 = tmp_path / "s2.csv"
    pd.DataFrame({"user_id": "u", "stream_id": "s", "t": range(2),
                  "value": [20000.0, 1e9]}).to_csv(f2, index=False)
    res = runner.invoke(app, ["validate", str(f2), "--kind", "streams", "--policy",
                              str(POLICY_FILE), "--domain", "power_taylor", "--format", "json"])
    assert res.exit_code == 2
    (row,) = json.loads(res.stdout)
    lo, hi = load_policy(POLICY_FILE).domain("power_taylor").value_range
    assert (row["row"], row["rule"]) == (2, "value range")
    assert f"[{lo:g}, {hi:g}] MW" in row["message"]


def test_input_time_unit_option(tmp_path):
    f = tmp_path / "ms.csv"
    pd.DataFrame({"user_id": "u", "curve_id": "c", "t": [1_600_000_000_000, 1_600_000_060_000],
                  "value": [1.0, 2.0]}).to_csv(f, index=False)
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--input-time-unit", "ms",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    fields = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    assert fields["t span (from each curve's start)"] == "0 .. 60 s"
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--input-time-unit", "wk"])
    assert res.exit_code == 2


def test_dimensionless_values_are_labelled(tmp_path):
    f = _curve_csv(tmp_path / "in.csv")
    res = runner.invoke(app, ["validate", str(f), "--kind", "curves", "--format", "json"])
    assert res.exit_code == 0, res.output
    fields = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    ranges = [v for k, v in fields.items() if k.startswith("range of ")]
    assert ranges and all(v.endswith(" (dimensionless)") for v in ranges), fields


@pytest.fixture()
def bundled_ledger(tmp_path):
    from ledger import Ledger

    path = tmp_path / "home" / "ledger.duckdb"
    Ledger.init(path).apply_policy(load_policy(POLICY_FILE))
    return path


def _taylor_csv(path):
    pd.DataFrame({"user_id": "u", "stream_id": "s", "t": range(10),
                  "value": np.linspace(20000, 30000, 10)}).to_csv(path, index=False)
    return path


def test_domain_from_the_ledger_without_policy(tmp_path, bundled_ledger):
    """Issue #29: `validate FILE --ledger L --domain D` failed ("--domain needs --policy")."""
    f = _taylor_csv(tmp_path / "s.csv")
    res = runner.invoke(app, ["validate", str(f), "--ledger", str(bundled_ledger), "--domain",
                              "power_taylor", "--format", "json"])
    assert res.exit_code == 0, res.output
    fields = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    assert fields["domain"].startswith("power_taylor (streams, wevent")  # --kind from the domain
    assert fields["range of value"] == "20000 .. 30000 MW"
    assert "fingerprint (keyed by the ledger)" in fields


def test_the_release_reports_hint_runs_as_written(tmp_path, bundled_ledger, monkeypatch):
    """A release report says `privpipe validate FILE --domain D`: the ledger a release
    uses ($PRIVPIPE_HOME/ledger.duckdb) gives the domain, no --policy, --kind or --ledger."""
    monkeypatch.setenv("PRIVPIPE_HOME", str(bundled_ledger.parent))
    f = tmp_path / "s2.csv"
    pd.DataFrame({"user_id": "u", "stream_id": "s", "t": range(2),
                  "value": [20000.0, 1e9]}).to_csv(f, index=False)
    res = runner.invoke(app, ["validate", str(f), "--domain", "power_taylor", "--format",
                              "json"])
    assert res.exit_code == 2, res.output
    (row,) = json.loads(res.stdout)
    assert (row["row"], row["column"], row["rule"]) == (2, "value", "value range")


@pytest.mark.parametrize("args, words", [
    (["--kind", "curves", "--domain", "power_taylor"], "holds streams, but --kind is curves"),
    (["--domain", "nope"], "nope"),
    ([], "--kind curves|streams is needed"),
])
def test_ledger_domain_errors(tmp_path, bundled_ledger, args, words):
    f = _taylor_csv(tmp_path / "s.csv")
    res = runner.invoke(app, ["validate", str(f), "--ledger", str(bundled_ledger), *args])
    assert res.exit_code == 2
    assert words in " ".join(res.output.split())
