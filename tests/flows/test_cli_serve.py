"""`serve --check` validates every schedule as its runs would, and lists every problem.

On main it exited 0 for a missing input file, an unknown domain, epsilon = "-1",
a misspelled parameter and a ledger path that is a directory, and the flow then
refused a numeric epsilon = 0.05 at run time.
"""

from __future__ import annotations

import json
import textwrap

from typer.testing import CliRunner

from flows.cli import app
from flows.serve import build_deployments, load_schedules

runner = CliRunner()


def _write(path, body: str):
    path.write_text(textwrap.dedent(body))
    return path


def _good(tmp_path, curves_csv, ledger_path, policy_file) -> str:
    return f"""
        [[release]]
        name = "daily-tracks"
        flow = "release_curves"
        cron = "0 2 * * *"
        timezone = "Europe/Paris"
        [release.parameters]
        input_path = "{curves_csv}"
        domain = "tracks"
        epsilon = 0.05
        ledger_path = "{ledger_path}"
        policy_path = "{policy_file}"
        out_dir = "{tmp_path / 'out'}"

        [[release]]
        name = "weekly-audit"
        flow = "audit"
        cron = "0 6 * * 1"
        [release.parameters]
        ledger_path = "{ledger_path}"
        out_dir = "{tmp_path / 'out'}"
    """


def test_check_accepts_a_valid_file_with_a_numeric_epsilon(tmp_path, curves_csv, ledger_path,
                                                           policy_file):
    f = _write(tmp_path / "s.toml", _good(tmp_path, curves_csv, ledger_path, policy_file))
    r = runner.invoke(app, ["serve", "--config", str(f), "--check", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["deployment"] for row in rows] == ["daily-tracks", "weekly-audit"]


def test_check_lists_every_problem(tmp_path, curves_csv, ledger_path, policy_file):
    f = _write(tmp_path / "s.toml", f"""
        [[release]]
        name = "missing-file"
        flow = "release_curves"
        cron = "0 2 * * *"
        [release.parameters]
        input_path = "{tmp_path / 'nope.csv'}"
        domain = "tracks"
        epsilon = "0.05"
        ledger_path = "{ledger_path}"
        policy_path = "{policy_file}"

        [[release]]
        name = "unknown-domain"
        flow = "release_curves"
        cron = "0 2 * * *"
        [release.parameters]
        input_path = "{curves_csv}"
        domain = "nope"
        epsilon = "0.05"
        ledger_path = "{ledger_path}"
        policy_path = "{policy_file}"

        [[release]]
        name = "negative-epsilon"
        flow = "release_curves"
        cron = "0 2 * * *"
        [release.parameters]
        input_path = "{curves_csv}"
        domain = "tracks"
        epsilon = "-1"
        ledger_path = "{ledger_path}"
        policy_path = "{policy_file}"

        [[release]]
        name = "misspelled"
        flow = "release_curves"
        cron = "0 2 * * *"
        [release.parameters]
        input_path = "{curves_csv}"
        domain = "tracks"
        epsilone = "0.05"
        ledger_path = "{ledger_path}"

        [[release]]
        name = "ledger-dir"
        flow = "release_streams"
        cron = "0 2 * * *"
        [release.parameters]
        input_path = "{curves_csv}"
        domain = "meters"
        epsilon = "1"
        ledger_path = "{tmp_path}"

        [[release]]
        name = "bad-cron"
        flow = "audit"
        cron = "61 2 * * *"
        timezone = "Mars/Olympus"
        [release.parameters]
        ledger_path = "{ledger_path}"
    """)
    r = runner.invoke(app, ["serve", "--config", str(f), "--check"])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    err = r.stderr
    # one round (issue #29: the parameters were checked only once the cron was fixed):
    # the shape's 2 problems, the 5 schedules' parameters, and the misspelled schedule's
    # missing epsilon (its unknown key no longer stops its other checks)
    assert "8 problems" in err, err
    assert "release[5].cron" in err and "release[5].timezone" in err
    assert "release[3].parameters.epsilon:" in err and "exactly one of epsilon or rho" in err
    assert "release[0].parameters.input_path" in err and "no such file" in err
    assert "release[1].parameters.domain" in err and "unknown domain 'nope'" in err
    assert "release[2].parameters.epsilon" in err and "must be > 0" in err
    assert "release[3].parameters.epsilone" in err and "unknown parameter" in err
    assert "release[4].parameters.ledger_path" in err and "is a directory" in err


def test_deployments_carry_descriptions_and_choices(tmp_path, curves_csv, ledger_path,
                                                    policy_file):
    f = _write(tmp_path / "s.toml", _good(tmp_path, curves_csv, ledger_path, policy_file))
    dep = build_deployments(load_schedules(f))[0]
    props = dep._parameter_openapi_schema.properties
    assert set(props["mechanism"]["enum"]) == {"privfuncseg", "project_and_privatize",
                                               "privfuncselect", "baseline"}
    assert "ε per curve" in props["epsilon"]["description"]
    assert props["evaluate_on"]["enum"] == ["grid", "input"]
    assert all(p.get("description") for p in props.values()), props


def test_the_example_schedules_check_after_the_demo_is_prepared(tmp_path, monkeypatch):
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRIVPIPE_HOME", raising=False)
    r = runner.invoke(app, ["demo", "--prepare-only", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert {row["domain"] for row in json.loads(r.stdout)} >= {"ais_tracks", "power_taylor"}
    r = runner.invoke(app, ["serve", "--config", str(repo / "examples" / "schedules.toml"),
                            "--check", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert [row["deployment"] for row in json.loads(r.stdout)] == ["daily-ais", "weekly-audit"]
