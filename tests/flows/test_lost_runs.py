"""A run whose privpipe process was SIGKILLed does not stay Running: the next command marks it
Crashed, naming the process and the fix, and the rerun finishes the release, charged once.

The first part needs no Prefect (processes and tags); the second kills a real CLI release
that reports to the session's Prefect harness and reads the run back from its API.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from flows.lost_runs import (
    RunProcess,
    is_lost,
    parse_process_tag,
    process_tag,
    reap_lost_runs,
    start_time,
)

PRIVPIPE = Path(sys.executable).with_name("privpipe")


def test_a_process_is_named_by_host_pid_and_start_time():
    tag = process_tag()
    proc = parse_process_tag(["privpipe", tag])
    assert proc == RunProcess(socket.gethostname(), os.getpid(), start_time(os.getpid()))
    assert proc.start > 0
    assert not is_lost(proc, socket.gethostname())


def test_an_ended_or_reused_pid_is_lost_and_another_host_is_left_alone():
    host = socket.gethostname()
    assert is_lost(RunProcess(host, os.getpid(), start_time(os.getpid()) + 1), host)  # reused
    gone = RunProcess(host, 2 ** 22 + 7, 5)  # above pid_max: no such process
    assert is_lost(gone, host)
    assert not is_lost(gone, host + "-other")  # not ours to judge
    assert parse_process_tag(["process:h:12:x", "process:", "privpipe"]) is None


def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _run_named(name: str):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with _client() as client:
        [run] = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            name=FlowRunFilterName(any_=[name])))
    return run


@pytest.mark.slow
def test_a_sigkilled_release_is_marked_crashed_and_the_rerun_charges_once(
        tmp_path, curves_csv, policy_file, ledger_path, prefect_api):
    from ledger import Ledger

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(HOME=str(tmp_path), PREFECT_API_URL=prefect_api,
               PRIVPIPE_HOME=str(tmp_path / "home"))
    args = [str(PRIVPIPE), "release", "curves", str(curves_csv), "--domain", "tracks",
            "--epsilon", "1/16", "--policy", str(policy_file), "--out", str(tmp_path / "out"),
            "--release-id", "lost-1", "--ledger", str(ledger_path)]
    killed = subprocess.run(args, env={**env, "PRIVPIPE_FAULT_AT": "after_reserve",
                                       "PRIVPIPE_FAULT_MODE": "kill"},
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run = _run_named("lost-1")
    assert run.state.type.value == "RUNNING"  # what Prefect shows without the reaper
    with _client() as client:
        # other tests' killed runs may share this harness: look for ours only
        assert "lost-1" in reap_lost_runs(client)
        assert "lost-1" not in reap_lost_runs(client)  # once
    run = _run_named("lost-1")
    assert run.state.type.value == "CRASHED"
    proc = parse_process_tag(list(run.tags))
    assert proc is not None and f"privpipe process {proc.pid} on " in run.state.message
    assert "run the same command again" in run.state.message
    again = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr
    curves_of = {f"user-{u}": 1 + u % 2 for u in range(6)}  # the fixture: users 1, 3, 5 two
    spent = {b["user_id"]: b["spent"] for b in Ledger(ledger_path).balances("tracks")}
    assert spent == {u: n * Fraction(1, 16) for u, n in curves_of.items()}


def test_a_live_process_run_is_not_reaped(prefect_api):
    from prefect.states import Running

    from flows.audit_flow import audit

    with _client() as client:
        run = client.create_flow_run(audit, name="live-run", tags=["privpipe", process_tag()],
                                     state=Running())
        assert "live-run" not in reap_lost_runs(client)
        assert client.read_flow_run(run.id).state.type.value == "RUNNING"
