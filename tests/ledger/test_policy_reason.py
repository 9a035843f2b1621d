"""`ledger policy apply --reason`: why and by whom, inside the hash-chained policy entry.

The actor is the OS account of the effective uid, never $LOGNAME or $USER (issue #29).
"""

from __future__ import annotations

import json
import os
import pwd
import socket
from pathlib import Path

import duckdb
import pytest
from ledger_helpers import POLICY_TOML
from typer.testing import CliRunner

from flows.cli_ledger import ledger_app

runner = CliRunner()
OS_USER = pwd.getpwuid(os.geteuid()).pw_name


def run(*args, env=None):
    return runner.invoke(ledger_app, [str(a) for a in args], env=env)


@pytest.fixture
def changed(tmp_path: Path) -> Path:
    pol = tmp_path / "policy.toml"
    pol.write_text(POLICY_TOML)
    path = tmp_path / "l.duckdb"
    assert run("init", "--ledger", path, "--policy", pol).exit_code == 0
    raised = tmp_path / "raised.toml"
    raised.write_text(POLICY_TOML.replace('cap = "1.0"', 'cap = "2"'))
    spoof = {"LOGNAME": "mallory", "USER": "mallory"}
    r = run("policy", "apply", raised, "--ledger", path, "--reason", "ticket CMP-7: DPO approved",
            env=spoof)
    assert r.exit_code == 0, r.output
    return path


def test_reason_and_os_user_are_in_the_policy_history(changed):
    r = run("history", "--ledger", changed, "--domain", "ais", "--format", "json")
    rows = json.loads(r.output)
    assert [(h["change"], h["cap_before"], h["cap_after"]) for h in rows] == [
        ("create", None, 1.0), ("change", 1.0, 2.0)]
    assert rows[-1]["reason"] == "ticket CMP-7: DPO approved"
    assert rows[-1]["actor"] == f"{OS_USER}@{socket.gethostname()}"
    assert "mallory" not in r.output
    # an entry written without --reason (here: init) reads as no reason
    assert rows[0]["reason"] == ""


def test_the_reason_is_under_the_hash_chain(changed):
    assert run("verify", "--ledger", changed).exit_code == 0
    con = duckdb.connect(str(changed))
    con.execute("UPDATE entries SET detail = replace(detail, 'CMP-7', 'CMP-8') "
                "WHERE kind = 'policy'")
    con.close()
    r = run("verify", "--ledger", changed)
    assert r.exit_code == 4, r.output


def test_a_reason_with_nul_is_refused_naming_the_flag(changed, tmp_path):
    r = run("policy", "apply", tmp_path / "policy.toml", "--ledger", changed, "--reason",
            "a\x00b")
    assert r.exit_code == 2 and "--reason" in r.output
