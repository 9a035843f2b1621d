"""Acceptance of issue #28: one ledger for many hosts, end to end through the CLI.

One ledger (a curves and a streams domain, the policy applied by the admin
through the service) is copied, before any release, to an embedded twin (the
same keys). `privpipe ledger serve` serves the original on 127.0.0.1 with test
certificates; two client processes with their own working directory,
PRIVPIPE_HOME and output root release through it:

- process A: a curve release, during which the server is SIGKILLed after the
  release's reserve and before its settle (seen in the served ledger through an
  auditor's client) and restarted; the client retries and finishes; then day 1
  of a stream release;
- process B: a rerun of the curve release (nothing charged again, the same
  bytes); day 2 of the stream (the growing file, days 1-2) into another output
  root while A's output root is gone, so day 2 can only continue day 1 from the
  ledger's published store. Before it, day 2 under another releaser's
  credential is refused before its reserve (the service gives day 1's noise
  seeds only to day 1's releaser), reserving nothing.

The same three releases (same ids) then run on the twin into one output root.
Asserted: `privpipe ledger verify` through the service is ok; every user's
charges are those of the twin, each (release, user) reserved and settled
exactly once; every published Parquet file is byte-identical to the twin's; and
day 2's samples repeat day 1's published bytes for day 1's steps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from ledger_helpers import PYTHON, REPO
from served_helpers import Served, start_server

from ledger import Filter, Ledger
from ledger.published import store_dir
from ledger.remote import RemoteLedger

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

[domains.meters]
kind = "streams"
public = { rejections = true }
notion = "wevent"
cap = "2"
w = 4
time_unit = "step"
value_range = [0.0, 10.0]
value_unit = "kW"
"""

DAY = 48
"""Steps of one day of the stream (half-hours)."""

RELEASES = ("r1", "day1", "day2")


def _inputs(d: Path) -> SimpleNamespace:
    """The policy file, a curves CSV of four users, and day 1 / days 1-2 of four meters."""
    d.mkdir(parents=True)
    (d / "policy.toml").write_text(textwrap.dedent(POLICY))
    rng = np.random.default_rng(7)
    curves, meters = [], []
    for u in range(4):
        t = np.cumsum(rng.uniform(0.5, 1.5, 100 + 16 * u))
        t -= t[0]
        curves.append(pd.DataFrame({"user_id": f"user-{u}", "curve_id": "c0", "t": t,
                                    "x": 50 * np.sin(t / 40 + u) + 3 * t,
                                    "y": 30 * np.cos(t / 25)}))
        steps = np.arange(2 * DAY)
        v = 5 + 4 * np.sin(2 * np.pi * steps / 12 + u) + rng.normal(0, 0.2, steps.size)
        meters.append(pd.DataFrame({"user_id": f"meter-{u}", "stream_id": "s0", "t": steps,
                                    "value": np.clip(v, 0, 10)}))
    pd.concat(curves).to_csv(d / "curves.csv", index=False)
    df = pd.concat(meters)
    df[df["t"] < DAY].to_csv(d / "day1.csv", index=False)
    df.to_csv(d / "days12.csv", index=False)  # the growing file: day 2 repeats day 1
    return SimpleNamespace(policy=d / "policy.toml", curves=d / "curves.csv",
                           day1=d / "day1.csv", days12=d / "days12.csv")


#: the Prefect API every client reports to (hosts of one organisation share one Prefect
#: server); set by the module fixture from the session's harness
PREFECT = {}


def _env(root: Path, home: str, served: Served | None, who: str = "rel-a", **extra) -> dict:
    """A client's environment: its own PRIVPIPE_HOME; `who`'s credential for `served`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(root / home), HOME=str(root / home), PYTHONPATH=str(REPO),
               **PREFECT, **extra)
    if served is not None:
        env |= {k: v for k, v in served.env(who).items() if k.startswith("PRIVPIPE_")}
    return env


def _cli(args: list, env: dict, cwd: Path, **popen) -> subprocess.Popen:
    """`privpipe ARGS` as a subprocess in `cwd`."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([PYTHON, "-m", "flows.cli", *map(str, args)], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def _finish(proc: subprocess.Popen) -> str:
    """Wait for `proc`; its stdout + stderr; fail with them unless it exited 0."""
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, (proc.args, out[-2000:], err[-3000:])
    return out + err


