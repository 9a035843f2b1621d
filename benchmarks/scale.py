"""Scale curve: end-to-end releases at 10^4, 10^5 and 10^6 users, stage by stage.

For each kind and size it writes a seeded Parquet input (curves: one 500-point
2-D random walk per user; streams: one 1,000-step periodic stream per user),
then runs the release in a fresh child process (ledger init + policy, then the
`release_curves` / `release_streams` flow with the default task runner; streams
with ``reconstruct="none"``: CPR is per-stream post-processing, timed apart by
`benchmarks/streams`), and prints per size:

* the start-up (imports, ledger init, Prefect's start: one empty flow run
  first, in the same process), then the release's wall and CPU seconds (user +
  system of the process, its threads and its finished children) and the
  process's peak RSS;
* the stages, from Prefect's own task-run times: ingest (validate + stage),
  ledger (reserve + settle), mechanism (sum over chunk tasks, and the span from
  the first chunk's start to the last one's end: they overlap), report; the
  rest of the wall time is the flow's own work (chunk loading and seeds, Parquet
  appends, manifest) and Prefect's overhead;
* the size of the release's output files;
* the slope of wall and CPU time against users between consecutive sizes
  (log-log: 1.0 is linear) and the marginal cost per user;
* each task's summed run time, which names what the "flow + Prefect" column
  holds (for streams: the continuation plan, post-processing, the population
  view).

    .venv/bin/python benchmarks/scale.py [--users 10000 100000 1000000]
        [--kinds curves streams] [--work DIR] [--runner RUNNER]

The 10^6 curve row needs about 30 GB of free disk in --work (input 8 GB,
staging 12 GB, outputs 8 GB; each run's files are removed after it). Its input
comes in user order, so the reader makes no copy of its rows (an input out of
order would need about 11 GB more in TMPDIR while it is read, `ingest.pipeline`).
It took 6.6 minutes and 1.6 GB (2026-12-04), plus 4 for its input.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

POLICY = textwrap.dedent("""
    [domains.scale_curves]
    kind = "curves"
    public = { duration = true, points = true }
    notion = "gp"
    cap = "1000"
    time_unit = "s"
    value_columns = ["x", "y"]
    value_unit = "m"

    [domains.scale_streams]
    kind = "streams"
    notion = "wevent"
    cap = "10"
    w = 5
    time_unit = "step"
    value_range = [0.0, 10.0]
    value_unit = "kW"
