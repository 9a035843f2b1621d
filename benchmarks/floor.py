"""The floor: a release against DuckDB reading, noising and writing the same Parquet input.

For each kind (curves: one 500-point 2-D curve per user; streams: one
1,000-step stream per user, ``reconstruct="none"``) it writes the scale
benchmark's seeded input (`benchmarks.scale.write_input`), then in the same run:

* **the floor**: DuckDB reads the input, adds uniform noise to every value
  column and writes zstd Parquet, one statement
  (``COPY (SELECT * REPLACE (value + random() - 0.5 AS value) FROM
  read_parquet(IN)) TO OUT (FORMAT parquet, COMPRESSION zstd)``; for curves the
  value columns are ``x`` and ``y``), in a fresh child process, wall time of
  the statement only, best of `--repeats`;
* **the release**: the `release_curves` / `release_streams` flow on the same
  file in a fresh child process (`benchmarks.scale.run`: start-up excluded,
  the default task runner);

and prints per kind the floor, the release wall, their ratio (issue #30's goal:
at most 2), and each stage's share of the release wall: ingest, ledger
(reserve + settle), mechanism (span of the chunk tasks), report, and the rest
(the flow's own work and Prefect: for streams the continuation plan and
post-processing are there; their summed task times are printed below).

    PYTHONPATH=. .venv/bin/python benchmarks/floor.py [--users 50000]
        [--kinds curves streams] [--repeats 1] [--work DIR]

The defaults (5 x 10^4 users) take about 3 minutes on 2 cores, input
generation included; ``--users 1000000`` is the 10^6 row (tens of minutes,
about 20 GB of disk for the curve input, staging and outputs: see
`benchmarks/scale.py`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.scale import POLICY, run, summarise, write_input  # noqa: E402

#: The value columns the floor adds noise to, per kind (the scale inputs' columns).
VALUE_COLUMNS = {"curves": ("x", "y"), "streams": ("value",)}

FLOOR_CHILD = r'''
import json, sys, time
import duckdb
sql = sys.argv[1]
con = duckdb.connect()
t0 = time.perf_counter()
con.execute(sql)
print(json.dumps({"wall": time.perf_counter() - t0}))
'''


def floor_sql(src: Path, out: Path, columns: tuple[str, ...]) -> str:
    """The floor's one statement: read `src`, add U(-1/2, 1/2) to `columns`, write zstd."""
    noisy = ", ".join(f"{c} + random() - 0.5 AS {c}" for c in columns)

    def lit(p: Path) -> str:
        return "'" + str(p).replace("'", "''") + "'"

    # the benchmark's own temporary paths and column names, quoted: no outside text
    return (f"COPY (SELECT * REPLACE ({noisy}) FROM read_parquet({lit(src)})) "  # noqa: S608
            f"TO {lit(out)} (FORMAT parquet, COMPRESSION zstd)")


def run_floor(src: Path, out: Path, columns: tuple[str, ...]) -> float:
    """Wall seconds of the floor statement, in a fresh process (its own DuckDB, 2 threads)."""
    proc = subprocess.run([sys.executable, "-c", FLOOR_CHILD, floor_sql(src, out, columns)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the floor statement failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["wall"])


def _generate(src: Path, kind: str, users: int) -> float:
    """Write the scale benchmark's input in a spawned process; its wall seconds."""
    t0 = time.perf_counter()
    proc = mp.get_context("spawn").Process(target=write_input, args=(src, kind, users))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"generating the {kind} input failed")
    return time.perf_counter() - t0


def measure(kind: str, users: int, base: Path, repeats: int) -> dict:
    """The floor (best of `repeats`) and the release on one input; the summarised row."""
    src = base / f"{kind}-{users}.parquet"
    gen = _generate(src, kind, users)
    floors = []
    for i in range(repeats):
        out = base / f"floor-{kind}-{i}.parquet"
        floors.append(run_floor(src, out, VALUE_COLUMNS[kind]))
        out.unlink()
    work = base / f"run-{kind}-{users}"
    work.mkdir()
    (work / "policy.toml").write_text(POLICY)
    try:
        res = run(kind, src, work, "default")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        src.unlink()
    row = summarise(kind, users, res)
    row.update(floor=min(floors), input_s=gen, reserve_span=reserve_span(res))
    return row


def reserve_span(res: dict) -> float:
    """Seconds from the first plan or reserve task's start to the last reserve's end.

    A stream release plans each group's continuations and reserves its requests
    (`flows.release_stages.reserve`); the summed task times cannot show how much
    of the two overlapped, this span does.
    """
    got = [res["stages"].get(n) for n in ("plan-stream-continuation", "ledger-reserve")]
    got = [s for s in got if s and s["first"] is not None]
    reserve = res["stages"].get("ledger-reserve")
    if not got or not reserve or reserve["last"] is None:
        return 0.0
    return reserve["last"] - min(s["first"] for s in got)


STAGES = (("ingest", "ingest"), ("ledger", "ledger"), ("mechanism", "mech_span"),
          ("report", "report"), ("flow + Prefect", "other"))


def table(rows: list[dict]) -> str:
    """The floor table (wall, ratio, stage shares) and each release's summed task times."""
    head = ("| kind | users | samples | floor s (DuckDB read + noise + write) | release wall s "
            "(start-up excluded) | ratio | " + " | ".join(f"{n} %" for n, _ in STAGES) +
            " | release CPU s | peak RSS MB | plan + reserve span s |")
    lines = [head, "|" + "---|" * (9 + len(STAGES))]
    for r in rows:
        shares = " | ".join(f"{100 * r[k] / r['wall']:.0f}" for _, k in STAGES)
        lines.append(f"| {r['kind']} | {r['users']:,} | {r['points']:,} | {r['floor']:.1f} | "
                     f"{r['wall']:.1f} | {r['wall'] / r['floor']:.1f}x | {shares} | "
                     f"{r['cpu']:.1f} | {r['rss']:.0f} | {r['reserve_span']:.1f} |")
    lines += ["", "Stage shares are of the release wall; mechanism is the span of the chunk "
              "tasks (first start to last end).", "", "Summed run time of each task, s:", ""]
    for r in rows:
        lines.append(f"- {r['kind']}: " + ", ".join(f"{n} {s:.1f}"
                                                    for n, s in r["tasks"].items()))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--kinds", nargs="+", default=["curves", "streams"],
                    choices=["curves", "streams"])
    ap.add_argument("--repeats", type=int, default=1, help="floor runs per kind (best kept)")
    ap.add_argument("--work", type=Path, help="directory for inputs and runs (default: a "
                    "temporary directory)")
    args = ap.parse_args()
    if args.users < 1 or args.repeats < 1:
        raise SystemExit("--users and --repeats must be >= 1")
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="privpipe-floor-", dir=args.work))
    rows = []
    try:
        for kind in args.kinds:
            t0 = time.perf_counter()
            rows.append(measure(kind, args.users, base, args.repeats))
            print(json.dumps({**rows[-1], "total_s": time.perf_counter() - t0}), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\n{os.cpu_count()} cores; input as benchmarks/scale.py writes it.\n")
    print(table(rows))


if __name__ == "__main__":
    main()
