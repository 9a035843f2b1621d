"""A release as Prefect sees it: log lines, events, state, name, tags and parameters.

Everything is read back from the session's Prefect test harness (a real Prefect
API server in a subprocess): logs with ``read_logs``, runs with
``read_flow_runs``, events from the server's ``/events/filter`` (the harness's
server persists events; they arrive a moment after the run, so the reads wait
for them). Counts below are worked out by hand from the fixtures: policy
`tracks` has cap 2 and users 1, 3, 5 have two curves, the others one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from flows.audit_flow import audit
from flows.cli import app
from flows.outcome import ReleaseNotMadeError
from flows.release import release_curves


def _flush() -> None:
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    EventsWorker.drain_all(timeout=10)


def _run(run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def _logs(run_id: Any) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    _flush()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    return [log.message for log in logs]


def _events(resource_id: str, wanted: int) -> list[dict[str, Any]]:
    """The privpipe events about `resource_id`, once at least `wanted` arrived (30 s at most)."""
    from prefect.client.orchestration import get_client

    _flush()
    body = {"filter": {"event": {"prefix": ["privpipe."]},
                       "resource": {"id": [resource_id]}, "order": "ASC"}}
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            r = client._client.post("/events/filter", json=body)
            r.raise_for_status()
            events = r.json()["events"]
            if len(events) >= wanted:
                break
            time.sleep(0.25)
    return events


def _curves(curves_csv, policy_file, ledger_path, out, rid, epsilon) -> Any:
    return release_curves(input_path=str(curves_csv), domain="tracks", epsilon=epsilon,
                          out_dir=str(out), ledger_path=str(ledger_path),
                          policy_path=str(policy_file), release_id=rid, return_state=True)


def test_partial_release_logs_events_state_and_tags_reach_the_server(
        tmp_path, curves_csv, policy_file, ledger_path):
    # ε 1.8: users 0, 2, 4 (one curve) are admitted and reach 90% of the cap 2;
    # users 1, 3, 5 (3.6 > 2) are denied.
    state = _curves(curves_csv, policy_file, ledger_path, tmp_path / "out", "native-partial",
                    "1.8")
    run = _run(state.state_details.flow_run_id)
    assert run.state.type.value == "COMPLETED" and run.state.name == "Partial"
    assert run.state.message == ("release native-partial: 3 of 6 users released; "
                                 "3 denied (budget); 0 rejected (invalid input)")
    assert {"privpipe", "domain:tracks", "release:native-partial", "mechanism:privfuncseg",
            "notion:gp"} <= set(run.tags)
    logs = _logs(run.id)
    assert "staged 1 chunk(s) of domain 'tracks'" in logs
    assert "rejected by validation: 0 users" in logs  # public.rejections = true
    assert "release native-partial: budget reserved for 3 user(s); 3 denied (budget)" in logs
    assert any(m.startswith("release native-partial: submitted 1 chunk(s)") for m in logs)
    assert "release native-partial: settled 1 chunk(s) in the ledger" in logs
    assert any(m.startswith("release native-partial: outputs written to ") for m in logs)
    assert ("release native-partial: 3 user(s) of domain 'tracks' have now spent at least 90% "
            "of their cap") in logs
    assert not any("user-" in m for m in logs), "no user id in the run's log"
    events = _events("privpipe.release.native-partial", 2)
    by_name = {e["event"]: e for e in events}
    assert set(by_name) == {"privpipe.release.partial", "privpipe.budget.near-cap"}
    partial = by_name["privpipe.release.partial"]
    assert partial["payload"]["counts"] == {"users_released": 3, "users_denied": 3,
                                            "users_in_input": 6, "users_rejected": 0,
                                            "items": 9}  # curves in the input
    assert partial["resource"]["privpipe.domain"] == "tracks"
    related = {r["prefect.resource.id"] for r in partial["related"]}
    assert f"prefect.flow-run.{run.id}" in related and "privpipe.domain.tracks" in related
    assert by_name["privpipe.budget.near-cap"]["payload"] == {"users_near_cap": 3,
                                                               "fraction": "0.9"}


def test_denied_release_emits_denied_and_a_plain_release_settled(
        tmp_path, curves_csv, policy_file, ledger_path):
    ok = _curves(curves_csv, policy_file, ledger_path, tmp_path / "out", "native-ok", "1/4")
    run = _run(ok.state_details.flow_run_id)
    assert run.state.name == "Completed"
    assert run.state.message == ("release native-ok: 6 of 6 users released; 0 denied (budget); "
                                 "0 rejected (invalid input)")
    assert [e["event"] for e in _events("privpipe.release.native-ok", 1)] == [
        "privpipe.release.settled"]
    # everybody has 1/4 or 1/2 spent: 1.9 per curve fits nobody's remaining budget
    denied = _curves(curves_csv, policy_file, ledger_path, tmp_path / "out", "native-denied",
                     "1.9")
    assert denied.is_failed() and denied.name == "Denied"
    with pytest.raises(ReleaseNotMadeError):
        denied.result()
    events = _events("privpipe.release.native-denied", 1)
    assert [e["event"] for e in events] == ["privpipe.release.denied"]
    assert events[0]["payload"]["counts"]["users_denied"] == 6


def test_a_run_failing_on_input_is_named_failed_and_emits_failed(
        tmp_path, policy_file, ledger_path):
    bad = tmp_path / "no_y.csv"  # the flow itself (not the CLI's preflight) refuses it
    bad.write_text("user_id,curve_id,t,x\nu1,c1,0,1.0\nu1,c1,1,2.0\n")
    state = release_curves(input_path=str(bad), domain="tracks", epsilon="1",
                           out_dir=str(tmp_path / "out"), ledger_path=str(ledger_path),
                           policy_path=str(policy_file), return_state=True)
    assert state.is_failed()
    run = _run(state.state_details.flow_run_id)
    assert run.name == "release-curves-tracks-failed"
    assert {"privpipe", "domain:tracks", "failed"} <= set(run.tags)
    from prefect.client.orchestration import get_client

    _flush()
    body = {"filter": {"event": {"name": ["privpipe.release.failed"]},
                       "related": {"id": [f"prefect.flow-run.{run.id}"]}}}
    deadline, events = time.monotonic() + 30, []
    with get_client(sync_client=True) as client:
        while not events and time.monotonic() < deadline:
            events = client._client.post("/events/filter", json=body).json()["events"]
            time.sleep(0.25)
    assert len(events) == 1
    assert events[0]["resource"]["prefect.resource.id"] == "privpipe.release.unknown"
    assert events[0]["payload"] == {"error": "ValidationError", "exit_code": 2}


def test_audit_run_is_named_tagged_and_an_integrity_failure_is_an_event(
        tmp_path, curves_csv, policy_file, ledger_path):
    state = audit(ledger_path=str(ledger_path), out_dir=str(tmp_path / "a"), return_state=True)
    run = _run(state.state_details.flow_run_id)
    assert run.name == "audit-ledger.duckdb" and {"privpipe", "audit"} <= set(run.tags)
    assert run.state.message.startswith("ledger verifies (")
    _curves(curves_csv, policy_file, ledger_path, tmp_path / "out", "native-audit", "1/4")
    con = duckdb.connect(str(ledger_path))
    con.execute("UPDATE entries SET amount = amount / 2 WHERE seq = (SELECT max(seq) "
                "FROM entries WHERE kind = 'reserve')")
    con.close()
    tampered = audit(ledger_path=str(ledger_path), out_dir=str(tmp_path / "b"),
                     return_state=True)
    assert tampered.result()["ok"] is False
    assert _run(tampered.state_details.flow_run_id).state.message.startswith(
        "ledger does NOT verify")
    # one resource per ledger file (every test's ledger is called ledger.duckdb):
    # privpipe.ledger.<sha256 of its absolute path, 16 hex digits>
    digest = hashlib.sha256(str(Path(ledger_path).absolute()).encode()).hexdigest()[:16]
    events = _events(f"privpipe.ledger.{digest}", 1)
    assert [e["event"] for e in events] == ["privpipe.ledger.integrity-failed"]


def test_rejections_are_logged_only_when_the_policy_publishes_them(tmp_path, caplog):
    from flows import signals
    from schemas.policy import load_policy
    from tasks.stage import StagePlan

    def domain(public: str) -> Any:
        path = tmp_path / f"{public.split()[-1]}.toml"
        path.write_text(
            '[domains.tracks]\nkind = "curves"\nnotion = "gp"\ncap = "2"\ntime_unit = "s"\n'
            f'value_columns = ["x"]\nvalue_unit = "m"\npublic = {{ {public} }}\n')
        return load_policy(path).domains["tracks"]

    plan = StagePlan("fp", [], {}, rejected=[
        {"user_id": "alice", "reasons": [], "rules": ["t_sorted", "x_finite"]},
        {"user_id": "bob", "reasons": [], "rules": ["x_finite"]}])
    with caplog.at_level(logging.INFO, logger="flows.signals"):
        signals.log_staged(domain("duration = true, points = true, rejections = true"), plan)
        public = [r.getMessage() for r in caplog.records]
        caplog.clear()
        signals.log_staged(domain("duration = true, points = true, rejections = false"), plan)
        private = [r.getMessage() for r in caplog.records]
    assert "rejected by validation: 2 user(s) (by rule: t_sorted: 1, x_finite: 2)" in public
    assert not any("alice" in m or "bob" in m for m in public + private)
    # no count, no rule name, the same sentence whether or not anyone was rejected
    assert not any("2" in m or "x_finite" in m for m in private), private
    assert any("not published" in m for m in private)


def _workdir(tmp_path: Path, curves_csv: Path, ledger_path: Path, monkeypatch) -> Path:
    """A working directory holding the input and the ledger (with its key files)."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(curves_csv, work / "curves.csv")
    for path in Path(ledger_path).parent.glob("ledger.duckdb*"):
        shutil.copy(path, work / path.name)
    monkeypatch.chdir(work)
    return work


