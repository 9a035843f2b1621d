"""Benchmark: `release_curves` end to end against a plain loop over the mechanism.

For each user count (default 10,000 and 40,000 users x 500-point 2-D curves)
it writes a CSV, then runs, each in a fresh child process so that peak RSS is
measured per run:
  * `flow`:  init ledger + apply policy + the `release_curves` Prefect flow
             (ingest, reserve, PrivFuncSeg over chunks, settle, outputs, report)
             with the default task runner;
  * `loop`:  read the same CSV with pandas and run the same mechanism in a plain
             loop, chunk by chunk as the flow chunks (`tasks.stage.DEFAULT_CHUNK_USERS`
             users; an older tree: whole users up to `CHUNK_POINTS` samples; a tree
             without either: 250 users) with
             the release's generator per user (`privfuncseg_batch` per chunk; a tree
             without it: `privfuncseg` per curve), no validation, no ledger, no
             outputs; it also times its CSV read and grouping apart ("loop read");
  * `empty`: one empty Prefect flow run (Prefect's fixed start-up cost), run
             right before each `flow` so that both see the same machine load.
With ``--before DIR`` (a checkout of older code, e.g. ``git worktree add
/tmp/before main``) every run is made for both trees, alternating, and the
tables have a row per tree. CPU seconds are user + system of the process, its
threads and its finished child processes (worker processes of a process or Dask
runner): on a shared machine wall times follow the other load, CPU time much
less so. The flow may use a second core where the loop uses one, so the CPU
ratio is the stricter of the two.

    .venv/bin/python benchmarks/flows/bench_flows.py [--users 10000 40000] [--points 500]
        [--before DIR] [--runner threads|processes|dask]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

POLICY = textwrap.dedent("""
    [domains.bench]
    kind = "curves"
    public = { duration = true, points = true }
    notion = "gp"
    cap = "1000"
    time_unit = "s"
    value_columns = ["x", "y"]
    value_unit = "m"
