"""The keyed range fingerprints of a stream plan against SHA-256 over the same bytes.

`ledger.watermark.range_fingerprints` hashes each stream's steps and values
(16 bytes a sample) under the noise key; at 10^6 streams of 1,000 steps that is
16 GB, on the flow thread. This times it over `--ranges` ranges of `--steps`
steps (best of `--repeats`), against one SHA-256 pass over the same arrays (what
hashing alone costs on this CPU), and prints a Markdown table. Run it from two
trees, alternated, to compare them:

    PYTHONPATH=TREE .venv/bin/python TREE/benchmarks/ledger/bench_range_fingerprints.py
        [--ranges 1000] [--steps 1000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.report import markdown_table  # noqa: E402
from ledger.watermark import range_fingerprints  # noqa: E402


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    n, per = args.ranges, args.steps
    steps = np.tile(np.arange(per, dtype=np.int64), n)
    values = np.random.default_rng(1).random(n * per)
    offsets = list(range(0, n * per + 1, per))
    users, streams = [f"u{k}" for k in range(n)], ["s"] * n
    key = bytes(range(32))
    fps = _best(lambda: range_fingerprints(key, "d", users, streams, steps, values, offsets),
                args.repeats)
    sha = _best(lambda: (hashlib.sha256(steps).digest(), hashlib.sha256(values).digest()),
                args.repeats)
    per_million = 1e6 / (n * per) * 1e3
    print(markdown_table(
        ["what", "ms per 10^6 samples", "µs per range over SHA-256"],
        [["range_fingerprints", f"{fps * per_million:.1f}", f"{(fps - sha) / n * 1e6:.1f}"],
         ["SHA-256 over the same bytes", f"{sha * per_million:.1f}", "0"]]))


if __name__ == "__main__":
    main()