def _parameters(name: str) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            name=FlowRunFilterName(any_=[name])))
    assert len(runs) == 1
    return runs[0].parameters


def test_cli_parameters_are_absolute_paths(tmp_path, curves_csv, policy_file, ledger_path,
                                           monkeypatch):
    work = _workdir(tmp_path, curves_csv, ledger_path, monkeypatch)
    r = CliRunner().invoke(app, ["release", "curves", "curves.csv", "--domain", "tracks",
                                 "--epsilon", "1/8", "--ledger", "ledger.duckdb", "--out", "out",
                                 "--release-id", "native-abs", "--format", "json", "--quiet"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["output"] == str(work / "out" / "native-abs")
    assert r.stderr == ""  # --quiet: the result on stdout, nothing else
    params = _parameters("native-abs")
    assert params["input_path"] == str(work / "curves.csv")
    assert params["ledger_path"] == str(work / "ledger.duckdb")
    assert params["out_dir"] == str(work / "out")


def test_python_api_parameters_are_absolute_paths(tmp_path, curves_csv, ledger_path,
                                                  monkeypatch):
    from flows.api import release_curves as api_release

    work = _workdir(tmp_path, curves_csv, ledger_path, monkeypatch)
    res = api_release("curves.csv", domain="tracks", epsilon="1/8", ledger_path="ledger.duckdb",
                      out_dir="out", release_id="native-api-abs")
    assert res["out"] == str(work / "out" / "native-api-abs")
    params = _parameters("native-api-abs")
    assert (params["input_path"], params["ledger_path"], params["out_dir"]) == (
        str(work / "curves.csv"), str(work / "ledger.duckdb"), str(work / "out"))


def test_evaluate_run_is_named_and_tagged_from_its_parameters(tmp_path, curves_csv):
    from flows.evaluate import evaluate

    state = evaluate(out_dir=str(tmp_path), input_path=str(curves_csv), domain="tracks",
                     n_curves=0, return_state=True)  # refused inside the run: n_curves < 1
    assert state.is_failed()
    run = _run(state.state_details.flow_run_id)
    assert run.name == "evaluate-tracks"
    assert {"privpipe", "evaluate", "domain:tracks"} <= set(run.tags)


def test_verbose_and_quiet_together_are_refused(tmp_path, curves_csv):
    r = CliRunner().invoke(app, ["release", "curves", str(curves_csv), "--domain", "tracks",
                                 "--epsilon", "1", "-v", "-q"])
    assert r.exit_code == 2 and "--verbose and --quiet" in r.output


def test_documented_events_and_automation_example():
    import re

    import yaml
    from prefect.client.orchestration import get_client
    from prefect.events.schemas.automations import AutomationCore

    from flows.signals import EVENTS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    table = doc[doc.index("### Prefect events"):doc.index("## Environment variables")]
    assert set(re.findall(r"^\| `(privpipe\.[a-z.-]+)` \|", table, re.M)) == set(EVENTS)
    block = re.findall(r"```yaml\n(.*?)```", table, re.S)[0]
    automation = AutomationCore.model_validate(yaml.safe_load(block))
    assert automation.trigger.expect == {"privpipe.release.denied"}
    with get_client(sync_client=True) as client:  # the server takes it as written
        created = client.read_automation(client.create_automation(automation))
        client.delete_automation(created.id)
    assert created.name == "privpipe release denied"
