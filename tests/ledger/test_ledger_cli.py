"""`privpipe ledger ...`: CliRunner tests and real subprocesses (the acceptance scenario)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
import pytest
from ledger_helpers import POLICY_TOML, PYTHON, REPO, subprocess_env
from typer.testing import CliRunner

from flows.cli_ledger import ledger_app
from ledger import key_path_for

runner = CliRunner()


def run(*args):
    return runner.invoke(ledger_app, [str(a) for a in args])


@pytest.fixture
def cli_ledger(tmp_path: Path) -> Path:
    pol = tmp_path / "policy.toml"
    pol.write_text(POLICY_TOML)
    path = tmp_path / "l.duckdb"
    r = run("init", "--ledger", path, "--policy", pol)
    assert r.exit_code == 0, r.output
    assert "added domain 'ais'" in r.output
    return path


def test_init_policy_and_idempotency(cli_ledger, tmp_path):
    r = run("policy", "apply", tmp_path / "policy.toml", "--ledger", cli_ledger)
    assert r.exit_code == 0 and "no changes" in r.output
    r = run("init", "--ledger", cli_ledger)
    assert r.exit_code == 0
    r = run("policy", "apply", tmp_path / "missing.toml", "--ledger", cli_ledger)
    assert r.exit_code == 2 and "cannot read the policy file" in r.output
    changed = tmp_path / "changed.toml"
    changed.write_text((tmp_path / "policy.toml").read_text().replace('cap = "1.0"', 'cap = "2"'))
    r = run("policy", "apply", changed, "--ledger", cli_ledger)
    assert r.exit_code == 0 and "cap 1 -> 2" in r.output


def test_charge_admitted_then_denied_with_requested_remaining_difference(cli_ledger):
    for i in range(2):
        r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais",
                "--epsilon", "0.4", "--release", f"r{i}")
        assert r.exit_code == 0, r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais",
            "--epsilon", "0.4", "--release", "r2")
    assert r.exit_code == 3
    assert "Requested:  0.4 ε" in r.output and "Remaining:  0.2 ε" in r.output
    assert "Difference: 0.2 ε" in r.output and "L2 over m" in r.output
    # the same release again: a replay, still denied, nothing new written
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais",
            "--epsilon", "0.4", "--release", "r2")
    assert r.exit_code == 3
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais",
            "--epsilon", "0.4", "--release", "r0")
    assert r.exit_code == 0 and "already recorded" in r.output
    r = run("balance", "--ledger", cli_ledger, "--format", "json")
    rows = json.loads(r.output)
    assert rows == [{"user_id": "u", "domain": "ais", "stream_id": "", "notion": "gp",
                     "cap": 1.0, "spent": 0.8, "remaining": 0.2, "cap_exact": "1",
                     "spent_exact": "0.8", "remaining_exact": "0.2", "unit": "ε",
                     "units": "L2 over m x s^(1/2)", "state": "ok"}]
    r = run("denials", "--ledger", cli_ledger, "--format", "csv")
    assert r.exit_code == 0 and r.output.count("\n") == 2 and ",r2,u,ais," in r.output


@pytest.mark.parametrize("steps, says", [
    ("0:99999999999999999999", "at most 2^53"),      # was a 60 s wait, then "conflicting"
    ("0:9007199254740992", "more than the ledger can store"),
    ("-5:3", "0 <= START < STOP"),
])
def test_a_charge_over_impossible_steps_is_refused_at_once(cli_ledger, steps, says):
    import time

    start = time.monotonic()
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power",
            "--epsilon-per-step", "0.25", "--steps", steps, "--stream", "s", "--release", "big")
    assert r.exit_code == 2 and says in r.output, r.output
    assert time.monotonic() - start < 20, "refused before any ledger transaction"
    r = run("history", "--ledger", cli_ledger, "--user", "u", "--format", "json")
    assert json.loads(r.output) == []


def test_charge_cgp_and_wevent(cli_ledger):
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ecg", "--rho", "1/4",
            "--release", "c1")
    assert r.exit_code == 0, r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ecg", "--epsilon",
            "0.5", "--release", "c2")  # ε²/2 = 1/8
    assert r.exit_code == 0 and "remaining 0.125" in r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais", "--rho", "0.1",
            "--release", "c3")
    assert r.exit_code == 2 and "cannot be charged to a GP" in r.output
    # --epsilon is ε per window of w = 4 steps (as in `release streams`): 1/4 per step
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power", "--epsilon",
            "1", "--steps", "0:10", "--stream", "s", "--release", "w1")
    assert r.exit_code == 0, r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power", "--epsilon",
            "1", "--steps", "9:11", "--stream", "s", "--release", "w2")
    assert r.exit_code == 3 and "window of steps" in r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power", "--epsilon",
            "0.25", "--release", "w3")
    assert r.exit_code == 2 and "--steps" in r.output
    r = run("history", "--ledger", cli_ledger, "--user", "u", "--format", "json")
    kinds = [h["kind"] for h in json.loads(r.output)]
    assert kinds == ["reserve", "settle", "reserve", "settle", "reserve", "settle", "deny"]
    # w1 in the cap's unit: 1 per window, 10 steps x 1/4 = 5/2 over all of its steps
    w1 = json.loads(r.output)[4]
    assert (w1["release_id"], w1["amount"], w1["amount_all_steps"], w1["unit"]) == (
        "w1", 1.0, 2.5, "ε per window of 4 steps")
    r = run("verify", "--ledger", cli_ledger)
    assert r.exit_code == 0 and "ok:" in r.output


def test_wevent_epsilon_is_per_window_and_per_step_is_explicit(cli_ledger):
    # power: w = 4, cap 1. ε 1/2 per window over steps 0..8 is 1/8 per step
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power", "--epsilon",
            "0.5", "--steps", "0:8", "--release", "a")
    assert r.exit_code == 0 and "0.125 per step" in r.output, r.output
    # the old meaning, stated: 1/8 per step over 8..12 is again 1/2 per window
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power",
            "--epsilon-per-step", "0.125", "--steps", "8:12", "--release", "b")
    assert r.exit_code == 0, r.output
    rows = json.loads(run("history", "--ledger", cli_ledger, "--user", "u", "--format",
                          "json").output)
    assert [(h["release_id"], h["amount"], h["balance_after"]) for h in rows
            if h["kind"] == "reserve"] == [("a", 0.5, 0.5), ("b", 0.5, 0.5)]
    # one more 1/2 per window over steps 6..10 makes [6, 10) cost 2/8 + 2/8 + 1/2 = 1: fits;
    # then anything in [6, 10) would exceed the cap
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power", "--epsilon",
            "0.5", "--steps", "6:10", "--release", "c")
    assert r.exit_code == 0, r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "power", "--epsilon",
            "0.04", "--steps", "7:8", "--release", "d")
    assert r.exit_code == 3, r.output
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais",
            "--epsilon-per-step", "0.1", "--release", "e")
    assert r.exit_code == 2 and "--epsilon-per-step only applies to w-event" in r.output


@pytest.mark.parametrize("args", [
    ("--epsilon", "abc"), ("--epsilon", "-1"), ("--epsilon", "0.1", "--rho", "0.1"), (),
    ("--epsilon", "0.1", "--epsilon-per-step", "0.1"),
])
def test_bad_charge_arguments_exit_2(cli_ledger, args):
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais", "--release",
            "x", *args)
    assert r.exit_code == 2


def test_unknown_domain_and_missing_ledger_exit_2(cli_ledger, tmp_path):
    r = run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "nope", "--epsilon",
            "0.1", "--release", "x")
    assert r.exit_code == 2 and "unknown domain 'nope'" in r.output
    r = run("balance", "--ledger", tmp_path / "missing.duckdb")
    assert r.exit_code == 2 and "privpipe ledger init" in r.output
    key_path_for(cli_ledger).chmod(0o644)
    r = run("balance", "--ledger", cli_ledger)
    assert r.exit_code == 2 and "0600" in r.output


def test_releases_export_and_tampered_verify_exit_4(cli_ledger, tmp_path):
    for rel in ("a", "b"):
        assert run("charge", "--ledger", cli_ledger, "--user", "u'; DROP TABLE entries; --",
                   "--domain", "ais", "--epsilon", "0.1", "--release", rel).exit_code == 0
    r = run("releases", "--ledger", cli_ledger, "--format", "json")
    assert [x["release_id"] for x in json.loads(r.output)] == ["a", "b"]
    r = run("balance", "--ledger", cli_ledger, "--format", "json")
    assert [x["user_id"] for x in json.loads(r.output)] == ["u'; DROP TABLE entries; --"]
    r = run("history", "--ledger", cli_ledger, "--user", "u'; DROP TABLE entries; --",
            "--format", "csv")
    assert r.exit_code == 0 and r.output.count("\n") == 5
    out = tmp_path / "e.parquet"
    r = run("export", "--ledger", cli_ledger, "--out", out, "--format", "parquet")
    assert r.exit_code == 0 and "wrote 7 rows" in r.output  # 3 policy entries, 4 charges
    con = duckdb.connect()
    users = con.execute("SELECT DISTINCT user_id FROM read_parquet(?) WHERE kind <> 'policy'",
                        [str(out)]).fetchall()
    con.close()
    assert users == [("u'; DROP TABLE entries; --",)]
    con = duckdb.connect(str(cli_ledger))
    eid = con.execute("SELECT entry_id FROM entries WHERE seq = 6").fetchall()[0][0]
    con.execute("UPDATE entries SET amount = amount - 1 WHERE seq = 6")
    con.close()
    r = run("verify", "--ledger", cli_ledger)
    assert r.exit_code == 4 and "seq 6" in r.output and eid in r.output.replace("\n", "")


def test_default_ledger_path_from_privpipe_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "home"))
    assert run("init").exit_code == 0
    assert (tmp_path / "home" / "ledger.duckdb").exists()


# `python -m flows.cli` runs `flows.cli:main`, exactly what the `privpipe` console script runs.
CLI = [PYTHON, "-m", "flows.cli", "ledger"]


# One OS process running `privpipe ledger charge` 10 times in a row through the ledger
# sub-app the console script dispatches to (without paying a ~3 s start-up 10 times).
CHARGER = """
import json, sys
from flows.cli_ledger import ledger_app

