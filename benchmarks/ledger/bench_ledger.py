"""Ledger speed: reserve + settle for many users vs a bare DuckDB bulk insert; w-event check.

Run:  .venv/bin/python benchmarks/ledger/bench_ledger.py [--users 100000] [--repeat 1]
      [--served-users N]  (the served rows: the same reserve + settle through
      `privpipe ledger serve` over HTTPS on 127.0.0.1; 0 skips them)

Each scenario runs in its own spawned process (so peak RSS is its own), side by
side in one run; the ratio compares the ledger's reserve + settle (hash chain,
balances, idempotency lookups, one transaction each) with inserting the same
number of rows into an identical ``entries`` table with one Arrow bulk insert.
Wall seconds and CPU seconds (the process, all threads) are both given: on a
shared, loaded machine the CPU ratio is the steadier of the two. Each repeat
runs the served reserve + settle right after the embedded one it is compared
with; its CPU is the client's plus the server process's (``/proc``, Linux).
Prints a table and writes ``benchmarks/ledger/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}

REPO = Path(os.environ.get("PRIVPIPE_BENCH_TREE") or Path(__file__).resolve().parents[2])
"""The tree whose `ledger` is measured: this one, or PRIVPIPE_BENCH_TREE (a before tree)."""
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _ledger_run(arg: tuple[int, bool], q: mp.Queue) -> None:
    """Reserve + settle n users; per_user: each user settles its own `Cost`.

    With one shared `Cost` (a fixed-cost mechanism) settle takes the ledger's
    column-wise path; with per-user costs of different actual amounts (what
    PrivFuncSeg/ReduceSeg releases settle: each user's own breakdown, with a
    refund) it takes the per-settlement path.
    """
    n, per_user = arg
    from ledger import Ledger, Request, Settlement
    from mechanisms.cost import Cost, CostItem
    from schemas.policy import parse_policy

    with tempfile.TemporaryDirectory() as d:
        led = Ledger.init(Path(d) / "l.duckdb", actor="bench")
        led.apply_policy(parse_policy({"domains": {"ais": {"kind": "curves", **PUBLIC,
                                                             "notion": "gp",
                                                             "cap": "1.0"}}}))
        eps = Fraction(1, 10)
        reqs = [Request(f"user-{i:07d}", "ais", amount=eps) for i in range(n)]
        if per_user:
            # actual spend 0.1 - k/1000 for k = 0..9: ten distinct breakdowns, refunds for most
            sets = [Settlement(f"user-{i:07d}", "ais", "release", Cost("gp", eps, (
                CostItem("svt", "gp", eps / 2),
                CostItem("project", "gp", eps / 2 - Fraction(i % 10, 1000)))))
                for i in range(n)]
        else:
            cost = Cost("gp", eps, (CostItem("svt", "gp", eps / 2),
                                    CostItem("project", "gp", eps / 2)))
            sets = [Settlement(f"user-{i:07d}", "ais", "release", cost) for i in range(n)]
        rss0 = _rss_mb()
        c0, t0 = time.process_time(), time.perf_counter()
        res = led.reserve("bench-release", reqs, mechanism="bench", parameters={"epsilon": "0.1"})
        t1 = time.perf_counter()
        led.settle("bench-release", sets)
        c2, t2 = time.process_time(), time.perf_counter()
        assert len(res.admitted) == n
        t3 = time.perf_counter()
        rep = led.verify()
        t4 = time.perf_counter()
        assert rep.ok and rep.entries_checked >= 2 * n
        q.put({"reserve": t1 - t0, "settle": t2 - t1, "total": t2 - t0, "verify": t4 - t3,
               "cpu": c2 - c0, "rows": rep.entries_checked, "rss_before": rss0,
               "rss_peak": _rss_mb()})


def _baseline_run(n_rows: int, q: mp.Queue) -> None:
    import duckdb
    import pyarrow as pa

    from ledger.schema import TABLES

    ddl = next(t for t in TABLES if "CREATE TABLE entries" in t)
    # Row content prepared outside the timing, shaped like ledger entries.
    ids = os.urandom(16 * n_rows).hex()
    hexes = os.urandom(32 * n_rows).hex()
    cols = {
        "seq": list(range(1, n_rows + 1)),
        "entry_id": [ids[32 * i: 32 * i + 32] for i in range(n_rows)],
        "prev_hash": [hexes[64 * i: 64 * i + 64] for i in range(n_rows)],
        "hash": [hexes[64 * i: 64 * i + 64] for i in range(n_rows)],
        "created_at": ["2026-01-01 00:00:00.000000"] * n_rows,
        "actor": ["bench"] * n_rows, "release_id": ["bench-release"] * n_rows,
        "user_id": [f"user-{i % (n_rows // 2 or 1):07d}" for i in range(n_rows)],
        "domain": ["ais"] * n_rows, "step": ["release"] * n_rows, "stream_id": [""] * n_rows,
        "kind": ["reserve"] * n_rows, "amount": [59147695265218560000000] * n_rows,
        "notion": ["gp"] * n_rows, "cap": [591476952652185600000000] * n_rows,
        "balance_after": [59147695265218560000000] * n_rows, "mechanism": ["bench"] * n_rows,
        "parameters": ['{"epsilon":"0.1"}'] * n_rows, "detail": ["{}"] * n_rows,
        "reason": ["admitted"] * n_rows, "flow_run_id": [None] * n_rows,
        "input_fingerprint": [None] * n_rows,
    }
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "bare.duckdb")
        con = duckdb.connect(path)
        con.execute(ddl)
        con.close()
        rss0 = _rss_mb()
        c0, t0 = time.process_time(), time.perf_counter()
        arrays = {k: pa.array([None if v is None else str(v) for v in vals], pa.string())
                  if k in ("amount", "cap", "balance_after") else pa.array(vals)
                  for k, vals in cols.items()}
        tbl = pa.table(arrays)  # noqa: F841 - scanned by DuckDB below
        con = duckdb.connect(path)
        con.execute("BEGIN TRANSACTION")
        select = ", ".join(
            f"CAST({c} AS HUGEINT)" if c in ("amount", "cap", "balance_after")
            else "CAST(created_at AS TIMESTAMP)" if c == "created_at" else c for c in cols)
        con.execute(f"INSERT INTO entries SELECT {select} FROM tbl")  # noqa: S608
        con.execute("COMMIT")
        con.close()
        c1, t1 = time.process_time(), time.perf_counter()
        q.put({"total": t1 - t0, "cpu": c1 - c0, "rows": n_rows, "rss_before": rss0,
               "rss_peak": _rss_mb()})


def _wevent_run(steps: int, q: mp.Queue) -> None:
    import numpy as np

    from ledger import Ledger, Request, accounting
    from ledger.amounts import charge_units
    from mechanisms.cost import StepRun
    from schemas.policy import parse_policy

    w = 24
    with tempfile.TemporaryDirectory() as d:
        led = Ledger.init(Path(d) / "l.duckdb", actor="bench")
        led.apply_policy(parse_policy({"domains": {"power": {
            "kind": "streams", "notion": "wevent", "cap": "1", "w": w,
            "value_range": [0.0, 1.0]}}}))
        # History: 10 releases, each 1/10 of the steps, as 100 runs of alternating cost.
        per_release = steps // 10
        run_len = per_release // 100
        for r in range(10):
            runs = tuple(
                StepRun(r * per_release + k * run_len, r * per_release + (k + 1) * run_len,
                        Fraction(1, w) if (k + r) % 2 else Fraction(1, 2 * w))
                for k in range(100))
            led.reserve(f"day-{r}", [Request("u", "power", notion="wevent", stream_id="s",
                                             runs=runs)], mechanism="bench", parameters={})
        t0 = time.perf_counter()
        res = led.reserve("next", [Request("u", "power", notion="wevent", stream_id="s",
                                           runs=(StepRun(steps, steps + w, Fraction(1, w)),))],
                          mechanism="bench", parameters={})
        t_reserve = time.perf_counter() - t0
        assert res.admitted
        hist = [(s.start, s.stop, charge_units(s.epsilon))
                for r in range(10) for s in (
                    StepRun(r * per_release + k * run_len, r * per_release + (k + 1) * run_len,
                            Fraction(1, w) if (k + r) % 2 else Fraction(1, 2 * w))
                    for k in range(100))]
        t0 = time.perf_counter()
        exact_max, _ = accounting.max_window(hist, w)
        t_sweep = time.perf_counter() - t0
        # Naive reference: expand to one value per step and slide a window (float64).
        t0 = time.perf_counter()
        per_step = np.zeros(steps)
        for a, b, qq in hist:
            per_step[a:b] += qq / 1e20
        c = np.concatenate([[0.0], np.cumsum(per_step)])
        naive_max = float(np.max(c[w:] - c[:-w]))
        t_naive = time.perf_counter() - t0
        assert abs(naive_max - exact_max / 1e20) <= 1e-9 * naive_max
        q.put({"runs": len(hist), "steps": steps, "reserve": t_reserve, "sweep": t_sweep,
               "naive": t_naive})


def _stream_run(n: int, q: mp.Queue) -> None:
    """A stream release of n users (one 1,000-step stream each, w=5) and its continuation.

    What the streams flow asks of the ledger (`tasks.continuation`): one w-event
    request per stream with its `StreamClaim`, reserved in one call and settled
    in one call with the shared `WEventCost` of equal runs; then a continuation
    release of 100 new steps per stream (watermark 999), whose reserve checks
    the watermarks and sweeps windows over the first release's history.
    """
    import hashlib

    from ledger import Ledger, Request, Settlement, StreamClaim
    from mechanisms.cost import StepRun, WEventCost
    from schemas.policy import parse_policy

    one = Fraction(1)
    users = [f"user-{i:07d}" for i in range(n)]

    def calls(first: int, last: int, wm: int | None) -> tuple[list, list]:
        runs = (StepRun(first, last + 1, one),)
        cost = WEventCost(Fraction(5), 5, runs)
        return ([Request(u, "power", step="stream:s", notion="wevent", stream_id="s",
                         runs=(StepRun(first, last + 1, one),),
                         stream_claim=StreamClaim(first, last, last - first + 1, hashlib.sha256(
                             f"{u}:{first}".encode()).hexdigest(), wm)) for u in users],
                [Settlement(u, "power", "stream:s", cost, stream_id="s") for u in users])

    first_calls, next_calls = calls(0, 999, None), calls(1000, 1099, 999)
    with tempfile.TemporaryDirectory() as d:
        led = Ledger.init(Path(d) / "l.duckdb", actor="bench")
        led.apply_policy(parse_policy({"domains": {"power": {
            "kind": "streams", "notion": "wevent", "cap": "10", "w": 5,
            "value_range": [0.0, 10.0]}}}))
        out: dict[str, float] = {}
        c0 = time.process_time()
        for name, (reqs, sets) in (("first", first_calls), ("next", next_calls)):
            p0, t0 = time.process_time(), time.perf_counter()
            res = led.reserve(f"rel-{name}", reqs, mechanism="bench", parameters={"epsilon": "5"})
            p1, t1 = time.process_time(), time.perf_counter()
            led.settle(f"rel-{name}", sets)
            out[f"{name}_reserve"], out[f"{name}_settle"] = t1 - t0, time.perf_counter() - t1
            out[f"{name}_reserve_cpu"] = p1 - p0
            out[f"{name}_settle_cpu"] = time.process_time() - p1
            assert len(res.admitted) == n
        out["cpu"] = time.process_time() - c0
        out["rss_peak"] = _rss_mb()
        q.put(out)


def _served_run(n: int, q: mp.Queue) -> None:
    """Reserve + settle n users (one shared `Cost`) through `privpipe ledger serve`.

    The server is a subprocess on 127.0.0.1 with TLS (a throwaway CA from the
    tests' helpers); the client is `RemoteLedger`, one call per operation like
    the embedded run. Wall times are the client's; ``cpu`` is the client's
    process, ``server_cpu`` the server process's (all threads, from /proc) over
    the same two calls.
    """
    sys.path.insert(0, str(REPO / "tests" / "ledger"))
    from served_helpers import start_server

    from ledger import Ledger, Request, Settlement
    from ledger.remote import RemoteLedger
    from mechanisms.cost import Cost, CostItem
    from schemas.policy import parse_policy

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "led" / "l.duckdb"
        Ledger.init(path, actor="bench").apply_policy(parse_policy(
            {"domains": {"ais": {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "1.0"}}}))
        served = start_server(path, Path(d))
        try:
            led = RemoteLedger(served.url, token=served.tokens["rel-a"], ca=str(served.ca))
            eps = Fraction(1, 10)
            reqs = [Request(f"user-{i:07d}", "ais", amount=eps) for i in range(n)]
            cost = Cost("gp", eps, (CostItem("svt", "gp", eps / 2),
                                    CostItem("project", "gp", eps / 2)))
            sets = [Settlement(f"user-{i:07d}", "ais", "release", cost) for i in range(n)]
            s0, c0, t0 = _proc_cpu(served.proc.pid), time.process_time(), time.perf_counter()
            res = led.reserve("bench-release", reqs, mechanism="bench",
                              parameters={"epsilon": "0.1"})
            t1 = time.perf_counter()
            led.settle("bench-release", sets)
            c2, t2, s2 = time.process_time(), time.perf_counter(), _proc_cpu(served.proc.pid)
            again = led.reserve("bench-release", reqs, mechanism="bench",
                                parameters={"epsilon": "0.1"})
            t3 = time.perf_counter()
            assert len(res.admitted) == n and all(x.replayed for x in again.admitted)
        finally:
            served.stop()
        q.put({"reserve": t1 - t0, "settle": t2 - t1, "total": t2 - t0, "replay": t3 - t2,
               "cpu": c2 - c0, "server_cpu": s2 - s0, "both_cpu": c2 - c0 + s2 - s0,
               "rss_peak": _rss_mb()})


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a running process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _commit(tree: Path) -> str:
    """The short commit of the measured tree (and ``+changes`` if its files differ from it)."""
    import subprocess

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *a], capture_output=True, text=True,
                              check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "ledger")
    return git("rev-parse", "--short", "HEAD") + (" +changes in ledger/" if dirty else "")


def _spawn(fn, arg):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=fn, args=(arg, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--served-users", type=int, default=None,
                    help="users of the served row (default --users; 0 skips it)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    args = ap.parse_args()

    n_served = args.users if args.served_users is None else args.served_users
    led_runs, per_runs, base_runs, base_per_runs, served = [], [], [], [], []
    for _ in range(args.repeat):
        base_runs.append(_spawn(_baseline_run, 2 * args.users))
        led_runs.append(_spawn(_ledger_run, (args.users, False)))
        if n_served:  # right after the embedded run it is compared with (same load)
            served.append(_spawn(_served_run, n_served))
        per_runs.append(_spawn(_ledger_run, (args.users, True)))
        # the per-user scenario writes a refund entry for 90 % of the users: its bare
        # insert has as many rows as it writes entries
        base_per_runs.append(_spawn(_baseline_run, per_runs[-1]["rows"]))
    streams = [_spawn(_stream_run, args.users) for _ in range(args.repeat)]
    wev = _spawn(_wevent_run, args.steps)

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    base_t, led_t = med(base_runs, "total"), med(led_runs, "total")
    base_c = med(base_runs, "cpu")
    base_per_t, base_per_c = med(base_per_runs, "total"), med(base_per_runs, "cpu")
    per_rows = int(med(per_runs, "rows"))

    def cpu(runs, base=base_c, key="cpu"):  # CPU seconds (all threads), ratio to bare insert
        c = med(runs, key)
        return f"{c:.2f}", f"{c / base:.1f}x"

    rows = [
        ("bare DuckDB Arrow bulk insert", f"{2 * args.users:,} rows", f"{base_t:.2f}",
         f"{med(base_runs, 'rss_peak'):.0f}", "1.0x", f"{base_c:.2f}", "1.0x"),
        ("ledger reserve (1 transaction)", f"{args.users:,} users",
         f"{med(led_runs, 'reserve'):.2f}", "", "", "", ""),
        ("ledger settle (1 transaction)", f"{args.users:,} users", f"{med(led_runs, 'settle'):.2f}",
         "", "", "", ""),
        ("ledger reserve + settle", f"{2 * args.users:,} entries", f"{led_t:.2f}",
         f"{med(led_runs, 'rss_peak'):.0f}", f"{led_t / base_t:.1f}x", *cpu(led_runs)),
        ("ledger verify (chain + balances)", f"{2 * args.users:,} entries",
         f"{med(led_runs, 'verify'):.2f}", "", "", "", ""),
        ("bare DuckDB Arrow bulk insert (per-user rows)", f"{per_rows:,} rows",
         f"{base_per_t:.2f}", f"{med(base_per_runs, 'rss_peak'):.0f}", "1.0x",
         f"{base_per_c:.2f}", "1.0x"),
        ("reserve + settle, per-user costs", f"{per_rows:,} entries",
         f"{med(per_runs, 'total'):.2f}", f"{med(per_runs, 'rss_peak'):.0f}",
         f"{med(per_runs, 'total') / base_per_t:.1f}x", *cpu(per_runs, base_per_c)),
        ("  of which settle (refunds)", f"{args.users:,} users",
         f"{med(per_runs, 'settle'):.2f}", "", "", "", ""),
        ("stream reserve (w-event + claims, 1 call)", f"{args.users:,} users",
         f"{med(streams, 'first_reserve'):.2f}", "", "",
         f"{med(streams, 'first_reserve_cpu'):.2f}", ""),
        ("stream settle (1 call)", f"{args.users:,} users",
         f"{med(streams, 'first_settle'):.2f}", "", "",
         f"{med(streams, 'first_settle_cpu'):.2f}", ""),
        ("continuation reserve (watermarks + history)", f"{args.users:,} users",
         f"{med(streams, 'next_reserve'):.2f}", "", "",
         f"{med(streams, 'next_reserve_cpu'):.2f}", ""),
        ("continuation settle", f"{args.users:,} users",
         f"{med(streams, 'next_settle'):.2f}", "", "",
         f"{med(streams, 'next_settle_cpu'):.2f}", ""),
        ("  stream releases, both (cpu)", f"{4 * args.users:,} entries", "",
         f"{med(streams, 'rss_peak'):.0f}", "", f"{med(streams, 'cpu'):.2f}", ""),
        ("w-event reserve after a long history", f"{wev['runs']} runs, w=24",
         f"{wev['reserve']:.3f}", "", "", "", ""),
        ("w-event sweep over run boundaries", f"{wev['steps']:,} steps", f"{wev['sweep']:.4f}",
         "", "", "", ""),
        ("naive per-step sliding window (numpy)", f"{wev['steps']:,} steps", f"{wev['naive']:.4f}",
         "", "", "", ""),
    ]
    if served:
        rows += [
            ("served reserve (1 call, HTTPS)", f"{n_served:,} users",
             f"{med(served, 'reserve'):.2f}", "", "", "", ""),
            ("served settle (1 call, HTTPS)", f"{n_served:,} users",
             f"{med(served, 'settle'):.2f}", "", "", "", ""),
            ("served reserve + settle (client cpu)", f"{2 * n_served:,} entries",
             f"{med(served, 'total'):.2f}", f"{med(served, 'rss_peak'):.0f}",
             f"{med(served, 'total') / base_t:.1f}x", *cpu(served)),
            ("  server cpu (same calls)", "", "", "", "", f"{med(served, 'server_cpu'):.2f}",
             ""),
            ("  client + server cpu", "", "", "", "", *cpu(served, key="both_cpu")),
            ("  served / embedded reserve + settle", "", f"{med(served, 'total') / led_t:.2f}x"
             if n_served == args.users else "n/a (other size)", "", "",
             f"{med(served, 'both_cpu') / med(led_runs, 'cpu'):.2f}x"
             if n_served == args.users else "", ""),
            ("served reserve replay (all replayed)", f"{n_served:,} users",
             f"{med(served, 'replay'):.2f}", "", "", "", ""),
        ]
    header = ("scenario", "size", "wall s", "peak RSS MB", "vs bare insert", "cpu s",
              "cpu vs bare")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(wd) for h, wd in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(wd) for c, wd in zip(r, widths, strict=True)))
    load = os.getloadavg()[0]
    note = (f"{platform.python_implementation()} {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, load average {load:.1f} at the end, repeat={args.repeat} "
            f"(median); ledger of {REPO} at {_commit(REPO)}")
    print(note)
    md = ["# Ledger benchmark", "", f"`{' '.join(sys.argv)}` — {note}", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    args.out.write_text("\n".join(md) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
