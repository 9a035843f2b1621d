"""Soak test: N real releases SIGKILLed at random points, rerun, and checked.

Each trial copies a template ledger (with its noise key), starts
`privpipe release curves|streams` as a subprocess, kills it with SIGKILL either
at a random fault point (PRIVPIPE_FAULT_AT, PRIVPIPE_FAULT_MODE=kill) or from
outside after a random delay, reruns the same --release-id to completion and
compares against an uninterrupted run of the same release id on another copy
of the template (see tests/reliability/harness.py for the exact checks).

    .venv/bin/python benchmarks/soak.py --trials 20

prints one row per trial and ends with exactly one line
``N trials, L lost, D double-charged, U unverifiable, M mismatched outputs``.
By default all subprocesses share one loopback Prefect server (``--server
ephemeral`` gives each its own temporary server, as a bare `privpipe` run
does: slower, same checks). Exit status 0 only when every count is 0.
"""

from __future__ import annotations

import argparse
import random
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# benchmarks/ holds folders named like the project's packages (benchmarks/flows/):
# take the script's own folder off the path so `flows` is the project's package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "reliability"))

import harness  # noqa: E402

from flows.faults import POINTS  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plan(trials: int, rng: random.Random) -> list[tuple[str, str | None, bool]]:
    """(kind, fault point or None, delay kill?) per trial: half points, half delays."""
    plan = []
    for i in range(trials):
        kind = "curves" if i % 2 == 0 else "streams"
        if i % 4 in (0, 1):
            plan.append((kind, rng.choice(POINTS), False))
        else:
            plan.append((kind, None, True))
    return plan


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print the per-trial table and the summary line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="Keep trial directories here (default: a temporary directory).")
    ap.add_argument("--server", choices=("shared", "ephemeral"), default="shared")
    args = ap.parse_args(argv)
    if args.trials < 1:
        ap.error("--trials must be >= 1")
    rng = random.Random(args.seed)
    # `kill <pid>` must still stop the shared Prefect server (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="privpipe-soak-")
        root = Path(tmp.name)
    else:
        root = args.workdir
        root.mkdir(parents=True, exist_ok=True)
    server = (harness.PrefectServer(root / "prefect-server", _free_port())
              if args.server == "shared" else None)
    results: list[harness.TrialResult] = []
    start = time.monotonic()
    try:
        if server is not None:
            server.__enter__()
        setup = harness.make_setup(root, api_url=server.url if server else None)
        refs = {}
        for kind in ("curves", "streams"):
            refs[kind] = harness.reference_run(setup, kind, f"soak-{kind}")
            print(f"reference {kind}: {refs[kind].seconds:.1f} s, "
                  f"{len(refs[kind].users)} users, files {sorted(refs[kind].digest)}", flush=True)
        print(f"{'trial':>5}  {'kind':<8} {'fault':<28} {'killed':<6} "
              f"{'ledger after the kill':<34} {'result':<6} notes", flush=True)
        for i, (kind, point, by_delay) in enumerate(_plan(args.trials, rng)):
            ref = refs[kind]
            # somewhere inside the release: 10-90 % of the uninterrupted run's time
            delay = max(0.5, rng.uniform(0.1, 0.9) * ref.seconds) if by_delay else None
            try:
                res = harness.run_trial(setup, ref, f"trial-{i:03d}", fault_at=point,
                                        kill_after=delay)
            except Exception as err:  # noqa: BLE001 - a ledger the checks cannot read
                res = harness.TrialResult(kind, point or f"delay:{delay:.2f}s", killed=False,
                                          unverifiable=True,
                                          notes=[f"check failed: {type(err).__name__}: {err}"])
            results.append(res)
            verdict = "ok" if res.ok else "FAIL"
            print(f"{i:>5}  {kind:<8} {res.fault:<28} {str(res.killed):<6} "
                  f"{res.after_kill:<34} {verdict:<6} {'; '.join(res.notes)}", flush=True)
        # the uninterrupted run must be reproducible over the whole soak: if the
        # code changed under a running soak, its mismatches mean nothing
        for kind, ref in refs.items():
            again = harness.reference_run(setup, kind, ref.release_id, tag="end")
            if again.digest != ref.digest:
                print(f"WARNING: the uninterrupted {kind} run changed during the soak "
                      "(code changed?); rerun the soak", flush=True)
    finally:
        if server is not None:
            server.__exit__()
        if tmp is not None:
            tmp.cleanup()
    print(f"elapsed {time.monotonic() - start:.0f} s", flush=True)
    line = harness.summary_line(results)
    print(line, flush=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
