"""Ingest benchmark: validate generated curve CSVs, show rows/s and that memory stays flat.

    .venv/bin/python benchmarks/ingest/bench_ingest.py                 # 1M and 5M rows
    .venv/bin/python benchmarks/ingest/bench_ingest.py --rows 5000000  # one size
    .venv/bin/python benchmarks/ingest/bench_ingest.py --markdown out.md

For each size, a CSV of curve samples (user_id, curve_id, t, value; 1000 points
per user) is generated chunk by chunk into a temporary directory (never the
whole table in memory), then validated by `ingest.scan` in a fresh subprocess
that reports its own peak RSS (``ru_maxrss``), so each size's peak is measured
alone. Sizes run side by side in one invocation; the goal is a peak RSS under
1.5 GB that does not grow with the file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from data.synthetic import curve_table  # noqa: E402

POINTS_PER_USER = 1000
USERS_PER_CHUNK = 200

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from ingest import default_domain, scan
from schemas.policy import Domain
from fractions import Fraction
dom = Domain(name="bench", kind="curves", notion="gp", cap=Fraction(1), time_unit="s",
             value_columns=("value",), value_unit="1")
ru0 = resource.getrusage(resource.RUSAGE_SELF)
rss0 = ru0.ru_maxrss
t0 = time.perf_counter()
rep = scan(sys.argv[1], dom, batch_rows=int(sys.argv[2]), memory_limit=sys.argv[4])
dt = time.perf_counter() - t0
ru1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "rows": rep.rows, "users": rep.users,
                  "valid": rep.valid, "rss_import_kb": rss0,
                  "rss_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def generate(path: Path, rows: int, seed: int = 0) -> float:
    """Write `rows` curve samples to `path` in chunks; return the seconds it took."""
    t0 = time.perf_counter()
    users = -(-rows // POINTS_PER_USER)
    writer = None
    written = 0
    with open(path, "wb") as fh:
        for first in range(0, users, USERS_PER_CHUNK):
            n = min(USERS_PER_CHUNK, users - first)
            df = curve_table(n, POINTS_PER_USER, seed=seed + first, first_user=first)
            df = df.iloc[: rows - written]
            table = pa.Table.from_pandas(df, preserve_index=False)
            if writer is None:
                writer = pacsv.CSVWriter(fh, table.schema)
            writer.write_table(table)
            written += len(df)
        if writer is not None:
            writer.close()
    return time.perf_counter() - t0


def validate(path: Path, batch_rows: int, memory_limit: str) -> dict:
    """Validate `path` in a fresh interpreter and return its timings and peak RSS."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(batch_rows), str(ROOT),
                           memory_limit],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, action="append",
                    help="rows to generate and validate (repeatable); default 1M and 5M")
    ap.add_argument("--batch-rows", type=int, default=200_000)
    ap.add_argument("--memory-limit", action="append",
                    help="DuckDB memory limit(s) to compare (repeatable); default 512MB (the "
                         "ingest default) and 256MB")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    args = ap.parse_args()
    sizes = args.rows or [1_000_000, 5_000_000]
    limits = args.memory_limit or ["512MB", "256MB"]
    results = []
    with tempfile.TemporaryDirectory(prefix="privpipe-bench-ingest-") as tmp:
        for rows in sizes:
            path = Path(tmp) / f"curves_{rows}.csv"
            gen_s = generate(path, rows)
            size_mb = path.stat().st_size / 2**20
            for limit in limits:
                r = validate(path, args.batch_rows, limit)
                assert r["valid"] and r["rows"] == rows, r
                results.append({
                    "rows": rows, "users": r["users"], "csv_mb": size_mb, "generate_s": gen_s,
                    "limit": limit, "validate_s": r["seconds"], "cpu_s": r["cpu_seconds"],
                    "rows_per_s": rows / r["seconds"],
                    "rss_import_mb": r["rss_import_kb"] / 1024,
                    "peak_rss_mb": r["rss_peak_kb"] / 1024,
                })
            os.remove(path)
    head = ("| rows | users | CSV MB | generate s | DuckDB memory_limit | validate s (wall) "
            "| CPU s | rows/s (wall) | RSS after import MB | peak RSS MB |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        lines.append(
            f"| {r['rows']:,} | {r['users']:,} | {r['csv_mb']:.0f} | {r['generate_s']:.1f} "
            f"| {r['limit']} | {r['validate_s']:.1f} | {r['cpu_s']:.1f} "
            f"| {r['rows_per_s']:,.0f} "
            f"| {r['rss_import_mb']:.0f} | {r['peak_rss_mb']:.0f} |")
    note = (f"batch_rows={args.batch_rows:,}, {POINTS_PER_USER} points per user, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end "
            "(wall times depend on other load; CPU s is the validating process's own); "
            "DuckDB uses its memory_limit as a cache before spilling to disk, so peak RSS "
            "is bounded by import + limit + one batch, not by the file; "
            "goal: peak RSS < 1536 MB")
    text = "\n".join(lines) + "\n\n" + note + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text("# Ingest benchmark\n\n" + text, encoding="utf-8")


if __name__ == "__main__":
    main()
