"""The population view's per-chunk sums, as a stream release takes them (issue #30).

A release adds each chunk's reports to `tasks.population_scan.ScanSums` on its
collector thread while later chunks are privatized: that time is taken from
the release's CPU-bound chunk phase. This script builds `--chunks` chunks of
Square Wave reports as a release writes them (`--users` users per chunk, each
with `--steps` steps from 0, the release grid, user ids dictionary-encoded)
and times, in CPU seconds of this process, best of `--repeats` rounds:

* **chunk_sums**: the two aggregations of one chunk (`chunk_sums`);
* **ScanSums.add**: the same, plus the distinct users, the per-chunk rows kept
  in DuckDB and their compactions, and the final tables.

It imports the project from PYTHONPATH, so the same script times another tree
(alternate the trees for a before/after):

    PYTHONPATH=. .venv/bin/python benchmarks/streams/population_sums.py
        [--chunks 10] [--users 1000] [--steps 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from mechanisms.safe_sampling import snap_to_grid
from mechanisms.streams import square_wave
from mechanisms.streams.square_wave import square_wave_params
from tasks.population_scan import ScanSums, chunk_sums

GRID = 2.0**-24
EPSILON = 1.0


def _chunks(chunks: int, users: int, steps: int) -> list[pa.Table]:
    """Chunks of reports: user_id (dictionary), step, y on the release grid."""
    rng = np.random.default_rng(7)
    b, _, _ = square_wave_params(EPSILON)
    out = []
    for c in range(chunks):
        x = np.clip(0.5 + 0.3 * np.sin(np.arange(steps) / 24.0)[None, :]
                    + 0.1 * rng.standard_normal((users, steps)), 0, 1)
        y = snap_to_grid(square_wave(x.ravel(), epsilon_per_step=EPSILON, rng=rng), grid=GRID,
                         bound=1 + b)
        ids = pa.array([f"u{c:04d}-{u:05d}" for u in range(users)])
        user = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(users, dtype=np.int32), steps)), ids)
        out.append(pa.table({"user_id": user,
                             "step": np.tile(np.arange(steps, dtype=np.int64), users), "y": y}))
    return out


def _cpu(run: object) -> float:
    t0 = time.process_time()
    run()  # type: ignore[operator]
    return time.process_time() - t0


def main() -> None:
    """Print per 10^6 reports the CPU ms of `chunk_sums` and of `ScanSums.add`."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tables = _chunks(args.chunks, args.users, args.steps)
    rows = sum(t.num_rows for t in tables)
    b, _, _ = square_wave_params(EPSILON)
    columns = [(t.column("step").to_numpy(), t.column("y").to_numpy()) for t in tables]

    def sums_only() -> None:
        for step, y in columns:
            chunk_sums(step, y, b)

    def scan() -> None:
        sums = ScanSums(EPSILON)
        for t in tables:
            sums.add(t)
        sums.tables()
        sums.close()

    best = {"chunk_sums": float("inf"), "ScanSums.add": float("inf")}
    for _ in range(args.repeats):
        best["chunk_sums"] = min(best["chunk_sums"], _cpu(sums_only))
        best["ScanSums.add"] = min(best["ScanSums.add"], _cpu(scan))
    print(f"{args.chunks} chunks x {args.users} users x {args.steps} steps = {rows:,} reports,"
          f" best of {args.repeats}")
    print("| what | CPU ms per 10^6 reports |")
    print("|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {1e3 * seconds / (rows / 1e6):.1f} |")


if __name__ == "__main__":
    main()
