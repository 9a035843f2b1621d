"""What a small release costs beside its data: Prefect's flow-run heartbeats on and off.

Most releases of the test suite, and many ad-hoc ones, are small: six users of
curves, four of streams (the reliability harness's template ledger and inputs,
`tests/reliability/harness.py`). Their time is fixed costs, not data. This
script starts one Prefect test harness (a temporary server, as the tests do)
and runs such releases in-process, alternating, round by round, Prefect's
default flow-run heartbeats and none (`flows.prefect_server._heartbeats_off`:
what the CLI does with its temporary server; `tests/conftest.py`: what the
tests do). Prefect's sync engine joins the heartbeat thread, which sleeps in
1 s steps, when a run ends. Prints, per mode and round, the mean wall time of a
release and the CPU time of this process and of its children (the server).
Linux only (children's CPU from /proc).

    PYTHONPATH=. .venv/bin/python benchmarks/flows/small_release.py [--rounds 2] [--releases 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

_home = tempfile.mkdtemp(prefix="privpipe-small-release-")
os.environ.update(PREFECT_HOME=_home, PREFECT_SERVER_ANALYTICS_ENABLED="false",
                  PREFECT_LOGGING_LEVEL="WARNING", PREFECT_RESULTS_PERSIST_BY_DEFAULT="false",
                  MPLBACKEND="Agg", OPENBLAS_NUM_THREADS="1")

import harness  # noqa: E402  (tests/reliability: the template ledger and inputs)

_TICK = os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    """User + system CPU seconds of this process's live descendants (from /proc)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(p.name)] = int(fields[1])
        cpu[int(p.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    mine, grew = {os.getpid()}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in mine} - mine
        mine |= more
        grew = bool(more)
    return sum(cpu[pid] for pid in mine - {os.getpid()})


def _own_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _release(setup: harness.Setup, kind: str, rid: str, work: Path) -> None:
    from flows.release import release_curves, release_streams

    ledger = harness.clone_ledger(setup.template, work / f"{rid}-home")
    common = {"release_id": rid, "out_dir": str(work / f"{rid}-out"), "ledger_path": str(ledger),
              "policy_path": str(setup.policy), "chunk_users": 2}
    if kind == "curves":
        release_curves(input_path=str(setup.inputs["curves"]), domain="tracks", epsilon="1/2",
                       **common)
    else:
        release_streams(input_path=str(setup.inputs["streams"]), domain="meters", epsilon="2",
                        **common)


def _measure(setup: harness.Setup, mode: str, n: int, work: Path, tag: str
             ) -> tuple[float, float, float]:
    """Mean wall, own CPU and children's CPU of `n` curve and `n` stream releases, s."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    updates = {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None} if mode == "off" else {}
    walls, own, kids = [], [], []
    with temporary_settings(updates=updates):
        for i in range(n):
            for kind in ("curves", "streams"):
                c0, k0, t0 = _own_cpu(), _children_cpu(), time.perf_counter()
                _release(setup, kind, f"{tag}-{mode}-{kind}-{i}", work)
                walls.append(time.perf_counter() - t0)
                own.append(_own_cpu() - c0)
                kids.append(_children_cpu() - k0)
    return statistics.mean(walls), statistics.mean(own), statistics.mean(kids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--releases", type=int, default=5, help="of each kind, per mode and round")
    args = ap.parse_args()
    from prefect.testing.utilities import prefect_test_harness

    work = Path(tempfile.mkdtemp(prefix="privpipe-small-release-work-"))
    setup = harness.make_setup(work / "setup")
    rows = []
    with prefect_test_harness(server_startup_timeout=180):
        _release(setup, "curves", "warm-up", work)  # imports and the server's first answers
        for r in range(1, args.rounds + 1):
            for mode in ("on", "off") if r % 2 else ("off", "on"):
                rows.append((mode, r, *_measure(setup, mode, args.releases, work, f"r{r}")))
    print(f"{args.releases} curve and {args.releases} stream releases of 6 and 4 users per "
          "row, in-process, one Prefect test harness; means per release.\n")
    print("| heartbeats | round | wall s | this process CPU s | server CPU s |")
    print("|---|---|---|---|---|")
    for mode, r, wall, own, kids in rows:
        print(f"| {mode} | {r} | {wall:.2f} | {own:.2f} | {kids:.2f} |")


if __name__ == "__main__":
    main()
