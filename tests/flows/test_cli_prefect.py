"""The CLI against a real `prefect server start` on 127.0.0.1 (started and stopped here).

Replays, as a data engineer who knows Prefect would: a configured server
(PREFECT_API_URL, or only the active profile) receives the runs; each run is
named after its release id, tagged, carries its artifacts (key = release id,
images embedded); a release where nobody fits the budget exits 3 and its run
ends Failed/"Denied" with the counts; a partial denial exits 0 and prints them.
With nothing configured, the CLI's own temporary server keeps its database in
PRIVPIPE_HOME/prefect and is gone when the command ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

PRIVPIPE = Path(sys.executable).with_name("privpipe")
PREFECT = Path(sys.executable).with_name("prefect")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(home: Path, user_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(home), HOME=str(user_home),
               PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A loopback `prefect server start` with its own home; stopped after the module."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = _clean_env(home / "privpipe", home)
    env["PREFECT_HOME"] = str(home / "prefect")
    with open(home / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 240
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((home / "server.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _post(url: str, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _flow_run(url: str, name: str) -> dict:
    runs = _post(url, "/flow_runs/filter", {"flow_runs": {"name": {"any_": [name]}}})
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture()
def home(tmp_path, policy_file) -> Path:
    from ledger import Ledger
    from schemas.policy import load_policy

    h = tmp_path / "home"
    Ledger.init(h / "ledger.duckdb").apply_policy(load_policy(policy_file))
    return h


def _release(env: dict[str, str], csv: Path, policy: Path, out: Path, *extra: str,
             cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PRIVPIPE), "release", "curves", str(csv), "--domain", "tracks", "--policy",
         str(policy), "--out", str(out), "--format", "json", *extra],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def test_release_shows_up_on_the_configured_server(server, tmp_path, home, curves_csv,
                                                   policy_file):
    env = _clean_env(home, tmp_path)
    env["PREFECT_API_URL"] = server
    res = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1/2",
                   "--release-id", "rc-tracks_first", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)[0]  # stdout is JSON and nothing else
    assert row["release_id"] == "rc-tracks_first" and row["released"] == 6
    run = _flow_run(server, "rc-tracks_first")
    assert run["state_type"] == "COMPLETED"
    assert {"domain:tracks", "mechanism:privfuncseg", "notion:gp"} <= set(run["tags"])
    arts = _post(server, "/artifacts/filter",
                 {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
    keys = {a["key"] for a in arts}
    assert "rc-tracks-first" in keys and "rc-tracks-first-summary" in keys, keys
    md = next(a for a in arts if a["key"] == "rc-tracks-first")
    assert "rc-tracks_first" in md["description"]
    assert "](data:image/png;base64," in md["data"] and "file://" not in md["data"]
    assert not (home / "prefect").exists(), "a configured server must not get a local home"
    # A configured server keeps Prefect's flow-run heartbeats (its zombie-run automations
    # need them); only a temporary server goes without (next test).
    assert _events_of(server, run["id"], "prefect.flow-run.heartbeat")


def _events_of(url: str, run_id: str, name: str) -> list[dict]:
    """The server's events `name` about flow run `run_id` (persisted a little later: polled)."""
    body = {"filter": {"event": {"name": [name]},
                       "resource": {"id": [f"prefect.flow-run.{run_id}"]}}, "limit": 10}
    deadline = time.monotonic() + 30
    while True:
        req = urllib.request.Request(f"{url}/events/filter", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            events = json.loads(r.read())["events"]
        if events or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def test_derived_release_id_renames_the_run(server, tmp_path, home, curves_csv, policy_file):
    env = _clean_env(home, tmp_path)
    env["PREFECT_API_URL"] = server
    res = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1/4",
                   cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rid = json.loads(res.stdout)[0]["release_id"]
    assert rid.startswith("rc-tracks-")
    assert _flow_run(server, rid)["state_type"] == "COMPLETED"


def test_denied_and_partial_releases(server, tmp_path, home, curves_csv, policy_file):
    env = _clean_env(home, tmp_path)
    env["PREFECT_API_URL"] = server
    # cap 2; users 1, 3, 5 have two curves: at 1.5 per curve only the others fit.
    first = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1.5",
                     "--release-id", "partial", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "3 of 6 users released; 3 denied (budget)" in first.stderr
    assert json.loads(first.stdout)[0]["denied"] == 3
    assert _flow_run(server, "partial")["state_type"] == "COMPLETED"

    second = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1.5",
                      "--release-id", "nobody", cwd=tmp_path)
    assert second.returncode == 3, second.stderr
    assert json.loads(second.stdout)[0]["released"] == 0
    assert "0 of 6 users released; 6 denied (budget)" in second.stderr
    run = _flow_run(server, "nobody")
    assert run["state_type"] == "FAILED" and run["state_name"] == "Denied"
    assert "0 of 6 users released; 6 denied (budget)" in run["state"]["message"]
    assert (tmp_path / "out" / "nobody" / "report.html").is_file()


def test_active_profile_is_used(server, tmp_path, home, curves_csv, policy_file):
    user_home = tmp_path / "user"
    (user_home / ".prefect").mkdir(parents=True)
    (user_home / ".prefect" / "profiles.toml").write_text(
        f'active = "ops"\n\n[profiles.ops]\nPREFECT_API_URL = "{server}"\n')
    env = _clean_env(home, user_home)  # no PREFECT_API_URL in the environment
    res = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1/8",
                   "--release-id", "via-profile", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert _flow_run(server, "via-profile")["state_type"] == "COMPLETED"
    assert not (home / "prefect").exists()


def test_unreachable_configured_server_is_a_clear_error(tmp_path, home, curves_csv,
                                                        policy_file):
    env = _clean_env(home, tmp_path)
    env["PREFECT_API_URL"] = f"http://127.0.0.1:{_free_port()}/api"
    res = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1/8",
                   cwd=tmp_path)
    assert res.returncode == 2
    assert "does not answer" in res.stderr and env["PREFECT_API_URL"] in res.stderr


def test_nothing_configured_uses_a_temporary_server_in_privpipe_home(tmp_path, home, curves_csv,
                                                                    policy_file):
    env = _clean_env(home, tmp_path)
    res = _release(env, curves_csv, policy_file, tmp_path / "out", "--epsilon", "1/8",
                   "--release-id", "embedded", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (home / "prefect" / "prefect.db").is_file()
    assert "Still processing items" not in res.stderr
    # No flow-run heartbeats to a server that stops with the command (each made the run
    # end up to 1 s later); the run's other events are there.
    with contextlib.closing(sqlite3.connect(home / "prefect" / "prefect.db")) as db:
        events = {name for (name,) in db.execute("SELECT DISTINCT event FROM events")}
    assert "prefect.flow-run.Completed" in events, events
    assert "prefect.flow-run.heartbeat" not in events, events
    # The temporary server is gone with the command.
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit()
            and str(home) in _environ(p)]
    assert left == [], left


def _environ(proc: Path) -> str:
    try:
        return (proc / "environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""
