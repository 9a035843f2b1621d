"""Where a release's CPU goes, per thread and per phase (issue #30).

Runs the scale benchmark's release (`benchmarks.scale`: the same input, policy
and child process) and reads, every half second, the CPU time (user + system)
of each of the release process's threads from /proc, and of its child
processes (Prefect's temporary server). Python threads are named after their
Python names (a start-up hook in the child calls prctl(PR_SET_NAME)), so the
table groups them: the main (flow) thread, the chunk tasks' threads, the
collector, the encoders, the ingest threads, DuckDB's and Arrow's own threads
("native"), the Prefect server ("children"). The phases are cut at the release's
task timestamps. Linux only.

    PYTHONPATH=TREE .venv/bin/python benchmarks/thread_cpu.py --work DIR
        [--users 50000] [--kind streams|curves]

A phase whose CPU is close to its wall time ran on one core; a chunk phase
whose total is well below twice its wall time did not keep both cores busy.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.scale import CHILD, POLICY, write_input  # noqa: E402

NAME_THREADS = '''
import ctypes, threading
_prctl = ctypes.CDLL(None).prctl
_run = threading.Thread._bootstrap_inner
def _named(self):
    _prctl(15, self.name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: /proc/PID/task/TID/comm
    return _run(self)
threading.Thread._bootstrap_inner = _named
'''
"""The child's sitecustomize: each Python thread names its OS thread after itself."""

GROUPS = (("main", "main"), ("chunk tasks", "ThreadPoolExecu"), ("collector", "privpipe-collec"),
          ("encoders", "privpipe-encode"), ("ingest", "privpipe-ingest"),
          ("staging", "privpipe-stage-"), ("native", "native"), ("Prefect server", "children"))


def _cpu_of(stat: str, tick: int, *, with_children: bool = False) -> tuple[int, float]:
    """(parent pid, CPU seconds) from a /proc stat line."""
    f = stat.rsplit(")", 1)[1].split()
    ticks = int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if with_children else 0)
    return int(f[1]), ticks / tick


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _sample(pid: int, tick: int, seen: dict[str, tuple[str, float]]) -> dict[str, float]:
    """Update `seen` (thread or child -> (group, CPU s)); return the CPU per group so far."""
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        name, stat = _read(f"/proc/{pid}/task/{tid}/comm"), _read(f"/proc/{pid}/task/{tid}/stat")
        if name is None or stat is None:
            continue
        name = name.strip().rstrip("0123456789_")
        group = "main" if int(tid) == pid else "native" if name == "python" else name
        seen[tid] = (group, _cpu_of(stat, tick)[1])
    procs = {}
    for d in os.listdir("/proc"):
        stat = _read(f"/proc/{d}/stat") if d.isdigit() else None
        if stat is not None:
            procs[int(d)] = _cpu_of(stat, tick, with_children=True)
    for child, (parent, cpu) in procs.items():
        hops = 0
        while parent in procs and parent != pid and hops < 20:
            parent, hops = procs[parent][0], hops + 1
        if parent == pid and child != pid:
            seen[f"child{child}"] = ("children", cpu)
    per = collections.Counter()
    for group, cpu in seen.values():
        per[group] += cpu
    return dict(per)


def _phases(stages: dict) -> list[tuple[str, float, float]]:
    """(name, start, end) of the release's phases, from its tasks' first and last times."""
    first = {k: v["first"] for k, v in stages.items()}
    last = {k: v["last"] for k, v in stages.items()}
    ingest = "ingest-and-stage"
    mech = "privatize-streams" if "privatize-streams" in stages else "privatize-curves"
    report = "release-report"
    post = "stream-post-processing" if "stream-post-processing" in stages else report
    return [("ingest", first[ingest], last[ingest]),
            ("plan + reserve", last[ingest], first[mech]),
            ("chunks + settle", first[mech], first[post]),
            ("post-processing + report", first[post], last[report])]


def main() -> None:
    """Run the release once and print its CPU per phase and thread group."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--kind", choices=("streams", "curves"), default="streams")
    ap.add_argument("--work", type=Path, required=True, help="directory for the input and run")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / f"in-{args.kind}-{args.users}.parquet"
    if not src.exists():
        write_input(src, args.kind, args.users)
    run = args.work / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    (run / "policy.toml").write_text(POLICY)
    hook = Path(tempfile.mkdtemp())
    (hook / "sitecustomize.py").write_text(NAME_THREADS)
    tree = os.environ.get("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    env = dict(os.environ, PYTHONPATH=f"{tree}:{hook}")
    child = subprocess.Popen([sys.executable, "-c", CHILD, tree.split(":")[0], args.kind,
                              str(src), str(run), "default"], env=env, stdout=subprocess.PIPE,
                             text=True)
    tick, seen, timeline = os.sysconf("SC_CLK_TCK"), {}, []
    while child.poll() is None:
        timeline.append((time.time(), _sample(child.pid, tick, seen)))
        time.sleep(0.5)
    out = child.stdout.read() if child.stdout else ""
    shutil.rmtree(hook, ignore_errors=True)
    if child.returncode:
        raise SystemExit(f"the release failed (exit {child.returncode})")
    lines = [ln[ln.index('{"'):] for ln in out.splitlines() if '{"' in ln]  # after a progress bar
    res = json.loads(lines[-1])

    def at(t: float) -> dict[str, float]:
        return max((s for s in timeline if s[0] <= t), key=lambda s: s[0], default=(0, {}))[1]

    print(f"{args.users:,} {args.kind} users; CPU seconds per phase and thread group")
    print("| phase | wall s | " + " | ".join(n for n, _ in GROUPS) + " | all |")
    print("|---|---|" + "---|" * (len(GROUPS) + 1))
    for name, a, b in _phases(res["stages"]):
        before, after = at(a), at(b)
        d = {g: after.get(g, 0.0) - before.get(g, 0.0) for g in {*before, *after}}
        cells = " | ".join(f"{d.get(key, 0.0):.1f}" for _, key in GROUPS)
        print(f"| {name} | {b - a:.1f} | {cells} | {sum(d.values()):.1f} |")


if __name__ == "__main__":
    main()