""")

CHILD = r'''
import json, os, resource, sys, time
root, kind, src, work, runner = sys.argv[1:6]
sys.path.insert(0, root)
t0 = time.perf_counter()
from pathlib import Path
from flows.settings import configure_prefect
configure_prefect(Path(work))
from flows.prefect_server import prefect_session
# Prefect as the CLI reaches it: privpipe's temporary API-only server (no flow-run
# heartbeats, whose thread ends each run on a whole second: docs/operations.md)
import atexit, contextlib
session = contextlib.ExitStack()
session.enter_context(prefect_session(preload=("prefect.main", "flows.release")))
atexit.register(session.close)  # the temporary server stops with this child, however it ends
from ledger import Ledger
from schemas.policy import load_policy
from flows.release import release_curves, release_streams
from flows.runners import make_task_runner
from prefect import flow as prefect_flow
Ledger.init(work + "/ledger.duckdb").apply_policy(load_policy(work + "/policy.toml"))


@prefect_flow
def empty():
    return 1


empty()  # imports, the ledger and Prefect's start-up: timed apart
startup = time.perf_counter() - t0


def cpu_now():
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


c0, t1 = cpu_now(), time.perf_counter()
flow = release_curves if kind == "curves" else release_streams
if runner != "default":
    flow = flow.with_options(task_runner=make_task_runner(runner))
kw = dict(input_path=src, out_dir=work + "/out", ledger_path=work + "/ledger.duckdb",
          policy_path=work + "/policy.toml", return_state=True)
if kind == "curves":
    state = flow(domain="scale_curves", epsilon="1", **kw)
else:
    state = flow(domain="scale_streams", epsilon="5", reconstruct="none", **kw)
res = state.result()
wall = time.perf_counter() - t1
cpu = cpu_now() - c0
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
stages = {}
runs, page = [], None
with get_client(sync_client=True) as client:
    while page is None or len(page) == 200:
        page = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[state.state_details.flow_run_id])), limit=200,
            offset=len(runs))
        runs.extend(page)
for run in runs:
    name = run.name.rsplit("-", 1)[0]
    s = stages.setdefault(name, {"sum": 0.0, "first": None, "last": None, "n": 0})
    s["sum"] += run.total_run_time.total_seconds()
    s["n"] += 1
    if run.start_time and run.end_time:
        a, b = run.start_time.timestamp(), run.end_time.timestamp()
        s["first"] = a if s["first"] is None else min(s["first"], a)
        s["last"] = b if s["last"] is None else max(s["last"], b)
out = Path(res["out"])
size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
print(json.dumps({"wall": wall, "cpu": cpu, "startup": startup,
                  "rss_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024, "stages": stages,
                  "out_bytes": size, "counts": res["manifest"]["counts"]}))
'''


def write_input(path: Path, kind: str, users: int, *, points: int = 500,
                steps: int = 1000, block: int = 20_000) -> None:
    """A seeded Parquet input, written `block` users at a time (bounded memory)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    writer = None
    try:
        for start in range(0, users, block):
            n_users = min(block, users - start)
            ids = np.array([f"u{u:07d}" for u in range(start, start + n_users)])
            if kind == "curves":
                t = np.tile(np.arange(points, dtype=np.float64) * 10.0, n_users)
                walk = np.cumsum(rng.normal(0, 5, (n_users, points, 2)), axis=1)
                walk[:, :, 0] += 100 * np.sin(t.reshape(n_users, points) / 900)
                table = pa.table({"user_id": np.repeat(ids, points),
                                  "curve_id": np.full(n_users * points, "c0"), "t": t,
                                  "x": walk[:, :, 0].ravel(), "y": walk[:, :, 1].ravel()})
            else:
                t = np.tile(np.arange(steps, dtype=np.int64), n_users)
                phase = rng.uniform(0, 2 * np.pi, (n_users, 1))
                v = 5 + 4 * np.sin(2 * np.pi * np.arange(steps)[None, :] / 48 + phase)
                v = np.clip(v + rng.normal(0, 0.3, v.shape), 0, 10)
                table = pa.table({"user_id": np.repeat(ids, steps),
                                  "stream_id": np.full(n_users * steps, "s0"), "t": t,
                                  "value": v.ravel()})
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="zstd")
            writer.write_table(table, row_group_size=1_000_000)
    finally:
        if writer is not None:
            writer.close()


def run(kind: str, src: Path, work: Path, runner: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), kind, str(src), str(work),
                           runner], capture_output=True, text=True, check=False)
    # the child's JSON may follow a progress bar on the same line
    lines = [ln[ln.index('{"'):] for ln in proc.stdout.splitlines() if '{"' in ln]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind} release failed (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])  # the child's result: its last JSON line


def _stage(res: dict, *names: str) -> float:
    return sum(res["stages"].get(n, {}).get("sum", 0.0) for n in names)


def _span(res: dict, name: str) -> float:
    s = res["stages"].get(name)
    return 0.0 if not s or s["first"] is None else s["last"] - s["first"]


def summarise(kind: str, users: int, res: dict) -> dict:
    mech = "privatize-curves" if kind == "curves" else "privatize-streams"
    row = {"kind": kind, "users": users, "items": res["counts"]["items"],
           "points": res["counts"]["points"], "startup": res["startup"], "wall": res["wall"],
           "cpu": res["cpu"],
           "rss": res["rss_mb"], "ingest": _stage(res, "ingest-and-stage"),
           "ledger": _stage(res, "ledger-reserve", "ledger-settle"),
           "mech_sum": _stage(res, mech), "mech_span": _span(res, mech),
           "report": _stage(res, "release-report"), "out_mb": res["out_bytes"] / 2**20}
    known = row["ingest"] + row["ledger"] + row["mech_span"] + row["report"]
    row["other"] = max(res["wall"] - known, 0.0)
    parts = {"ingest": row["ingest"], "ledger": row["ledger"], "mechanism": row["mech_span"],
             "report": row["report"], "flow/Prefect": row["other"]}
    row["dominant"] = max(parts, key=parts.get)
    # every task's summed run time, so the rest column can be read: the stream
    # continuation plan, post-processing, the population view and merges are there
    row["tasks"] = {name: round(s["sum"], 1) for name, s in sorted(res["stages"].items())}
    return row