""")

CHILD = r'''
import json, os, resource, sys, time
root, runner = {root!r}, {runner!r}
sys.path.insert(0, root)
mode, csv, work = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
mech = None
if mode == "flow":
    from flows.settings import configure_prefect
    from pathlib import Path
    configure_prefect(Path(work))
    from ledger import Ledger
    from schemas.policy import load_policy
    from flows.release import release_curves
    from flows.runners import make_task_runner
    Ledger.init(work + "/ledger.duckdb").apply_policy(load_policy(work + "/policy.toml"))
    flow = release_curves if runner == "default" else release_curves.with_options(
        task_runner=make_task_runner(runner))
    res = flow(input_path=csv, domain="bench", epsilon="1", out_dir=work + "/out",
               ledger_path=work + "/ledger.duckdb", policy_path=work + "/policy.toml")
    extra = res["manifest"]["counts"]["users_released"]
elif mode == "loop":
    import numpy as np, pandas as pd
    import mechanisms.curves as mc
    try:  # the release's own generator (keyed ChaCha20), where the tree has one
        from tasks.keyed_rng import release_generator as generator
    except ImportError:
        generator = np.random.default_rng
    try:  # the flow's own chunking (a fixed count of users), where it has one
        from tasks.stage import DEFAULT_CHUNK_USERS as MAX_CHUNK_USERS
        CHUNK_POINTS = float("inf")
    except ImportError:
        try:  # an older tree: whole users up to CHUNK_POINTS samples
            from tasks.stage import CHUNK_POINTS, MAX_CHUNK_USERS
        except ImportError:
            CHUNK_POINTS, MAX_CHUNK_USERS = float("inf"), 250
    extra = 0
    pending = []
    points = 0
    mech = 0.0  # CPU seconds in the mechanism (the rest of the loop reads and groups the CSV)

    def run(chunk):
        global mech
        c0 = time.process_time()
        _run(chunk)
        mech += time.process_time() - c0

    def _run(chunk):
        if hasattr(mc, "privfuncseg_batch"):
            batch = mc.CurveBatch.from_curves([(t, v) for t, v, _ in chunk])
            mc.privfuncseg_batch(batch, rngs=[generator(s) for _, _, s in chunk], epsilon=1.0)
        else:
            for t, v, s in chunk:
                mc.privfuncseg(t, v, epsilon=1.0, rng=generator(s))

    for frame in pd.read_csv(csv, chunksize=1_000_000):
        for _, g in frame.groupby(["user_id", "curve_id"], sort=False):
            pending.append((g["t"].to_numpy(), g[["x", "y"]].to_numpy(), extra))
            extra += 1
            points += len(g)
            if points >= CHUNK_POINTS or len(pending) >= MAX_CHUNK_USERS:
                run(pending)
                pending, points = [], 0
    if pending:
        run(pending)
else:
    from flows.settings import configure_prefect
    from pathlib import Path
    configure_prefect(Path(work))
    from prefect import flow
    @flow
    def empty():
        return 1
    extra = empty()
wall = time.perf_counter() - t0
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
rss = max(me.ru_maxrss, kids.ru_maxrss) / 1024
print(json.dumps({{"wall": wall, "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "rss_mb": rss, "extra": extra, "mech": mech}}))
'''


def write_csv(path: Path, users: int, points: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        fh.write("user_id,curve_id,t,x,y\n")
        for u in range(users):
            t = np.arange(points, dtype=float) * 10.0
            x = np.cumsum(rng.normal(0, 5, points)) + 100 * np.sin(t / 900)
            y = np.cumsum(rng.normal(0, 5, points))
            fh.write("".join(f"u{u:06d},c0,{a:.1f},{b:.3f},{c:.3f}\n"
                             for a, b, c in zip(t, x, y, strict=True)))


def child(mode: str, csv: Path, work: Path, root: Path, runner: str) -> dict:
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(root), runner=runner),
                           mode, str(csv), str(work)], capture_output=True, text=True, env=env,
                          check=False, cwd=root)  # cwd: `python -c` puts it first on sys.path
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed ({root}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[10_000, 40_000])
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--before", type=Path, help="checkout of the code to compare with")
    ap.add_argument("--runner", default="default",
                    help="task runner of the flow (default: the flow's own default)")
    args = ap.parse_args()
    trees = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="privpipe-bench-") as tmp:
        base = Path(tmp)
        for users in args.users:
            csv = base / f"in-{users}.csv"
            write_csv(csv, users, args.points)
            for name, root in trees:
                work = base / f"u{users}-{name}"
                work.mkdir()
                (work / "policy.toml").write_text(POLICY)
                empty_dir = work / "empty"
                empty_dir.mkdir()
                empty = child("empty", base / "none.csv", empty_dir, root, args.runner)
                flow = child("flow", csv, work, root, args.runner)
                loop = child("loop", csv, work, root, args.runner)
                if flow["extra"] != users:
                    raise SystemExit(f"the flow released {flow['extra']} of {users} users")
                rows.append((users, users * args.points, name, empty, flow, loop))
                print(rows[-1], flush=True)
    print(f"Task runner: {args.runner}. Prefect fixed start-up: one empty flow run in a fresh "
          "process, right before each flow run.\n")
    print("| users | points | code | start-up wall (s) | flow wall (s) | flow peak RSS (MB) | "
          "loop wall (s) | loop peak RSS (MB) | flow/loop | (flow - start-up)/loop |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for users, pts, name, empty, flow, loop in rows:
        print(f"| {users:,} | {pts:,} | {name} | {empty['wall']:.1f} | {flow['wall']:.1f} | "
              f"{flow['rss_mb']:.0f} | {loop['wall']:.1f} | {loop['rss_mb']:.0f} | "
              f"{flow['wall'] / loop['wall']:.2f} | "
              f"{(flow['wall'] - empty['wall']) / loop['wall']:.2f} |")
    print("\nThe same in CPU seconds (user + system, threads and finished children):\n")
    print("| users | code | start-up CPU (s) | flow CPU (s) | loop CPU (s) | "
          "of which mechanism (s) | flow/loop | (flow - start-up)/loop | "
          "(flow - start-up)/loop mechanism |")
    print("|---|---|---|---|---|---|---|---|---|")
    for users, _pts, name, empty, flow, loop in rows:
        net = flow["cpu"] - empty["cpu"]
        print(f"| {users:,} | {name} | {empty['cpu']:.1f} | {flow['cpu']:.1f} | "
              f"{loop['cpu']:.1f} | {loop['mech']:.1f} | {flow['cpu'] / loop['cpu']:.2f} | "
              f"{net / loop['cpu']:.2f} | {net / loop['mech']:.2f} |")


if __name__ == "__main__":
    main()
