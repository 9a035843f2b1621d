"""The population view of a stream release: report by report against one aggregation.

Usage: ``PYTHONPATH=. nice .venv/bin/python benchmarks/population_view.py
[--users 10000] [--steps 1000] [--period 48] [--rounds 2]``

Writes a samples file like a release's (Square Wave reports on the release
grid, user_id/stream_id/step/y), then times, interleaved in one process:
the counting query every view starts with (`tasks.population._open`), the
report-by-report tables (`_cells`: split, read back sorted, numpy per chunk)
and the one-aggregation tables (`population_scan`), and checks that both
give the same CSV bytes. Prints a table of the best of `--rounds`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mechanisms.safe_sampling import snap_to_grid
from mechanisms.streams import square_wave
from mechanisms.streams.square_wave import square_wave_params
from tasks import population
from tasks.stream_draw import STREAM_GRID

E0 = 1.0


def write_samples(path: Path, users: int, steps: int) -> None:
    """Reports of `users` streams x `steps` steps, written in blocks of users."""
    b, _, _ = square_wave_params(E0)
    rng = np.random.default_rng(7)
    block = max(1, 2_000_000 // steps)
    writer = None
    for first in range(0, users, block):
        n = min(block, users - first)
        x = np.clip(0.5 + 0.3 * np.sin(np.arange(steps) / 7.6)[None, :]
                    + 0.1 * rng.standard_normal((n, steps)), 0, 1).ravel()
        y = snap_to_grid(square_wave(x, epsilon_per_step=E0, rng=rng), grid=STREAM_GRID,
                         bound=1 + b)
        ids = np.repeat(np.array([f"user-{first + i:08d}" for i in range(n)]), steps)
        t = pa.table({"user_id": ids, "stream_id": np.full(ids.size, "s"),
                      "step": np.tile(np.arange(steps, dtype=np.int64), n), "y": y})
        writer = writer or pq.ParquetWriter(path, t.schema)
        writer.write_table(t)
    writer.close()


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def one_round(samples: Path, out: Path, period: int) -> dict[str, float]:
    """Seconds of the counting query, the old tables and the new tables (step + phase)."""
    got: dict[str, float] = {}
    got["count users/rows/steps (_open)"] = _time(
        lambda: population._open(str(samples), None, 1)[0].close())
    real = population.scan_sums
    for name, scan in (("report by report", lambda *a: None), ("one aggregation", real)):
        population.scan_sums = scan
        try:
            got[f"view, {name}"] = _time(lambda name=name: population.population_view_fn(
                str(samples), str(out / name.replace(" ", "_")), epsilon_per_step=E0,
                value_range=(0.0, 4.0), value_unit="kWh", period=period))
        finally:
            population.scan_sums = real
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=1_000)
    ap.add_argument("--period", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="privpipe-popview-") as tmp:
        samples = Path(tmp) / "samples.parquet"
        write_samples(samples, args.users, args.steps)
        rounds = [one_round(samples, Path(tmp), args.period) for _ in range(args.rounds)]
        same = all((Path(tmp) / "report_by_report" / "population" / f).read_bytes()
                   == (Path(tmp) / "one_aggregation" / "population" / f).read_bytes()
                   for f in ("step_mean.csv", "step_distribution.csv", "phase_mean.csv",
                             "phase_distribution.csv"))
    print(f"\n{args.users:,} streams x {args.steps:,} steps = {args.users * args.steps:,} "
          f"reports, period {args.period}; best of {args.rounds}; same CSV bytes: {same}\n")
    print("| part | s |\n|---|---|")
    for key in rounds[0]:
        print(f"| {key} | {min(r[key] for r in rounds):.2f} |")


if __name__ == "__main__":
    main()