ledger, k = sys.argv[1], sys.argv[2]
codes = []
for i in range(10):
    try:
        ledger_app(["charge", "--ledger", ledger, "--user", "alice", "--domain", "ais",
                    "--epsilon", "0.1", "--release", f"proc{k}-{i}"])
        codes.append(0)
    except SystemExit as exc:
        codes.append(exc.code or 0)
print(json.dumps(codes))
"""


@pytest.mark.slow
def test_acceptance_four_processes_ten_charges_each(cli_ledger):
    env = subprocess_env()
    procs = [subprocess.Popen([PYTHON, "-c", CHARGER, str(cli_ledger), str(k)], cwd=REPO,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(4)]
    codes = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        codes += json.loads(out.strip().splitlines()[-1])
        assert err.count("Requested:") == err.count("Remaining:") == err.count("Difference:")
    assert codes.count(0) == 10 and codes.count(3) == 30, codes
    cli = CLI
    p = subprocess.run([*cli, "charge", "--ledger", str(cli_ledger), "--user", "alice",
                        "--domain", "ais", "--epsilon", "0.1", "--release", "one-more"],
                       capture_output=True, text=True, env=env, cwd=REPO)
    assert p.returncode == 3 and "Difference: 0.1 ε" in p.stderr
    p = subprocess.run([*cli, "verify", "--ledger", str(cli_ledger)], capture_output=True,
                       text=True, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr
    con = duckdb.connect(str(cli_ledger))
    con.execute("UPDATE entries SET amount = amount + 1 WHERE seq = 7")
    con.close()
    p = subprocess.run([*cli, "verify", "--ledger", str(cli_ledger)], capture_output=True,
                       text=True, env=env, cwd=REPO)
    assert p.returncode == 4 and "seq 7" in p.stderr


def test_pubkey_checkpoint_and_migrate_commands(cli_ledger, tmp_path):
    from ledger_helpers import load_fixture

    from ledger.signing import public_key_path

    r = runner.invoke(ledger_app, ["pubkey", "--ledger", str(cli_ledger)])
    assert r.exit_code == 0
    assert public_key_path(cli_ledger).read_text().strip() in r.stdout.splitlines()
    cp = tmp_path / "cp.json"
    assert run("checkpoint", "--out", cp, "--ledger", cli_ledger).exit_code == 0
    assert json.loads(cp.read_text())["format"] == "privpipe-ledger-checkpoint-v1"
    r = run("checkpoint", "--out", cp, "--ledger", cli_ledger)
    assert r.exit_code == 2 and "never overwritten" in r.output
    r = run("verify", "--expect-head", cp, "--ledger", cli_ledger)
    assert r.exit_code == 0 and "1 kept signed head" in r.output
    old = load_fixture("ledger_v2", tmp_path / "old.duckdb")
    r = run("charge", "--ledger", old, "--user", "u", "--domain", "ais", "--epsilon", "0.1",
            "--release", "new")
    assert r.exit_code == 2 and "ledger migrate" in r.output
    r = run("migrate", "--ledger", old, "--policy", tmp_path / "policy.toml")
    assert r.exit_code == 0 and "schema 2 -> 4" in r.output, r.output
    r = run("charge", "--ledger", old, "--user", "u", "--domain", "ais", "--epsilon", "0.1",
            "--release", "new")
    assert r.exit_code == 0, r.output
    assert run("verify", "--ledger", old).exit_code == 0


VERIFY_WITHOUT_PANDAS = """
import sys
from flows.cli import app
try:
    app(["ledger", "verify", "--ledger", sys.argv[1]])
except SystemExit as e:
    assert e.code in (0, None), e.code
assert "pandas" not in sys.modules, "ledger verify imported pandas"
"""


def test_ledger_verify_does_not_import_pandas(cli_ledger):
    # `privpipe ledger verify` runs in every audit and many tests: pandas (0.5-1 s of
    # import) is not needed to check a chain, only numpy and pyarrow
    run("charge", "--ledger", cli_ledger, "--user", "u", "--domain", "ais", "--epsilon",
        "0.25", "--release", "r1")
    p = subprocess.run([PYTHON, "-c", VERIFY_WITHOUT_PANDAS, str(cli_ledger)], cwd=REPO,
                       env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok:" in p.stdout + p.stderr
