"""A real `privpipe release curves` through `privpipe ledger serve` (issue #28).

- the release through the service publishes the same Parquet files, byte for
  byte, as the same release on an embedded copy of the same ledger (same keys),
  and the served file verifies afterwards;
- the server is killed with SIGKILL between the release's reserve and its
  settle, restarted, the release finishes (the client retries), and a rerun of
  the same release charges nothing more: every user is charged exactly once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ledger_helpers import PYTHON, REPO
from served_helpers import Served, start_server

from ledger import Filter, Ledger
from ledger.remote import RemoteLedger
from schemas.policy import load_policy

pytestmark = [pytest.mark.slow]

POLICY = """
[domains.tracks]
kind = "curves"
public = { duration = true, points = true, rejections = true }
notion = "gp"
cap = "2"
time_unit = "s"
value_columns = ["x", "y"]
value_unit = "m"
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    """(policy file, curves CSV of six users), shared by the module's releases."""
    d = tmp_path_factory.mktemp("inputs")
    pol = d / "policy.toml"
    pol.write_text(textwrap.dedent(POLICY))
    rng = np.random.default_rng(7)
    rows = []
    for u in range(6):
        t = np.cumsum(rng.uniform(0.5, 1.5, 120 + 16 * u))
        t -= t[0]
        rows.append(pd.DataFrame({"user_id": f"user-{u}", "curve_id": "c0", "t": t,
                                  "x": 50 * np.sin(t / 40 + u) + 3 * t,
                                  "y": 30 * np.cos(t / 25)}))
    csv = d / "curves.csv"
    pd.concat(rows).to_csv(csv, index=False)
    return pol, csv


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, inputs) -> Path:
    """The reference: release ``r1`` on an embedded ledger, run once for the module.

    Returns the directory holding ``pristine/`` (the ledger and keys before the
    release), ``a/ledger.duckdb`` (after it) and ``out-a/`` (its outputs). Each
    test serves its own copy of ``pristine/`` (same keys), so its release must
    reproduce these bytes and charges.
    """
    d = tmp_path_factory.mktemp("embedded")
    Ledger.init(d / "pristine" / "ledger.duckdb").apply_policy(load_policy(inputs[0]))
    shutil.copytree(d / "pristine", d / "a")
    _finish(_release(inputs, d / "out-a", str(d / "a" / "ledger.duckdb"), _env(d, "home-a")))
    assert len(list((d / "out-a").rglob("*.parquet"))) >= 2, "the reference published nothing"
    return d


def _ledgers(tmp_path: Path, embedded: Path) -> tuple[Path, Path]:
    """(the reference's embedded ledger ``a``, a fresh copy ``b`` of it before the release)."""
    shutil.copytree(embedded / "pristine", tmp_path / "b")
    return embedded / "a" / "ledger.duckdb", tmp_path / "b" / "ledger.duckdb"


def _env(tmp_path: Path, home: str, served: Served | None = None, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(tmp_path / home), HOME=str(tmp_path), PYTHONPATH=str(REPO),
               **extra)
    if served is not None:
        env |= {k: v for k, v in served.env("rel-a").items() if k.startswith("PRIVPIPE_")}
    return env


