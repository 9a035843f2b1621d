"""A served backup against the embedded one, and what it costs the releases running meanwhile.

Builds a ledger of `--users` users (one reserve of `--batch` users per
release), then in the same run:

* **embedded**: `privpipe ledger backup --ledger FILE` (the service stopped),
  wall time of `Ledger.backup`, best of `--repeats`;
* **served**: `privpipe ledger backup --ledger https://...` through a running
  `ledger serve` (snapshot, verification, tar stream, client verification),
  best of `--repeats`;
* **reserve latency** of a releaser reserving one user at a time through the
  service, alone and while served backups run back to back (median and max).

    PYTHONPATH=. .venv/bin/python benchmarks/ledger/backup_served.py [--users 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "ledger"))


def _build(path: Path, users: int, batch: int) -> None:
    from ledger_helpers import POLICY

    from ledger import Ledger, Request
    from schemas.policy import parse_policy

    led = Ledger.init(path, actor="bench")
    led.apply_policy(parse_policy(POLICY, source="bench"))
    for start in range(0, users, batch):
        led.reserve(f"r{start}", [Request(f"u{i}", "ais", amount=Fraction(1, 1000))
                                  for i in range(start, min(users, start + batch))],
                    mechanism="bench", parameters={})


def _best(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def _latencies(remote, seconds: float, tag: str) -> list[float]:
    from ledger import Request

    lat, end, i = [], time.monotonic() + seconds, 0
    while time.monotonic() < end:
        t = time.perf_counter()
        remote.reserve(f"{tag}-{i}", [Request(f"{tag}-{i}", "ais", amount=Fraction(1, 1000))],
                       mechanism="bench", parameters={})
        lat.append(time.perf_counter() - t)
        i += 1
    return lat


def main() -> None:
    """Run the measurements and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    from served_helpers import start_server

    from ledger import Ledger
    from ledger.remote import RemoteLedger
    from ledger.remote_backup import fetch_backup

    tmp = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    path = tmp / "led" / "ledger.duckdb"
    _build(path, a.users, a.batch)
    n = [0]

    def embedded() -> None:
        n[0] += 1
        Ledger(path).backup(tmp / f"e{n[0]}")

    t_embedded = _best(embedded, a.repeats)
    served = start_server(path, tmp)
    try:
        os.environ |= {"PRIVPIPE_LEDGER_TOKEN": served.tokens["adm"],
                       "PRIVPIPE_LEDGER_CA": str(served.ca)}

        def through() -> None:
            n[0] += 1
            fetch_backup(served.url, tmp / f"s{n[0]}")

        t_served = _best(through, a.repeats)
        rel = RemoteLedger(served.url, token=served.tokens["rel-a"], ca=str(served.ca))
        alone = _latencies(rel, a.seconds, "alone")
        stop, backups = threading.Event(), [0]

        def loop() -> None:
            while not stop.is_set():
                through()
                backups[0] += 1

        th = threading.Thread(target=loop)
        th.start()
        during = _latencies(rel, a.seconds, "during")
        stop.set()
        th.join()
    finally:
        served.stop()
    size = (tmp / "e1" / "ledger.duckdb").stat().st_size
    print(f"ledger: {a.users:,} users, snapshot {size / 2**20:.1f} MiB")
    print("| measurement | value |\n|---|---|")
    print(f"| embedded backup (best of {a.repeats}) | {t_embedded:.2f} s |")
    print(f"| served backup (best of {a.repeats}) | {t_served:.2f} s |")
    print(f"| served / embedded | {t_served / t_embedded:.2f} |")
    for name, lat in (("alone", alone), (f"during {backups[0]} served backups", during)):
        print(f"| reserve latency {name}: median / max ({len(lat)} reserves) | "
              f"{statistics.median(lat) * 1000:.1f} / {max(lat) * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
