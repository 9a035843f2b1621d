"""The stream chunk task beside a thread running Python code, at two switch intervals.

In a release the chunk tasks run on threads beside the flow thread (loading and
submitting chunks), the collector and Prefect's client. A chunk task gives up
the GIL for every segment's keystream fill and must then take it back from
whichever thread holds it: CPython hands it over after the switch interval
(default 5 ms). This times `tasks.privatize.privatize_stream_chunk` on one
chunk (`chunk_task.make_chunk`: `--streams` streams of `--steps` steps), best of
`--repeats`:

* alone;
* beside one thread running a pure-Python loop, at CPython's default interval
  (5 ms) and at `--interval` seconds.

    PYTHONPATH=. .venv/bin/python benchmarks/streams/gil_convoy.py
        [--streams 500] [--steps 1000] [--repeats 7] [--interval 0.0005]

A shorter interval helps the chunk beside a thread that never waits (0.097 ->
0.070 s at 0.5 ms), but wiring it around a release's chunk phase did not
shorten 5x10^4-user stream releases (benchmarks/results/floor.md): it is not used.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from chunk_task import make_chunk  # noqa: E402

from benchmarks.report import markdown_table  # noqa: E402
from tasks.privatize import StreamSpec, privatize_stream_chunk  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--interval", type=float, default=0.0005,
                    help="the shorter switch interval to try, in seconds")
    args = ap.parse_args()
    chunk = make_chunk(args.streams, args.steps, continued=False)
    spec = StreamSpec(epsilon="5", w=5, reconstruct="none")
    privatize_stream_chunk(chunk, spec)  # imports and first-use loads

    def best() -> float:
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            privatize_stream_chunk(chunk, spec)
            times.append(time.perf_counter() - t0)
        return min(times)

    stop = threading.Event()

    def busy() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    default = sys.getswitchinterval()
    rows = [("alone", default, best())]
    for interval in (default, args.interval):
        sys.setswitchinterval(interval)
        stop.clear()
        th = threading.Thread(target=busy)
        th.start()
        try:
            rows.append(("beside a busy Python thread", interval, best()))
        finally:
            stop.set()
            th.join()
    sys.setswitchinterval(default)
    alone = rows[0][2]
    print(f"{args.streams:,} streams x {args.steps:,} steps, best of {args.repeats}\n")
    print(markdown_table(["chunk task", "switch interval ms", "s", "to alone"],
                         [[name, f"{interval * 1e3:g}", f"{t:.3f}", f"{t / alone:.2f}x"]
                          for name, interval, t in rows]))


if __name__ == "__main__":
    main()
