"""Scriptable output: results on stdout in one --format, messages on stderr, no wrapping.

On main `audit --format json` printed an extra line on stdout (invalid JSON), release
ids wrapped across lines without a TTY, and `--fmt` and `--format` both existed.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


@pytest.mark.parametrize("cmd", [["releases"], ["denials"], ["balance"]])
def test_empty_results_say_so_and_exit_0(cmd, ledger_path):
    r = runner.invoke(app, ["ledger", *cmd, "--ledger", str(ledger_path), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == []
    r = runner.invoke(app, ["ledger", *cmd, "--ledger", str(ledger_path)])
    assert r.exit_code == 0 and r.stdout == "" and "none" in r.stderr


def test_long_ids_stay_on_one_line_off_a_terminal(ledger_path):
    from ledger import Ledger, Request

    rid = "rc-" + "a-very-long-release-identifier-" * 6 + "end"
    Ledger(ledger_path).reserve(rid, [Request("u" * 90, "tracks", amount="1/8")],
                                mechanism="manual-charge", parameters={})
    for fmt in ("table", "csv"):
        r = runner.invoke(app, ["ledger", "releases", "--ledger", str(ledger_path),
                                "--format", fmt])
        assert r.exit_code == 0
        assert any(rid in line for line in r.stdout.splitlines()), r.stdout
    r = runner.invoke(app, ["ledger", "balance", "--ledger", str(ledger_path)])
    assert any("u" * 90 in line for line in r.stdout.splitlines())


def test_audit_json_is_json_and_messages_go_to_stderr(tmp_path, ledger_path):
    r = runner.invoke(app, ["audit", "--ledger", str(ledger_path), "--out", str(tmp_path),
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert isinstance(rows, list)  # the whole of stdout parses
    assert "chain verification" in r.stderr


def test_one_spelling_of_the_format_option():
    for cmd in (["validate"], ["release", "curves"], ["release", "streams"], ["audit"],
                ["evaluate"], ["demo"], ["serve"], ["ledger", "balance"], ["ledger", "history"],
                ["ledger", "releases"], ["ledger", "denials"], ["ledger", "export"]):
        r = runner.invoke(app, [*cmd, "--help"])
        assert "--format" in r.stdout and "--fmt" not in r.stdout, cmd


def test_validate_help_lists_the_ingest_time_units():
    from flows.cli_validate import INPUT_TIME_UNIT_NAMES
    from ingest.pipeline import INPUT_TIME_UNITS

    assert INPUT_TIME_UNIT_NAMES == tuple(INPUT_TIME_UNITS)
