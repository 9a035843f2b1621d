"""A stream plan's keyed fingerprints: range by range (before) against a chunk's batches.

For `--streams` streams of `--steps` steps (one new range each, as a first
release plans them), times in one process, best of `--repeats`:

* **range by range**: one `range_fingerprint` call per stream, as the plan made
  them before `tasks.plan_fingerprints`;
* **batched**: `tasks.plan_fingerprints.chunk_fingerprints` over the same
  streams as one chunk (calls of at most 2^20 values);

on an embedded ledger and through `privpipe ledger serve` (a subprocess on
127.0.0.1 with TLS and a throwaway CA from the tests' helpers), and checks that
both give the same fingerprints. Prints a Markdown table.

    PYTHONPATH=. .venv/bin/python benchmarks/ledger/bench_plan_fingerprints.py
        [--streams 2000] [--steps 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "ledger"))

from served_helpers import start_server  # noqa: E402

from benchmarks.report import markdown_table  # noqa: E402
from ledger import Ledger  # noqa: E402
from ledger.remote import RemoteLedger  # noqa: E402
from schemas.policy import parse_policy  # noqa: E402
from tasks.plan_fingerprints import chunk_fingerprints  # noqa: E402

POLICY = {"domains": {"power": {"kind": "streams", "notion": "wevent", "cap": "10", "w": 5,
                                "time_unit": "step", "value_range": [0.0, 1.0],
                                "value_unit": "kW"}}}


def _measure(led, users, streams, steps, values, offsets, repeats):
    """(range-by-range s, batched s), best of `repeats`; the fingerprints checked equal."""
    def one_by_one():
        return [led.range_fingerprint(u, "power", s, steps[a:b], values[a:b])
                for u, s, a, b in zip(users, streams, offsets[:-1], offsets[1:], strict=True)]

    def batched():
        table = chunk_fingerprints(led, "power", "bench", users, streams, steps, values,
                                   offsets, {})
        return [table[k](steps[a:b], values[a:b])
                for k, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True))]

    best = {"one": float("inf"), "batch": float("inf")}
    for _ in range(repeats):
        for name, fn in (("one", one_by_one), ("batch", batched)):
            t0 = time.perf_counter()
            got = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
            best.setdefault(f"fps_{name}", got)
    assert best["fps_one"] == best["fps_batch"]
    return best["one"], best["batch"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n, m = args.streams, args.steps
    users = [f"u{k:07d}" for k in range(n)]
    streams = ["s0"] * n
    steps = np.tile(np.arange(m, dtype=np.int64), n)
    values = np.random.default_rng(0).random(n * m)
    offsets = (np.arange(n + 1) * m).tolist()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "led" / "l.duckdb"
        Ledger.init(path, actor="bench").apply_policy(parse_policy(POLICY))
        rows.append(("embedded", *_measure(Ledger(path, actor="bench"), users, streams, steps,
                                            values, offsets, args.repeats)))
        served = start_server(path, Path(d))
        try:
            led = RemoteLedger(served.url, token=served.tokens["rel-a"], ca=str(served.ca))
            rows.append(("served (TLS, loopback)", *_measure(led, users, streams, steps, values,
                                                           offsets, args.repeats)))
        finally:
            served.stop()
    print(f"{n:,} streams x {m:,} steps, best of {args.repeats}\n")
    print(markdown_table(["ledger", "range by range s", "batched s", "ratio"],
                         [[name, f"{one:.2f}", f"{batch:.2f}", f"{one / batch:.1f}x"]
                          for name, one, batch in rows]))


if __name__ == "__main__":
    main()