def _curves(inp, out: Path, ledger: str) -> list:
    return ["release", "curves", inp.curves, "--domain", "tracks", "--epsilon", "1/16",
            "--policy", inp.policy, "--out", out, "--release-id", "r1",
            "--chunk-users", "2", "--ledger", ledger]


def _streams(inp, csv: Path, rid: str, out: Path, ledger: str) -> list:
    return ["release", "streams", csv, "--domain", "meters", "--epsilon", "1",
            "--policy", inp.policy, "--out", out, "--release-id", rid,
            "--chunk-users", "2", "--ledger", ledger]


def _served_ledger(root: Path, inp) -> tuple[Served, Path]:
    """A new ledger served, its policy applied by the admin through the service, and
    its twin: a copy of its directory (file and keys) made before any release."""
    led = root / "led" / "ledger.duckdb"
    Ledger.init(led, actor="pytest")
    served = start_server(led, root)
    _finish(_cli(["ledger", "policy", "apply", inp.policy, "--ledger", served.url,
                  "--reason", "issue 28 acceptance"], _env(root, "home-adm", served, "adm"),
                 root / "adm"))
    served.stop()  # the file is the service's while it runs: copy it stopped
    shutil.copytree(led.parent, root / "twin")
    served.restart()
    return served, root / "twin" / "ledger.duckdb"


def _curve_release_killed_mid_release(root: Path, inp, served: Served) -> str:
    """Process A's curve release; the server SIGKILLed between its reserve and settle."""
    paused, resume = root / "paused", root / "resume"
    env = _env(root, "home-a", served, PRIVPIPE_FAULT_AT="after_reserve",
               PRIVPIPE_FAULT_MODE="pause", PRIVPIPE_FAULT_PAUSED=str(paused),
               PRIVPIPE_FAULT_RESUME=str(resume))
    proc = _cli(_curves(inp, root / "outA", served.url), env, root / "dirA")
    deadline = time.monotonic() + 600
    while not paused.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    aud = RemoteLedger(served.url, token=served.tokens["aud"], ca=str(served.ca))
    kinds = Counter(r["kind"] for r in aud.history(where=Filter(release="r1")))
    served.stop(signal.SIGKILL)  # the service dies with the reserve committed, no settle
    resume.write_text("")  # the client goes on: its settle retries the connection
    time.sleep(2)
    served.restart()
    _finish(proc)
    return f"reserve={kinds['reserve']} settle={kinds['settle']}"


@pytest.fixture(scope="module")
def run(tmp_path_factory, prefect_api) -> SimpleNamespace:
    """Every release of the scenario, served and embedded; the server still up."""
    PREFECT["PREFECT_API_URL"] = prefect_api
    root = tmp_path_factory.mktemp("accept")
    inp = _inputs(root / "inputs")
    served, twin = _served_ledger(root, inp)
    try:
        killed_at = _curve_release_killed_mid_release(root, inp, served)
        _finish(_cli(_streams(inp, inp.day1, "day1", root / "outA", served.url),
                     _env(root, "home-a", served), root / "dirA"))
        _finish(_cli(_curves(inp, root / "vol2" / "outB", served.url),
                     _env(root, "home-b", served), root / "dirB"))
        (root / "outA").rename(root / "outA-hidden")  # host A's outputs: not for B
        other = _cli(_streams(inp, inp.days12, "day2-b", root / "vol2" / "outB", served.url),
                     _env(root, "home-b", served, "rel-b"), root / "dirB")
        other_out = other.communicate(timeout=900)
        _finish(_cli(_streams(inp, inp.days12, "day2", root / "vol2" / "outB", served.url),
                     _env(root, "home-b", served), root / "dirB"))
        (root / "outA-hidden").rename(root / "outA")
        for args in (_curves(inp, root / "outE", str(twin)),
                     _streams(inp, inp.day1, "day1", root / "outE", str(twin)),
                     _streams(inp, inp.days12, "day2", root / "outE", str(twin))):
            _finish(_cli(args, _env(root, "home-e", None), root / "dirE"))
    except BaseException:
        served.stop()
        raise
    yield SimpleNamespace(root=root, served=served, twin=twin, killed_at=killed_at,
                          other=(other.returncode, "".join(other_out)),
                          out={"r1": root / "outA", "day1": root / "outA",
                               "day2": root / "vol2" / "outB"})
    served.stop()


def _aud(run) -> RemoteLedger:
    return RemoteLedger(run.served.url, token=run.served.tokens["aud"], ca=str(run.served.ca))