def table(rows: list[dict]) -> str:
    head = ("| kind | users | points | start-up s | wall s | CPU s | peak RSS MB | ingest s | "
            "ledger s | mechanism s (sum / span) | report s | flow + Prefect s | output MB | "
            "dominant |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['users']:,} | {r['points']:,} | {r['startup']:.1f} | "
            f"{r['wall']:.1f} | "
            f"{r['cpu']:.1f} | {r['rss']:.0f} | {r['ingest']:.1f} | {r['ledger']:.1f} | "
            f"{r['mech_sum']:.1f} / {r['mech_span']:.1f} | {r['report']:.1f} | "
            f"{r['other']:.1f} | {r['out_mb']:.0f} | {r['dominant']} |")
    lines += ["", "| kind | users from -> to | slope of wall (log-log) | slope of CPU | "
              "marginal wall ms/user | marginal CPU ms/user |", "|---|---|---|---|---|---|"]
    for a, b in zip(rows, rows[1:], strict=False):
        if a["kind"] != b["kind"]:
            continue
        ratio = math.log(b["users"] / a["users"])
        lines.append(
            f"| {a['kind']} | {a['users']:,} -> {b['users']:,} | "
            f"{math.log(b['wall'] / a['wall']) / ratio:.2f} | "
            f"{math.log(b['cpu'] / a['cpu']) / ratio:.2f} | "
            f"{(b['wall'] - a['wall']) / (b['users'] - a['users']) * 1e3:.2f} | "
            f"{(b['cpu'] - a['cpu']) / (b['users'] - a['users']) * 1e3:.2f} |")
    names = sorted({n for r in rows for n in r.get("tasks", {})})
    if names:
        lines += ["", "Summed run time of each task, s (Prefect's task runs; tasks overlap):", "",
                  "| kind | users | " + " | ".join(names) + " |",
                  "|" + "---|" * (2 + len(names))]
        for r in rows:
            cells = " | ".join(f"{r['tasks'][n]:.1f}" if n in r["tasks"] else "-"
                               for n in names)
            lines.append(f"| {r['kind']} | {r['users']:,} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--kinds", nargs="+", default=["curves", "streams"],
                    choices=["curves", "streams"])
    ap.add_argument("--work", type=Path, help="directory for inputs and runs (default: a "
                    "temporary directory)")
    ap.add_argument("--runner", default="default", help="task runner (default: the flow's)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="privpipe-scale-", dir=args.work))
    rows = []
    try:
        for kind in args.kinds:
            for users in sorted(args.users):
                src = base / f"{kind}-{users}.parquet"
                t0 = time.perf_counter()
                # in a process of its own: a forked child's peak RSS would start from
                # this process's, which generating 10^5 inputs grows past a GB
                gen_proc = mp.get_context("spawn").Process(target=write_input,
                                                           args=(src, kind, users))
                gen_proc.start()
                gen_proc.join()
                if gen_proc.exitcode != 0:
                    raise SystemExit(f"generating the {kind} input failed")
                gen = time.perf_counter() - t0
                work = base / f"run-{kind}-{users}"
                work.mkdir()
                (work / "policy.toml").write_text(POLICY)
                res = run(kind, src, work, args.runner)
                rows.append(summarise(kind, users, res))
                print(json.dumps({**rows[-1], "input_s": gen}), flush=True)
                shutil.rmtree(work, ignore_errors=True)
                src.unlink()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nTask runner: {args.runner}; {os.cpu_count()} cores.\n")
    print(table(rows))


if __name__ == "__main__":
    main()
