"""Benchmark: where a curve release's CPU goes, stage by stage and by component.

Runs `release_curves` once in this process on the CSV of `bench_flows.py`
(`--users` users x `--points`-point 2-D curves, same policy) and prints two tables:

* per stage, between the release's fault points (`flows/faults.py`: after
  ingest, after reserve, first settle, after settle, outputs, report, ...):
  wall and process CPU seconds (all threads). Chunks, settlements and output
  writes overlap between ``after_reserve`` and ``after_settle``;
* per component: the thread CPU seconds spent inside a few named functions
  (validation and staging, the mechanism, evaluation on the output grid,
  noise generators, Parquet outputs, ledger transactions), summed over calls
  and threads (DuckDB's own worker threads are not in any row: the CSV scan
  runs partly there). These are measured with `time.thread_time` wrappers set on the
  functions' modules before the flow runs; nothing of the release changes.

    PYTHONPATH= .venv/bin/python benchmarks/flows/stage_costs.py [--users 10000] [--points 500]
        [--runner threads|processes|dask|tcp://HOST:PORT --workers N] [--cluster N]

``--cluster N`` starts a Dask scheduler and N single-threaded worker processes on
this machine and releases through ``tcp://`` to them: a remote runner, so each
chunk's secret sample is re-executed in this process (`tasks.recheck`; rate
``PRIVPIPE_RECHECK_RATE``). The mechanism rows then count only those local
re-executions; the workers' CPU is in none of the rows.

Use it beside `bench_flows.py`: that script gives the flow/loop ratio, this
one says which part of the flow to work on.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_flows import POLICY, write_csv  # noqa: E402

#: (module, attribute or Class.method, label, other modules that imported the name)
COMPONENTS = [
    ("ingest.batch", "_Batch.__init__", "ingest: convert + validate a batch", ()),
    ("ingest.spill", "_spill", "ingest: CSV scan + spill (this thread; DuckDB's not)", ()),
    ("ingest.fingerprint", "user_fingerprint", "ingest: user fingerprints", ("ingest.batch",)),
    ("files.staging", "stage_curve_chunk", "staging: write chunk files", ("tasks.stage",)),
    ("tasks.stage", "load_curve_chunk", "staging: load chunk for its task",
     ("flows.release_kinds",)),
    ("ledger.ledger", "Ledger.reserve", "ledger: reserve", ()),
    ("ledger.ledger", "Ledger.noise_seeds", "ledger: noise seeds", ()),
    ("ledger.ledger", "Ledger.settle", "ledger: settle", ()),
    ("tasks.keyed_rng", "release_generator", "mechanism: ChaCha20 generators",
     ("tasks.privatize",)),
    ("tasks.privatize", "_run_curves", "mechanism: privfuncseg_batch", ()),
    ("mechanisms.curves.result", "evaluate_local", "outputs: evaluate on the grid", ()),
    ("tasks.privatize", "_curve_tables", "outputs: chunk tables", ()),
    ("files.outputs", "ParquetAppender.add_table", "outputs: Parquet encode + write", ()),
    ("flows.release_stages", "check_claims", "settle: charges recomputed from the outputs", ()),
    ("tasks.recheck", "curve_subchunk", "recheck: cut the sampled sub-chunk",
     ("flows.release_kinds",)),
    ("tasks.recheck", "compare", "recheck: compare the sample's bytes", ()),
]


class Meter:
    """Thread CPU seconds inside wrapped functions (outermost call of each label only)."""

    def __init__(self) -> None:
        self.cpu: defaultdict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self._active = threading.local()

    def wrap(self, module: str, name: str, label: str, also: tuple[str, ...]) -> None:
        """Time `module.name` (also where `also` modules imported the same function)."""
        mod = importlib.import_module(module)
        owner, attr = (mod, name) if "." not in name else (
            getattr(mod, name.split(".")[0]), name.split(".")[1])
        fn = getattr(owner, attr)
        meter = self

        def timed(*args, **kwargs):
            active = meter._active.__dict__.setdefault("labels", set())
            if label in active:  # recursion or a nested call of the same label
                return fn(*args, **kwargs)
            active.add(label)
            c0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                active.discard(label)
                meter.cpu[label] += time.thread_time() - c0
                meter.calls[label] += 1

        setattr(owner, attr, timed)
        for other in also:
            other_mod = importlib.import_module(other)
            if getattr(other_mod, attr, None) is fn:
                setattr(other_mod, attr, timed)


def _process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--runner", default="default",
                    help="threads, processes or dask (default: the flow's own task runner)")
    ap.add_argument("--workers", type=int, default=2, help="workers of --runner")
    ap.add_argument("--cluster", type=int, default=0,
                    help="start a local Dask scheduler and N workers; release over tcp://")
    args = ap.parse_args()
    if args.cluster:
        with _local_cluster(args.cluster) as address:
            args.runner = address
            _run(args)
    else:
        _run(args)


@contextmanager
def _local_cluster(workers: int) -> Iterator[str]:
    """A Dask scheduler and `workers` single-threaded workers in subprocesses."""
    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                               "127.0.0.1", "--port", str(port), "--no-dashboard"], **quiet),
             subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                               "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard"],
                              **quiet)]
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with Client(address, timeout=5) as client:
                    if len(client.scheduler_info()["workers"]) >= workers:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the local Dask cluster did not start in 120 s")
            time.sleep(0.5)
        yield address
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def _run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="privpipe-stages-") as tmp:
        work = Path(tmp)
        csv = work / "in.csv"
        write_csv(csv, args.users, args.points)
        (work / "policy.toml").write_text(POLICY)
        marks: list[tuple[str, float, float]] = [("start", time.perf_counter(), _process_cpu())]

        def mark(name: str) -> None:
            marks.append((name, time.perf_counter(), _process_cpu()))

        from flows.settings import configure_prefect
        configure_prefect(work)
        import prefect  # noqa: F401
        mark("import prefect")
        import flows.release as release
        from ledger import Ledger
        from schemas.policy import load_policy
        mark("import privpipe")
        meter = Meter()
        for module, name, label, also in COMPONENTS:
            meter.wrap(module, name, label, also)
        import flows.faults
        flows.faults.fault_point = mark  # every stage boundary of the release
        body = release._release

        def timed_body(*a, **k):
            mark("Prefect start + flow run")
            return body(*a, **k)

        release._release = timed_body
        Ledger.init(str(work / "ledger.duckdb")).apply_policy(load_policy(work / "policy.toml"))
        mark("ledger init + policy")
        flow = release.release_curves
        if args.runner != "default":
            from flows.runners import make_task_runner
            flow = flow.with_options(task_runner=make_task_runner(args.runner,
                                                                  workers=args.workers))
        res = flow(
            input_path=str(csv), domain="bench", epsilon="1", out_dir=str(work / "out"),
            ledger_path=str(work / "ledger.duckdb"), policy_path=str(work / "policy.toml"))
        mark("flow returns")
        released = res["manifest"]["counts"]["users_released"]
    if released != args.users:
        raise SystemExit(f"the flow released {released} of {args.users} users")
    runner = "default" if args.runner == "default" else f"{args.runner} x {args.workers}"
    print(f"{args.users:,} users x {args.points} points, {os.cpu_count()} CPUs, "
          f"task runner {runner}\n")
    print("| stage (ends at) | wall (s) | process CPU (s) |")
    print("|---|---|---|")
    merged: list[tuple[str, float, float]] = []
    for (name, w, c), (_, w0, c0) in zip(marks[1:], marks[:-1], strict=True):
        if merged and merged[-1][0] == name:  # between_reserves, between_merges repeat
            merged[-1] = (name, merged[-1][1] + w - w0, merged[-1][2] + c - c0)
        else:
            merged.append((name, w - w0, c - c0))
    for name, w, c in merged:
        print(f"| {name} | {w:.2f} | {c:.2f} |")
    print(f"| **total** | {marks[-1][1] - marks[0][1]:.2f} | {marks[-1][2] - marks[0][2]:.2f} |")
    print("\n| component | calls | thread CPU (s) |")
    print("|---|---|---|")
    for _, _, label, _ in COMPONENTS:
        print(f"| {label} | {meter.calls[label]:,} | {meter.cpu[label]:.2f} |")


if __name__ == "__main__":
    main()
