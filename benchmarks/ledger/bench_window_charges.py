"""Memory and time of a stream report's charge spread: swept in the ledger vs per-account rows.

Run:  .venv/bin/python benchmarks/ledger/bench_window_charges.py [--users 1000000]

Builds a ledger with one w-event release of `--users` users (one stream of
1,000 steps each, reserved in batches of 50,000), then, each in a spawned
process of its own (so peak RSS is its own), computes the spread of what the
release charged each user per window two ways, side by side:

* ``window_charge_summary``: what a release report uses
  (`ledger.summaries.window_charges`: step runs fetched in batches in user
  order, each user's window computed and counted, no row per user kept);
* ``release_charges`` rows: one Python row per account with its window, then
  a dict per user (what the report did before 2026-12-04).

Both must give the same count; prints peak RSS and wall/CPU seconds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

POLICY = {"domains": {"power": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 4,
                                "value_range": [0.0, 1.0], "value_unit": "MW"}}}


def build(path: str, users: int) -> None:
    from ledger import Ledger, Request
    from mechanisms.cost import StepRun
    from schemas.policy import parse_policy

    led = Ledger.init(path, actor="bench")
    led.apply_policy(parse_policy(POLICY))
    run = (StepRun(0, 1000, Fraction(1, 4)),)
    for a in range(0, users, 50_000):
        led.reserve("r", [Request(f"u{i:07d}", "power", step="s", notion="wevent",
                                  stream_id="s", runs=run)
                          for i in range(a, min(users, a + 50_000))],
                    mechanism="square_wave", parameters={})


def measure(path: str, how: str, q: mp.Queue) -> None:
    from ledger import Ledger

    led = Ledger(path)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t, c = time.perf_counter(), time.process_time()
    if how == "swept":
        spread, _ = led.window_charge_summary("r")
        n = spread.n if spread else 0
    else:
        rows = led.release_charges("r")
        over = any(r["user_window"] is not None for r in rows)
        per_user: dict[str, Fraction] = {}
        for r in rows:
            per_user[r["user_id"]] = (r["user_window"] if over else
                                      max(per_user.get(r["user_id"], Fraction(0)), r["window"]))
        n = sum(Counter(per_user.values()).values())
    q.put((how, n, time.perf_counter() - t, time.process_time() - c, before,
           resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1_000_000)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="privpipe-bench-") as tmp:
        path = str(Path(tmp) / "ledger.duckdb")
        t = time.perf_counter()
        p = ctx.Process(target=build, args=(path, args.users))
        p.start()
        p.join()
        if p.exitcode != 0:
            raise SystemExit("building the ledger failed")
        print(f"ledger of {args.users:,} w-event users built in {time.perf_counter() - t:.1f} s\n")
        rows = []
        for how in ("swept", "rows"):
            q: mp.Queue = ctx.Queue()
            p = ctx.Process(target=measure, args=(path, how, q))
            p.start()
            rows.append(q.get())
            p.join()
    print("| charge spread | users | wall s | CPU s | RSS before MB | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    names = {"swept": "window_charge_summary (swept)", "rows": "release_charges rows"}
    for how, n, wall, cpu, before, peak in rows:
        print(f"| {names[how]} | {n:,} | {wall:.1f} | {cpu:.1f} | {before:.0f} | {peak:.0f} |")
    if rows[0][1] != rows[1][1]:
        raise SystemExit("the two ways counted different users")


if __name__ == "__main__":
    main()