def _release(inputs, out: Path, ledger: str, env: dict, **popen) -> subprocess.Popen:
    pol, csv = inputs
    return subprocess.Popen(
        [PYTHON, "-m", "flows.cli", "release", "curves", str(csv), "--domain", "tracks",
         "--epsilon", "1/16", "--policy", str(pol), "--out", str(out), "--release-id", "r1",
         "--chunk-users", "2", "--ledger", ledger], env=env, cwd=out.parent,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, (out[-2000:], err[-3000:])


def _charges(path: Path) -> dict[str, tuple]:
    led = Ledger(path)
    return {r["user_id"]: (r["spent"], r["remaining"]) for r in led.balances("tracks")}


def test_release_through_the_service_is_byte_identical(tmp_path, inputs, embedded):
    a, b = _ledgers(tmp_path, embedded)
    served = start_server(b, tmp_path)
    try:
        _finish(_release(inputs, tmp_path / "out-b", served.url,
                         _env(tmp_path, "home-b", served)))
    finally:
        served.stop()
    parquet = sorted(p.relative_to(embedded / "out-a")
                     for p in (embedded / "out-a").rglob("*.parquet"))
    assert len(parquet) >= 2
    for rel in parquet:
        assert (embedded / "out-a" / rel).read_bytes() == (tmp_path / "out-b" / rel).read_bytes()
    assert _charges(a) == _charges(b)
    r = subprocess.run([PYTHON, "-m", "flows.cli", "ledger", "verify", "--ledger", str(b)],
                       env=_env(tmp_path, "home-b"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok:" in r.stdout + r.stderr, r.stderr
    actors = {row["actor"] for row in Ledger(b).history(where=Filter(release="r1"))}
    assert actors == {"rel-a"}


def test_server_killed_between_reserve_and_settle(tmp_path, inputs, embedded):
    """SIGKILL of the server mid-release: restart, the release finishes, a rerun charges once."""
    a, b = _ledgers(tmp_path, embedded)
    served = start_server(b, tmp_path)
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    try:
        env = _env(tmp_path, "home-b", served, PRIVPIPE_FAULT_AT="after_reserve",
                   PRIVPIPE_FAULT_MODE="pause", PRIVPIPE_FAULT_PAUSED=str(paused),
                   PRIVPIPE_FAULT_RESUME=str(resume))
        proc = _release(inputs, tmp_path / "out-b", served.url, env)
        deadline = time.monotonic() + 600
        while not paused.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        served.stop(signal.SIGKILL)  # the ledger service dies after the reserve committed
        resume.write_text("")  # the release goes on: its settle retries the connection
        time.sleep(2)
        served.proc = subprocess.Popen(served.args, env=served.env("adm"),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _finish(proc)
        again = _release(inputs, tmp_path / "out-b", served.url,
                         _env(tmp_path, "home-b", served))
        _finish(again)
    finally:
        served.stop()
    assert _charges(a) == _charges(b)  # charged exactly once, as the embedded run
    kinds = [r["kind"] for r in Ledger(b).history(where=Filter(release="r1"))]
    assert kinds.count("reserve") == 6 and kinds.count("settle") == 6
    assert Ledger(b).verify().ok


def test_client_killed_mid_release_then_rerun_from_another_home(tmp_path, inputs, embedded):
    """SIGKILL of the releasing client after its reserve: the served ledger keeps the
    reservation; a rerun (another PRIVPIPE_HOME, as from another worker) finishes the
    release with the embedded run's bytes and charges every user exactly once."""
    a, b = _ledgers(tmp_path, embedded)
    served = start_server(b, tmp_path)
    paused = tmp_path / "paused"
    try:
        env = _env(tmp_path, "home-b", served, PRIVPIPE_FAULT_AT="after_reserve",
                   PRIVPIPE_FAULT_MODE="pause", PRIVPIPE_FAULT_PAUSED=str(paused),
                   PRIVPIPE_FAULT_RESUME=str(tmp_path / "never"))
        proc = _release(inputs, tmp_path / "out-b", served.url, env, start_new_session=True)
        deadline = time.monotonic() + 600
        while not paused.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # the client and its Prefect server die
        proc.communicate(timeout=60)
        held = RemoteLedger(served.url, token=served.tokens["aud"], ca=str(served.ca)).history(
            where=Filter(release="r1"))  # the service owns the file while it runs
        assert [r["kind"] for r in held].count("reserve") == 6  # reserved, never settled
        assert not any(r["kind"] == "settle" for r in held)
        _finish(_release(inputs, tmp_path / "out-b", served.url,
                         _env(tmp_path, "home-c", served)))
    finally:
        served.stop()
    for p in (embedded / "out-a").rglob("*.parquet"):
        rel = p.relative_to(embedded / "out-a")
        assert p.read_bytes() == (tmp_path / "out-b" / rel).read_bytes(), rel
    assert _charges(a) == _charges(b)
    kinds = [r["kind"] for r in Ledger(b).history(where=Filter(release="r1"))]
    assert kinds.count("reserve") == 6 and kinds.count("settle") == 6
    assert Ledger(b).verify().ok
