r"""The release's ingest-and-stage task alone, two source trees side by side (issue #30).

    nice .venv/bin/python benchmarks/ingest/bench_stage.py \\
        --tree before=/work/wt-ingestpar-base --tree after=. \\
        --input streams=/work/prof/streams-50000.parquet \\
        --input curves=/tmp/curves-50000.parquet [--repeats 3] [--markdown out.md]

For each input (a kind and a Parquet file from `benchmarks.scale.write_input`,
``scale_curves`` or ``scale_streams`` domain of `benchmarks.scale.POLICY`)
and each repeat, every tree's `tasks.stage.stage_input_fn` runs in a fresh
child process (imports excluded from the timing), the trees one after the
other in each round so that both see the same machine load; the child reports
the task's wall time, its process CPU time (all threads), the CPU time of each
of its threads (sampled from ``/proc/self/task`` every 0.1 s: the busiest
thread's CPU time bounds the wall from below on an idle machine, whatever the
load was during the run), its peak RSS and the staged plan's input
fingerprint, which must be the same for every tree (the staged bytes
themselves are compared by the tests). The table gives, per input and tree,
the best and the median wall, the CPU times of the run with the median wall,
the peak RSS, and the load average at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.report import publish  # noqa: E402

CHILD = r"""
import json, resource, shutil, sys, tempfile, time
from pathlib import Path
root, kind, src = sys.argv[1:4]
sys.path.insert(0, root)
from benchmarks.scale import POLICY
from schemas.policy import load_policy
from tasks.stage import stage_input_fn
import os, threading
TICK = os.sysconf("SC_CLK_TCK")
busy = {}  # thread id -> its CPU seconds, last seen (a thread's entry goes when it ends)
done = threading.Event()
def watch():
    while True:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            busy[tid] = (int(f[11]) + int(f[12])) / TICK
        if done.wait(0.1):
            return
watcher = threading.Thread(target=watch, daemon=True)
work = Path(tempfile.mkdtemp(prefix="privpipe-bench-stage-"))
try:
    (work / "policy.toml").write_text(POLICY)
    domain = load_policy(work / "policy.toml").domains["scale_" + kind]
    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    watcher.start()
    time.sleep(0.3)
    before = dict(busy)  # the import's CPU, not the task's
    c0, t0 = cpu(), time.perf_counter()
    plan = stage_input_fn(src, domain, str(work / "staging"))
    wall, used = time.perf_counter() - t0, cpu() - c0
    done.set()
    watcher.join()
finally:
    shutil.rmtree(work, ignore_errors=True)
per_thread = sorted((v - before.get(k, 0.0) for k, v in busy.items()), reverse=True)
print(json.dumps({"wall": wall, "cpu": used, "busiest": per_thread[0],
                  "threads": [round(v, 2) for v in per_thread[:6]], "users": plan.users,
                  "points": plan.points,
                  "fingerprint": plan.fingerprint,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def run_child(tree: str, kind: str, src: str) -> dict:
    """One staging of `src` by the code of `tree`, in a fresh process."""
    with tempfile.TemporaryDirectory() as cwd:  # no tree's modules from the cwd
        proc = subprocess.run([sys.executable, "-c", CHILD, tree, kind, src], cwd=cwd,
                              capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": tree})
    if proc.returncode != 0:
        raise SystemExit(f"staging with {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(trees: list[tuple[str, str]], inputs: list[tuple[str, str]], repeats: int
            ) -> list[dict]:
    """Every (input, tree) run `repeats` times, the trees alternating within each round."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for kind, src in inputs:
        for _ in range(repeats):
            for name, tree in trees:
                r = run_child(str(Path(tree).resolve()), kind, src)
                runs.setdefault((kind, name), []).append(r)
                print(json.dumps({"input": kind, "tree": name, **r}), flush=True)
        prints = {r["fingerprint"] for name, _ in trees for r in runs[(kind, name)]}
        if len(prints) != 1:
            raise SystemExit(f"{kind}: the trees staged different inputs: {sorted(prints)}")
    rows = []
    for (kind, name), rs in runs.items():
        walls = sorted(r["wall"] for r in rs)
        median = min(rs, key=lambda r: abs(r["wall"] - statistics.median(walls)))
        rows.append({"input": kind, "tree": name, "users": rs[0]["users"],
                     "points": rs[0]["points"], "best": walls[0],
                     "median": statistics.median(walls), "cpu": median["cpu"],
                     "busiest": median["busiest"], "threads": median["threads"],
                     "rss": max(r["rss_mb"] for r in rs), "n": len(rs)})
    return rows


def table(rows: list[dict], trees: list[tuple[str, str]]) -> str:
    """The rows as Markdown, with each tree's median wall against the first tree's."""
    first = {r["input"]: r["median"] for r in rows if r["tree"] == trees[0][0]}
    lines = ["| input | users | points | tree | runs | wall s (best) | wall s (median) "
             "| vs first tree | CPU s (median run) | CPU / wall | busiest thread CPU s "
             "| CPU s of the 4 busiest threads | peak RSS MB |",
             "|" + "---|" * 13]
    for r in rows:
        lines.append(
            f"| {r['input']} | {r['users']:,} | {r['points']:,} | {r['tree']} | {r['n']} "
            f"| {r['best']:.2f} | {r['median']:.2f} | {first[r['input']] / r['median']:.2f}x "
            f"| {r['cpu']:.2f} | {r['cpu'] / r['median']:.2f} | {r['busiest']:.2f} "
            f"| {', '.join(f'{v:.1f}' for v in r['threads'][:4])} | {r['rss']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    """Parse the arguments, measure, print (and optionally write) the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=_pair, action="append", required=True,
                    help="NAME=PATH of a source tree (repeatable; the first is the reference)")
    ap.add_argument("--input", type=_pair, action="append", required=True,
                    help="KIND=PATH: curves or streams, a benchmarks.scale Parquet input")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", type=Path, help="also append the table here")
    args = ap.parse_args()
    load0 = os.getloadavg()
    rows = measure(args.tree, args.input, args.repeats)
    load1 = os.getloadavg()
    text = (table(rows, args.tree) + "\n\n"
            + f"trees: {', '.join(f'{n}={p}' for n, p in args.tree)}; {os.cpu_count()} CPUs; "
            f"load average (1, 5, 15 min) {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at the "
            f"start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end\n")
    publish(text, args.markdown)


if __name__ == "__main__":
    main()
