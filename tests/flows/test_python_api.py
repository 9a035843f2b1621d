"""The Python API: `from flows import release_curves, release_streams, audit`.

On main `from flows import release_curves` failed and the flow refused a float
epsilon. The runnable example of docs/python-api.md is executed here as a user
would run it (a fresh interpreter, no Prefect configuration).
"""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from flows import audit, release_curves, release_streams
from schemas.errors import ParameterError

REPO = Path(__file__).resolve().parents[2]


def test_importing_flows_changes_nothing(tmp_path):
    """`import flows` and its API names set no variable, create no file, load no Prefect."""
    import subprocess
    import sys

    code = ("import os, sys; before = dict(os.environ); import flows; "
            "from flows import audit, release_curves, release_streams; "
            "assert dict(os.environ) == before, set(os.environ) ^ set(before); "
            "assert 'prefect' not in sys.modules; import gc; print(gc.get_threshold())")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    assert list(tmp_path.iterdir()) == [], "importing flows created files"
    assert out.strip() == str(__import__("gc").get_threshold())


def test_the_names_are_the_api_functions_even_after_the_submodules_load():
    import flows.audit_flow  # the flow's module: another name, so nothing shadows the API
    from flows import audit as again
    from flows.audit_flow import audit as audit_flow

    assert again is audit and flows.audit is audit and callable(audit)
    assert audit_flow is not audit and hasattr(audit_flow, "fn")  # the Prefect flow
    assert release_curves.__module__ == release_streams.__module__ == "flows.api"


def test_float_and_string_epsilon_are_one_release(tmp_path, curves_csv, policy_file,
                                                  ledger_path):
    from ledger import Ledger

    kw = dict(domain="tracks", ledger_path=ledger_path, policy_path=policy_file,
              out_dir=tmp_path / "out")
    a = release_curves(curves_csv, epsilon=0.25, **kw)
    b = release_curves(curves_csv, epsilon="1/4", **kw)
    c = release_curves(curves_csv, epsilon="0.25", **kw)
    assert a["release_id"] == b["release_id"] == c["release_id"]
    spent = {r["user_id"]: r["spent"] for r in Ledger(ledger_path).balances("tracks")}
    curves_of = {f"user-{u}": 1 + u % 2 for u in range(6)}
    assert spent == {u: n * Fraction(1, 4) for u, n in curves_of.items()}  # charged once


def test_audit_takes_the_cli_filters_and_a_kept_head(tmp_path, curves_csv, policy_file,
                                                     ledger_path):
    import json

    from ledger import Ledger

    release_curves(curves_csv, epsilon=0.25, domain="tracks", ledger_path=ledger_path,
                   policy_path=policy_file, out_dir=tmp_path / "out", release_id="first")
    cp = tmp_path / "cp.json"
    Ledger(ledger_path).checkpoint(cp)
    release_curves(curves_csv, epsilon=0.5, domain="tracks", ledger_path=ledger_path,
                   policy_path=policy_file, out_dir=tmp_path / "out", release_id="second")
    res = audit(ledger_path=ledger_path, out_dir=tmp_path / "a", user="user-1",
                since_checkpoint=cp, expect_heads=[cp])
    assert res["ok"]
    doc = json.loads((tmp_path / "a" / "audit" / "audit.json").read_text())
    assert doc["filter"]["user"] == "user-1"
    assert {d["release_id"] for d in doc["releases"]} == {"first", "second"}
    assert doc["denials_per_user"] == []
    since = doc["since_checkpoint"]
    assert since["in_chain"] and [r["release_id"] for r in since["releases"]] == ["second"]


def test_bad_arguments_fail_before_prefect(tmp_path, curves_csv, policy_file, ledger_path,
                                           monkeypatch):
    import flows.api

    def no_prefect() -> None:
        raise AssertionError("Prefect reached before the checks")

    monkeypatch.setattr(flows.api, "_prefect", no_prefect)
    with pytest.raises(ParameterError, match="must be > 0"):
        release_curves(curves_csv, domain="tracks", epsilon=0, ledger_path=ledger_path,
                       policy_path=policy_file)
    with pytest.raises(ParameterError, match="no such file"):
        release_streams(tmp_path / "none.csv", domain="meters", epsilon=1.0,
                        ledger_path=ledger_path, policy_path=policy_file)
    from ledger import Ledger

    Ledger.init(ledger_path)
    with pytest.raises(ParameterError, match="since must be an ISO 8601"):
        audit(ledger_path=ledger_path, since="2026-31-01")
    with pytest.raises(ParameterError, match="no-such.json"):
        audit(ledger_path=ledger_path, since_checkpoint=tmp_path / "no-such.json")


def test_the_documented_example_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env["HOME"] = str(tmp_path)  # no ~/.prefect profile: the temporary server is used
    res = subprocess.run([sys.executable, str(REPO / "examples" / "python_api.py"),
                          str(tmp_path / "work")], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "8 users released, 0 denied" in res.stdout
    assert "(the same release)" in res.stdout
    assert "audit: ledger verifies" in res.stdout
    assert (tmp_path / ".privpipe" / "prefect" / "prefect.db").is_file()  # rule 3, as the CLI
    doc = (REPO / "docs" / "python-api.md").read_text()
    assert "examples/python_api.py" in doc
