"""Benchmark: a curve release through two privpipe workers vs threads vs a local Dask cluster.

One input (default 10,000 users x 500-point 2-D curves, the input of
`bench_flows.py`), one fresh child process per release (`bench_flows.child`),
the runners alternated within each round so they share the machine's load:

  * ``threads``: the default runner (trusted, no recheck);
  * ``privpipe``: ``privpipe+http://`` to two `privpipe worker serve` processes
    on loopback (started once by this script, ``--insecure-loopback``, one
    chunk at a time each); a remote runner, so each chunk's secret sample is
    re-executed in the flow process (`PRIVPIPE_RECHECK_RATE`, default 0.01);
  * ``dask``: a local Dask cluster of two worker processes, started by the
    flow (its start-up is in the flow's time; it is trusted, no recheck).

Wall seconds of each release (Prefect's start-up included: one empty flow run
per round is shown apart) and CPU seconds of the flow process (its threads and
finished children: the Dask workers' CPU is counted, the privpipe workers' is
not). Ratios are to ``threads`` in the same round.

    PYTHONPATH= .venv/bin/python benchmarks/flows/bench_worker_runner.py [--users 10000]
        [--points 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_flows import POLICY, ROOT, child, write_csv  # noqa: E402

TOKEN = "benchmark-token-of-32-characters"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_workers(n: int, base: Path) -> tuple[list[subprocess.Popen], str]:
    """`n` loopback privpipe workers; (processes, runner spec)."""
    token = base / "token"
    token.write_text(TOKEN)
    procs, addresses = [], []
    for i in range(n):
        address = f"127.0.0.1:{_port()}"
        log = (base / f"worker-{i}.log").open("wb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "worker", "serve", "--listen", address,
             "--token-file", str(token), "--insecure-loopback"], cwd=ROOT, stdout=log,
            stderr=subprocess.STDOUT))
        addresses.append(address)
    for address in addresses:
        host, port = address.split(":")
        for _ in range(300):
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
    os.environ["PRIVPIPE_WORKER_TOKEN_FILE"] = str(token)
    return procs, "privpipe+http://" + ",".join(addresses)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="privpipe-bench-") as tmp:
        base = Path(tmp)
        csv = base / "in.csv"
        write_csv(csv, args.users, args.points)
        procs, spec = start_workers(2, base)
        try:
            for r in range(args.rounds):
                empty_dir = base / f"empty-{r}"
                empty_dir.mkdir()
                empty = child("empty", base / "none.csv", empty_dir, ROOT, "threads")
                for name, runner in (("threads", "threads"), ("privpipe", spec),
                                     ("dask", "dask")):
                    work = base / f"{name}-{r}"
                    work.mkdir()
                    (work / "policy.toml").write_text(POLICY)
                    res = child("flow", csv, work, ROOT, runner)
                    if res["extra"] != args.users:
                        raise SystemExit(f"{name} released {res['extra']} of {args.users}")
                    rows.append((r, name, empty, res))
                    print(rows[-1][:2], f"{res['wall']:.1f} s", flush=True)
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
    print(f"\n{args.users:,} users x {args.points} points; two workers each for privpipe "
          "and dask; 2 shared cores.\n")
    print("| round | runner | start-up wall (s) | release wall (s) | wall / threads | "
          "flow-process CPU (s) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    for r, name, empty, res in rows:
        base_wall = next(x[3]["wall"] for x in rows if x[0] == r and x[1] == "threads")
        print(f"| {r + 1} | {name} | {empty['wall']:.1f} | {res['wall']:.1f} | "
              f"{res['wall'] / base_wall:.2f} | {res['cpu']:.1f} | {res['rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
