"""Benchmark: `release_curves` end to end against a plain loop over the mechanism.

For each user count (default 10,000 and 40,000 users x 500-point 2-D curves)
it writes a CSV, then runs, each in a fresh child process so that peak RSS is
measured per run:
  * `flow`:  init ledger + apply policy + the `release_curves` Prefect flow
             (ingest, reserve, PrivFuncSeg over chunks, settle, outputs, report);
  * `loop`:  read the same CSV with pandas and call `privfuncseg` per curve in a
             plain loop (no validation, no ledger, no outputs);
  * `empty`: one empty Prefect flow run (Prefect's fixed start-up cost), run
             right before each `flow` so that both see the same machine load.
Prints a table with wall times, peak RSS and the flow/loop ratio, then the same
ratios in CPU seconds of each process (user + system, all its threads): on a
shared machine wall times follow the other load, CPU time much less so. The
flow's mechanism threads can use a second core where the loop uses one, so the
CPU ratio is the stricter of the two.

    .venv/bin/python benchmarks/flows/bench_flows.py [--users 10000 40000] [--points 500]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
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
sys.path.insert(0, {root!r})
mode, csv, work = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if mode == "flow":
    from flows.settings import configure_prefect
    from pathlib import Path
    configure_prefect(Path(work))
    from ledger import Ledger
    from schemas.policy import load_policy
    from flows.release import release_curves
    Ledger.init(work + "/ledger.duckdb").apply_policy(load_policy(work + "/policy.toml"))
    res = release_curves(input_path=csv, domain="bench", epsilon="1", out_dir=work + "/out",
                         ledger_path=work + "/ledger.duckdb", policy_path=work + "/policy.toml",
                         chunk_users=250)
    extra = res["manifest"]["counts"]["users_released"]
elif mode == "loop":
    import numpy as np, pandas as pd
    from mechanisms.curves import privfuncseg
    extra = 0
    for chunk in pd.read_csv(csv, chunksize=1_000_000):
        for _, g in chunk.groupby(["user_id", "curve_id"], sort=False):
            rng = np.random.default_rng(extra)
            privfuncseg(g["t"].to_numpy(), g[["x", "y"]].to_numpy(), epsilon=1.0, rng=rng)
            extra += 1
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
ru = resource.getrusage(resource.RUSAGE_SELF)
rss = ru.ru_maxrss / 1024
print(json.dumps({{"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": rss,
                  "extra": extra}}))
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


def child(mode: str, csv: Path, work: Path) -> dict:
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), mode, str(csv),
                           str(work)], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[10_000, 40_000])
    ap.add_argument("--points", type=int, default=500)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="privpipe-bench-") as tmp:
        base = Path(tmp)
        for users in args.users:
            work = base / f"u{users}"
            work.mkdir()
            (work / "policy.toml").write_text(POLICY)
            csv = work / "in.csv"
            t0 = time.perf_counter()
            write_csv(csv, users, args.points)
            gen = time.perf_counter() - t0
            empty_dir = work / "empty"
            empty_dir.mkdir()
            empty = child("empty", base / "none.csv", empty_dir)
            flow = child("flow", csv, work)
            loop = child("loop", csv, work)
            rows.append((users, users * args.points, gen, empty, flow, loop))
    print("Prefect fixed start-up: one empty flow run in a fresh process, right before each "
          "flow run.\n")
    print("| users | points | start-up wall (s) | flow wall (s) | flow peak RSS (MB) | "
          "loop wall (s) | loop peak RSS (MB) | flow/loop | (flow - start-up)/loop |")
    print("|---|---|---|---|---|---|---|---|---|")
    for users, pts, _gen, empty, flow, loop in rows:
        print(f"| {users:,} | {pts:,} | {empty['wall']:.1f} | {flow['wall']:.1f} | "
              f"{flow['rss_mb']:.0f} | {loop['wall']:.1f} | {loop['rss_mb']:.0f} | "
              f"{flow['wall'] / loop['wall']:.2f} | "
              f"{(flow['wall'] - empty['wall']) / loop['wall']:.2f} |")
    print("\nThe same in CPU seconds (user + system) of each process:\n")
    print("| users | start-up CPU (s) | flow CPU (s) | loop CPU (s) | flow/loop | "
          "(flow - start-up)/loop |")
    print("|---|---|---|---|---|---|")
    for users, _pts, _gen, empty, flow, loop in rows:
        print(f"| {users:,} | {empty['cpu']:.1f} | {flow['cpu']:.1f} | {loop['cpu']:.1f} | "
              f"{flow['cpu'] / loop['cpu']:.2f} | "
              f"{(flow['cpu'] - empty['cpu']) / loop['cpu']:.2f} |")


if __name__ == "__main__":
    main()
