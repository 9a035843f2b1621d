"""Hypothesis over the CLI: random argument lists for validate, ledger and release.

The exit code is always one of the documented 0, 2, 3, 4 (never 1, the
internal-error code), no traceback reaches the user, and a call that fails
charges nothing.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import harness
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from flows.cli import app

VALUES = ["", "0", "-1", "1", "1/3", "2", "1/0", "nan", "inf", "1e999", "abc", "0:4", "4:0",
          "a:b", "-1:3", "tracks", "meters", "user-0", "meter-0", "s0", "release",
          "'; DROP TABLE entries; --", "\" OR \"1\"=\"1", "x" * 300, "csv", "json", "table",
          "parquet", "curves", "streams", "{}", "{\"m\": -1}", "[1]", "{bad json",
          "privfuncseg", "baseline", "nope", "cpr", "none", "input", "grid", "entries",
          "balances", "\U0001f600", "--", "-", "s", "h"]
OPTIONS = ["--user", "--domain", "--release", "--epsilon", "--rho", "--steps", "--stream",
           "--step", "--format", "--kind", "--policy", "--out", "--fmt", "--what", "--reason",
           "--release-id", "--options", "--chunk-users", "--table", "--evaluate-on",
           "--mechanism", "--reconstruct", "--input-time-unit", "--ledger", "--near-cap",
           "--bogus"]
LEDGER_CMDS = [["ledger", c] for c in ("init", "charge", "balance", "history", "releases",
                                       "denials", "verify", "export", "close")] + [
    ["ledger", "policy", "apply"], ["ledger"], ["validate"], []]
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def world(tmp_path_factory, setup):
    """A ledger (template copy), inputs, a policy, a junk file and a directory."""
    root = tmp_path_factory.mktemp("cli-fuzz")
    ledger = harness.clone_ledger(setup.template, root / "home")
    junk = root / "junk.duckdb"
    junk.write_bytes(b"not a database at all")
    return {"ledger": ledger, "policy": setup.policy, "curves": setup.inputs["curves"],
            "streams": setup.inputs["streams"], "junk": junk, "dir": root,
            "missing": root / "missing.csv"}


def _paths(world):
    return [str(world[k]) for k in ("ledger", "policy", "curves", "streams", "junk", "dir",
                                    "missing")]


def _argv(world, commands):
    paths = _paths(world)
    value = st.one_of(st.sampled_from(VALUES), st.sampled_from(paths), st.text(max_size=10))
    pair = st.tuples(st.sampled_from(OPTIONS), value).map(list)
    return st.tuples(st.sampled_from(commands), st.lists(st.one_of(pair, value.map(
        lambda v: [v])), max_size=6), st.booleans()).map(
        lambda t: [*t[0], *[x for p in t[1] for x in p],
                   *(["--ledger", str(world["ledger"])] if t[2] else [])])


def _spent(ledger: Path) -> dict:
    from ledger import Ledger

    return {(r["user_id"], r["domain"], r["stream_id"]): r["spent"]
            for r in Ledger(ledger).balances()}


def _invoke(world, argv):
    before = _spent(world["ledger"])
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as cwd:
        home = Path(cwd) / "home"
        with contextlib.chdir(cwd):
            res = runner.invoke(app, argv, env={"PRIVPIPE_HOME": str(home), "COLUMNS": "200"})
        shutil.rmtree(home, ignore_errors=True)
    out = res.output
    assert res.exit_code in (0, 2, 3, 4), (argv, res.exit_code, out)
    assert "Traceback" not in out, (argv, out)
    assert res.exception is None or isinstance(res.exception, SystemExit), (argv, res.exception)
    if res.exit_code != 0:
        assert _spent(world["ledger"]) == before, f"a failed call charged budget: {argv}"
    return res


@SETTINGS
@given(data=st.data())
def test_ledger_and_validate_commands(world, data):
    _invoke(world, data.draw(_argv(world, LEDGER_CMDS)))


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["curves", "streams"]),
       domain=st.sampled_from(["tracks", "meters", "nope", "'; DROP TABLE domains;--"]),
       eps=st.sampled_from(["1/4", "1", "0", "-1", "nan", "1/0", "1e999", "abc", "100"]),
       rid=st.sampled_from(["'; DROP TABLE entries;--", "r\u202e", "", "fuzz", "x" * 300]),
       extra=st.lists(st.tuples(st.sampled_from(OPTIONS), st.sampled_from(VALUES)), max_size=2))
def test_release_commands(world, kind, domain, eps, rid, extra):
    argv = ["release", kind, str(world[kind]), "--domain", domain, "--epsilon", eps,
            "--release-id", rid, "--ledger", str(world["ledger"]), "--policy",
            str(world["policy"]), *[x for pair in extra for x in pair]]
    _invoke(world, argv)


def test_non_utf8_argument_is_not_an_internal_error(world):
    # what Linux hands Python for the argv byte 0xff (surrogateescape)
    res = CliRunner().invoke(app, ["ledger", "charge", "--user", "\udcff", "--domain", "tracks",
                                   "--release", "r", "--epsilon", "1", "--ledger",
                                   str(world["ledger"])])
    assert res.exit_code == 2, res.output
    assert "user_id" in res.output
