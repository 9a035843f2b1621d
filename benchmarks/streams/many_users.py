"""Many users: a stream release of 10^4 and 10^5 households x 10^3 steps (issue #15, item 3).

Generates the seeded household population of `data.households` (real day
shapes, periods 24/48/96, levels, noise, 3 % missing days), 1000 half-hour
steps per household, as a Parquet input written in chunks of households;
initialises a fresh ledger with the bundled policy; then runs
``privpipe release streams --domain households --epsilon 5`` in a child
process (under GNU time), once with ``--reconstruct none`` and once with CPR
and the population view per half-hour, and prints wall time, CPU time (user +
system of the child and its children), peak RSS (of the largest of them) and
the cost per user. Timings are never
asserted anywhere; compare the rows of one run (the machine is shared).
Writes benchmarks/results/streams/many_users.md.

    nice -n 10 .venv/bin/python benchmarks/streams/many_users.py [--users 10000 100000]
        [--steps 1000] [--work DIR] [--modes cpr none]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from data import households as hh  # noqa: E402
from data.loaders import POLICY_FILE  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PRIVPIPE = ROOT / ".venv" / "bin" / "privpipe"
CHUNK = 5000  # households generated and written at once
TIME = "/usr/bin/time"  # GNU time


def write_input(path: Path, users: int, steps: int, seed: int = 7) -> int:
    """The household table as Parquet, written chunk by chunk; returns the row count."""
    days = -(-steps // hh.STEPS_PER_DAY)
    rows = 0
    writer = None
    try:
        for first in range(0, users, CHUNK):
            df = hh.households(min(CHUNK, users - first), days, seed=seed, first_household=first)
            df = df[df["t"] < steps]
            table = pa.Table.from_pandas(df, preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="zstd")
            writer.write_table(table)
            rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows


def run_release(work: Path, input_path: Path, mode: str) -> dict[str, float]:
    """One release in a child process: wall, CPU and peak RSS of that child."""
    ledger = work / f"ledger-{mode}.duckdb"
    for suffix in ("", ".key", ".wal", ".pub", ".sign"):  # the ledger and its key files
        Path(str(ledger) + suffix).unlink(missing_ok=True)
    env = {**os.environ, "PRIVPIPE_HOME": str(work / f"home-{mode}")}
    subprocess.run([str(PRIVPIPE), "ledger", "init", "--policy", str(POLICY_FILE),
                    "--ledger", str(ledger)], check=True, env=env, capture_output=True)
    out = work / f"out-{mode}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(PRIVPIPE), "release", "streams", str(input_path), "--domain", "households",
           "--epsilon", "5", "--ledger", str(ledger), "--out", str(out),
           "--reconstruct", mode, "--chunk-users", "500"]
    if mode == "cpr":
        cmd += ["--population-period", "48"]
    # GNU time measures this one child (and what it waits for): CPU and its own peak RSS
    stats = work / f"time-{mode}.txt"
    t0 = time.perf_counter()
    proc = subprocess.run([TIME, "-f", "%U %S %M", "-o", str(stats), *cmd], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"release failed ({proc.returncode}): {proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")
    user, system, rss_kb = stats.read_text().split()[-3:]
    return {"wall": wall, "cpu": float(user) + float(system), "rss_mb": int(rss_kb) / 1024.0}


def main(argv: list[str] | None = None) -> None:
    """Generate, release, tabulate."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", nargs="+", type=int, default=[10_000, 100_000])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--modes", nargs="+", default=["cpr", "none"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/privpipe-many-users"))
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for users in args.users:
        inp = args.work / f"households-{users}.parquet"
        t0 = time.perf_counter()
        n_rows = write_input(inp, users, args.steps)
        gen = time.perf_counter() - t0
        for mode in sorted(args.modes, key=lambda m: m == "cpr"):  # the quicker one first
            r = run_release(args.work, inp, mode)
            label = ("CPR + population view" if mode == "cpr"
                     else "no CPR (population view per step)")
            rows.append([f"{users:,}", f"{n_rows:,}", label, f"{r['wall']:.0f}", f"{r['cpu']:.0f}",
                         f"{r['rss_mb']:.0f}", f"{1000 * r['wall'] / users:.1f}",
                         f"{1000 * r['cpu'] / users:.1f}", f"{gen:.0f}"])
            print(" | ".join(rows[-1]), flush=True)
        inp.unlink(missing_ok=True)
    md = ["# Many users: stream release of household meters", "",
          f"`privpipe release streams --domain households --epsilon 5` (w = 5), "
          f"{args.steps} half-hour steps per household, 3 % missing days, chunks of 500 "
          f"users, threads task runner, a fresh ledger per run; load average at the end "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared machine: compare rows of "
          "one run, not absolute times).", "",
          C.md_table(["users", "samples", "release", "wall s", "CPU s", "peak RSS MB",
                      "wall ms / user", "CPU ms / user", "input generation s"], rows)]
    path = C.out_dir() / "many_users.md"
    path.write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
