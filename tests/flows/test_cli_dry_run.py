"""`privpipe release ... --dry-run`: who would be admitted or denied, at what cost; nothing else.

A dry run validates, derives the release id the release would use, and shows each
user's decision, cost and the budget left after, from `Ledger.plan`: it charges
nothing (the ledger's entries and balances are unchanged), draws no noise and writes
no output; exit 3 when nobody would be admitted.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def _args(curves_csv, policy_file, ledger_path, out, *extra):
    return ["release", "curves", str(curves_csv), "--domain", "tracks", "--policy",
            str(policy_file), "--ledger", str(ledger_path), "--out", str(out), "--format",
            "json", *extra]


def _state(ledger_path):
    import duckdb

    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        con.close()


def test_dry_run_shows_decisions_and_charges_nothing(tmp_path, curves_csv, policy_file,
                                                     ledger_path):
    before = _state(ledger_path)
    out = tmp_path / "out"
    r = runner.invoke(app, _args(curves_csv, policy_file, ledger_path, out, "--epsilon", "1.5",
                                 "--dry-run"))
    assert r.exit_code == 0, r.output
    rows = {row["user_id"]: row for row in json.loads(r.stdout)}
    # cap 2: users 1, 3, 5 have two curves (3 > 2), the others one (1.5 <= 2)
    assert {u for u, row in rows.items() if row["decision"] == "admitted"} == {
        "user-0", "user-2", "user-4"}
    assert rows["user-0"]["requested"] == "1.5" and rows["user-0"]["remaining_after"] == "0.5"
    assert rows["user-1"]["decision"] == "denied" and rows["user-1"]["requested"] == "3"
    assert rows["user-1"]["remaining_after"] == "2"  # before: nothing was charged
    assert "3 of 6 users would be released" in r.stderr and "nothing charged" in r.stderr
    assert _state(ledger_path) == before
    assert not out.exists() or not [p for p in out.iterdir() if p.name != ".staging"]

    real = runner.invoke(app, _args(curves_csv, policy_file, ledger_path, out, "--epsilon",
                                    "1.5"))
    assert real.exit_code == 0, real.output
    planned_id = r.stderr.split("dry run of ", 1)[1].split(":", 1)[0]
    assert json.loads(real.stdout)[0]["release_id"] == planned_id
    assert json.loads(real.stdout)[0]["denied"] == 3


def test_dry_run_exits_3_when_nobody_fits(tmp_path, curves_csv, policy_file, ledger_path):
    before = _state(ledger_path)
    r = runner.invoke(app, _args(curves_csv, policy_file, ledger_path, tmp_path / "out",
                                 "--epsilon", "3", "--dry-run"))
    assert r.exit_code == 3, r.output
    assert {row["decision"] for row in json.loads(r.stdout)} == {"denied"}
    assert _state(ledger_path) == before