def test_the_server_was_killed_between_reserve_and_settle(run):
    assert run.killed_at == "reserve=4 settle=0"


def test_verify_through_the_service_is_ok(run):
    r = subprocess.run([PYTHON, "-m", "flows.cli", "ledger", "verify", "--ledger",
                        run.served.url], env=_env(run.root, "home-v", run.served, "aud"),
                       cwd=run.root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok:" in r.stdout + r.stderr, (r.stdout, r.stderr)


def _charges(rows: list[dict]) -> list[tuple]:
    return sorted((r["release_id"], r["user_id"], r["domain"], r.get("stream_id") or "",
                   r["kind"], r["amount"]) for r in rows)


def _balances(led, domain: str) -> list[tuple]:
    return sorted((b["user_id"], b.get("stream_id") or "", b["spent"], b["remaining"])
                  for b in led.balances(domain))


def test_every_charge_exactly_once_as_on_the_embedded_twin(run):
    aud, twin = _aud(run), Ledger(run.twin)
    for domain, users in (("tracks", 4), ("meters", 4)):
        got = _balances(aud, domain)
        assert got == _balances(twin, domain) and len(got) == users
        assert all(b[2] > 0 for b in got), got  # everybody was charged
    for rid in RELEASES:
        rows = aud.history(where=Filter(release=rid))
        assert _charges(rows) == _charges(twin.history(where=Filter(release=rid))), rid
        per = Counter((r["user_id"], r["kind"]) for r in rows)
        users = {u for u, _ in per}
        assert len(users) == 4, rid
        assert all(per[(u, k)] == 1 for u in users for k in ("reserve", "settle")), (rid, per)
    actors = {r["actor"] for rid in RELEASES for r in aud.history(where=Filter(release=rid))}
    assert actors == {"rel-a"}


def test_a_rerun_from_another_host_reproduces_the_curves(run):
    """Process B reruns the curve release: nothing charged again (above), the same bytes."""
    ref = run.root / "outE" / "r1"
    names = sorted(p.name for p in ref.glob("*.parquet"))
    assert len(names) >= 2
    for name in names:
        assert (run.root / "vol2" / "outB" / "r1" / name).read_bytes() == (
            ref / name).read_bytes(), name


def test_outputs_byte_identical_to_the_embedded_twin(run):
    for rid in RELEASES:
        ref = run.root / "outE" / rid
        names = sorted(p.name for p in ref.glob("*.parquet"))
        assert len(names) >= 2, (rid, names)
        assert names == sorted(p.name for p in (run.out[rid] / rid).glob("*.parquet")), rid
        for name in names:
            assert (run.out[rid] / rid / name).read_bytes() == (ref / name).read_bytes(), (
                rid, name)


def test_day_two_continued_day_one_from_the_ledgers_store(run):
    out_b = run.out["day2"]
    assert not (out_b / "day1").exists()  # day 1 was never under B's output root
    manifest = json.loads((out_b / "day2" / "manifest.json").read_text())
    assert manifest["history"]["releases"] == ["day1"] and manifest["history"]["skipped"] == []
    key = ["user_id", "stream_id", "step"]
    one = pq.read_table(run.out["day1"] / "day1" / "samples.parquet").to_pandas()
    two = pq.read_table(out_b / "day2" / "samples.parquet").to_pandas()
    assert one["step"].max() == DAY - 1 and two["step"].max() == 2 * DAY - 1
    repeated = two[two["step"] < DAY].sort_values(key).reset_index(drop=True)
    one = one.sort_values(key).reset_index(drop=True)
    assert list(repeated.columns) == list(one.columns) and len(one) == 4 * DAY
    pd.testing.assert_frame_equal(repeated, one, check_exact=True)
    assert repeated["y"].to_numpy().tobytes() == one["y"].to_numpy().tobytes()
    kept = [p.read_bytes() for p in store_dir(run.served.ledger).iterdir()]
    assert (run.out["day1"] / "day1" / "samples.parquet").read_bytes() in kept


def test_another_releaser_cannot_continue_and_reserves_nothing(run):
    """Day 2 by another releaser's credential (rel-b) would need day 1's noise seeds, which
    the service gives only to day 1's releaser: refused before its reserve, exit 2."""
    code, output = run.other
    assert code == 2 and "'day1' of client 'rel-a'" in output, output[-3000:]
    assert _aud(run).history(where=Filter(release="day2-b")) == []
