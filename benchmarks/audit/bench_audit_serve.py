"""Page times of `privpipe audit serve` on a ledger of 10^6 users (issue #29, deliverable 4).

Run:  PYTHONPATH=. .venv/bin/python benchmarks/audit/bench_audit_serve.py \
          [--users 1000000] [--work DIR] [--repeat 5] [--shots DIR] [--out FILE]

Builds (or, with --work holding one, reuses) a ledger through the real Ledger
API (`benchmarks/audit/big_ledger.py`: one curves domain, reserve + settle in
batches of 50,000 users, a second release that some users' caps deny, a cap
change with a reason), starts the server in a subprocess, waits for its
whole-chain verification, then requests each page: the first request
("cold": the server's summaries may still be computing) and `repeat` more
(server time from the X-Server-Time-Ms header: median and max), plus the
wall time of headless Chromium loading and rendering the page to a
screenshot (Chromium's own start included). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.audit.big_ledger import build, user_id  # noqa: E402
from benchmarks.report import publish  # noqa: E402
from tests.reports.browser import Server, screenshot  # noqa: E402


def _pages(head_seq: int, kept: dict[int, str]) -> list[tuple[str, str]]:
    return [("overview", "/"),
            ("user lookup (charged twice)", f"/user?id={user_id(1)}"),
            ("user lookup (denied once)", f"/user?id={user_id(2)}"),
            ("user lookup (unknown id)", "/user?id=nobody"),
            ("releases", "/releases"),
            ("releases, domain + dates", "/releases?domain=ais&since=2000-01-01&until=2999-01-01"),
            ("release bulk (10^6 users)", "/release?id=bulk"),
            ("release bulk, page 10,001", "/release?id=bulk&after=1000001&offset=500000"),
            ("release top-up", "/release?id=top-up"),
            ("denials", "/denials"),
            ("denials of top-up, page 101", "/denials?release=top-up&offset=5000"),
            ("denials, reason + dates", "/denials?reason=spent&since=2000-01-01"),
            ("policy history", "/policy"),
            *[(f"since checkpoint (entry {seq:,})", f"/since?head={seq}:{digest}")
              for seq, digest in sorted(kept.items())],
            ("since checkpoint (not in chain)", f"/since?head={head_seq}:{'0' * 64}")]


def _head_and_kept(path: Path) -> tuple[int, dict[int, str]]:
    """The head's seq, and the hashes of entries 2, 1/2 and 99/100 of the way (kept heads)."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        seq = int(con.execute("SELECT max(seq) FROM entries").fetchone()[0])
        kept = {s: str(con.execute("SELECT hash FROM entries WHERE seq = ?", [s]).fetchone()[0])
                for s in (2, seq // 2, seq - seq // 100)}
    finally:
        con.close()
    return seq, kept


def _measure(srv: Server, path: str, repeat: int) -> tuple[float, list[float]]:
    cold = srv.get(path)[2]
    return cold, [srv.get(path)[2] for _ in range(repeat)]


def run(args: argparse.Namespace) -> str:
    """Build or reuse the ledger, serve it, time every page; returns the Markdown report."""
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="auditweb-bench-"))
    path = work / "ledger.duckdb"
    if not path.exists():
        t = build(path, args.users)
        print(f"built {args.users:,} users in {t['total']:.1f} s", flush=True)
    head_seq, kept = _head_and_kept(path)
    t0 = time.perf_counter()
    srv = Server(path, public_key=Path(f"{path}.pub"))
    started = time.perf_counter() - t0
    try:
        srv.wait_verified(timeout=1800)
        verified = time.perf_counter() - t0
        shots = Path(args.shots)
        shots.mkdir(parents=True, exist_ok=True)
        lines = ["| page | URL | cold ms | median ms | max ms | browser s |",
                 "|---|---|---|---|---|---|"]
        for name, url in _pages(head_seq, kept):
            cold, times = _measure(srv, url, args.repeat)
            png = shots / (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".png")
            browser = screenshot(srv.base + url, png, Path(tempfile.mkdtemp()), "1280,1600")
            lines.append(f"| {name} | `{url[:60]}` | {cold:.0f} | {statistics.median(times):.0f}"
                         f" | {max(times):.0f} | {browser:.2f} |")
            print(lines[-1], flush=True)
    finally:
        srv.stop()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    head = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
            f"{args.users:,} users, {head_seq:,} entries, CPython {platform.python_version()}, "
            f"server up in {started:.1f} s, whole chain verified {verified:.1f} s after start")
    return head + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--work", help="directory holding (or to hold) ledger.duckdb; reused")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--shots", default="/work/auditweb-shots")
    p.add_argument("--out", help="append the report to this Markdown file")
    args = p.parse_args()
    report = run(args)
    publish(report, args.out)


if __name__ == "__main__":
    main()
