"""The stream chunk task against its own randomizer over the same values (issue #30, goal 2x).

Builds one chunk as a release stages it (`tasks.stage.StreamChunk`: `--streams`
streams of `--steps` steps, values in [0, 1], one new seeded segment per stream,
or with `--continued` an earlier and a new segment each) and times, best of
`--repeats` rounds (the three interleaved), in this process:

* **square_wave**: `mechanisms.streams.square_wave` over all the chunk's values
  at once under one keyed ChaCha20 generator (`tasks.keyed_rng.release_generator`):
  the draws and the randomizer, nothing else;
* **square_wave + grid**: the same, then the release grid (`snap_to_grid`);
* **chunk task**: `tasks.privatize.privatize_stream_chunk` on the chunk (per
  segment keyed generators, the randomizer, the grid, the output table and the
  costs);

and prints the chunk task's ratio to square_wave (goal: at most 2). It imports
the project from PYTHONPATH, so the same script times another tree:

    PYTHONPATH=. .venv/bin/python benchmarks/streams/chunk_task.py
        [--streams 5000] [--steps 1000] [--repeats 5] [--continued]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mechanisms.safe_sampling import snap_to_grid
from mechanisms.streams import square_wave
from mechanisms.streams.square_wave import square_wave_output_bound
from tasks.keyed_rng import release_generator
from tasks.privatize import StreamSpec, privatize_stream_chunk
from tasks.stage import SeededSegment, StreamChunk

GRID = 2.0**-24


def make_chunk(n_streams: int, steps: int, *, continued: bool) -> StreamChunk:
    """A seeded chunk: one stream per user, `steps` steps each, 1 or 2 segments."""
    rng = np.random.default_rng(0)
    offsets = np.arange(n_streams + 1, dtype=np.int64) * steps
    step = np.tile(np.arange(steps, dtype=np.int64), n_streams)
    half = steps // 2
    segments = tuple(
        (SeededSegment(0, half - 1, False, 2**250 + s), SeededSegment(half, steps - 1, True, s))
        if continued and steps > 1 else (SeededSegment(0, steps - 1, True, s),)
        for s in range(n_streams))
    return StreamChunk(0, tuple(f"u{s:07d}" for s in range(n_streams)),
                       ("s0",) * n_streams, step, rng.random(n_streams * steps), offsets,
                       segments)


def best(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Best wall seconds of each function over `repeats` rounds, the functions interleaved.

    Interleaving puts every function under the same load when the machine is
    shared, so their ratios hold even when the absolute times drift.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: min(t) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--continued", action="store_true",
                    help="two segments per stream (an earlier one redrawn, a new one)")
    args = ap.parse_args()
    chunk = make_chunk(args.streams, args.steps, continued=args.continued)
    spec = StreamSpec(epsilon="5", w=5, reconstruct="none")
    e0 = float(spec.epsilon_per_step)
    bound = square_wave_output_bound(e0) + GRID

    def sw() -> np.ndarray:
        return square_wave(chunk.values, epsilon_per_step=e0, rng=release_generator(1))

    def sw_grid() -> np.ndarray:
        return snap_to_grid(sw() - 0.5, grid=GRID, bound=bound) + 0.5

    privatize_stream_chunk(chunk, spec)  # imports and first-use loads
    t = best({"sw": sw, "grid": sw_grid, "task": lambda: privatize_stream_chunk(chunk, spec)},
             args.repeats)
    t_sw, t_grid, t_task = t["sw"], t["grid"], t["task"]
    n = chunk.values.size
    print(f"{args.streams:,} streams x {args.steps:,} steps = {n:,} values, "
          f"{'2 segments' if args.continued else '1 segment'} per stream, best of "
          f"{args.repeats}\n")
    print("| run | s | values/s | ratio to square_wave |\n|---|---|---|---|")
    for name, t in (("square_wave (one keyed generator)", t_sw),
                    ("square_wave + grid", t_grid), ("chunk task", t_task)):
        print(f"| {name} | {t:.3f} | {n / t:.3g} | {t / t_sw:.2f}x |")


if __name__ == "__main__":
    main()
