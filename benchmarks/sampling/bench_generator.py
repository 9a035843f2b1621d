"""Benchmark: the keyed ChaCha20 release generator against the PCG64 it replaced.

Three measurements, each pair side by side in one run (the machine is shared):

1. raw draws: seconds for 10^7 standard normals, uniforms and Gamma(8) draws,
   and for creating 10^5 generators (one per user of a release);
2. `privpipe demo` (four releases + audit) into a temp dir;
3. `benchmarks/flows/bench_flows.py`'s flow run (release_curves, PrivFuncSeg)
   on --users synthetic users x 500 points.

For 2 and 3 each run is a fresh child process; "pcg64" replaces
`tasks.privatize.release_generator` by `np.random.default_rng` (the generator
before this change) in that child only. Runs alternate pcg64 / chacha20
`--rounds` times; the table gives wall and CPU seconds (user + system) per run
and the chacha20/pcg64 ratios of the medians.

    nice -n 10 .venv/bin/python benchmarks/sampling/bench_generator.py [--users 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "flows"))

import bench_flows  # noqa: E402

PATCH = r'''
import sys
sys.path.insert(0, {root!r})
if {generator!r} == "pcg64":
    import numpy as np
    import tasks.privatize
    tasks.privatize.release_generator = np.random.default_rng
'''

DEMO = r'''
import json, resource, sys, time
t0 = time.perf_counter()
sys.argv = ["privpipe", "demo", "--out", sys.argv[1] + "/out", "--ledger",
            sys.argv[1] + "/ledger.duckdb"]
from flows.cli import app
try:
    app()
except SystemExit as err:
    if err.code not in (0, None):
        raise
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime}))
'''


def raw_draws() -> list[tuple[str, float, float]]:
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from tasks.keyed_rng import release_generator

    seed = 2**255 + 12345
    makers = {"pcg64": np.random.default_rng, "chacha20": release_generator}
    rows = []
    for name, job in (("10^7 normals", lambda g: g.standard_normal(10**7)),
                      ("10^7 uniforms", lambda g: g.random(10**7)),
                      ("10^7 Gamma(8)", lambda g: g.gamma(8.0, size=10**7))):
        times = {}
        for gen, make in makers.items():
            g = make(seed)
            t0 = time.perf_counter()
            job(g)
            times[gen] = time.perf_counter() - t0
        rows.append((name, times["pcg64"], times["chacha20"]))
    times = {}
    for gen, make in makers.items():
        t0 = time.perf_counter()
        for u in range(10**5):
            make(seed + u).standard_normal(4)
        times[gen] = time.perf_counter() - t0
    rows.append(("10^5 generators (4 draws each)", times["pcg64"], times["chacha20"]))
    return rows


def run_child(code: str, generator: str, *args: str) -> dict:
    src = PATCH.format(root=str(ROOT), generator=generator) + code
    env = dict(os.environ, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")
    proc = subprocess.run([sys.executable, "-c", src, *args], capture_output=True, text=True,
                          check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{generator} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print("| raw draws | pcg64 (s) | chacha20 (s) | ratio |\n|---|---|---|---|")
    for name, a, b in raw_draws():
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="privpipe-bench-gen-") as tmp:
        base = Path(tmp)
        csv = base / "in.csv"
        bench_flows.write_csv(csv, args.users, 500)
        for r in range(args.rounds):
            for gen in ("pcg64", "chacha20"):
                work = base / f"demo-{gen}-{r}"
                work.mkdir()
                results.setdefault(("demo", gen), []).append(run_child(DEMO, gen, str(work)))
                work = base / f"flow-{gen}-{r}"
                work.mkdir()
                (work / "policy.toml").write_text(bench_flows.POLICY)
                flow_code = bench_flows.CHILD.format(root=str(ROOT))
                results.setdefault(("flow", gen), []).append(
                    run_child(flow_code, gen, "flow", str(csv), str(work)))
    print(f"\n| run ({args.rounds} of each, alternating) | pcg64 wall (s) | chacha20 wall (s) | "
          "wall ratio | pcg64 CPU (s) | chacha20 CPU (s) | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    flow_label = f"release_curves, {args.users:,} users"
    for what, label in (("demo", "privpipe demo"), ("flow", flow_label)):
        a, b = results[(what, "pcg64")], results[(what, "chacha20")]
        wa, wb = (statistics.median(x["wall"] for x in r) for r in (a, b))
        ca, cb = (statistics.median(x["cpu"] for x in r) for r in (a, b))
        print(f"| {label} | {wa:.1f} | {wb:.1f} | {wb / wa:.2f} | {ca:.1f} | {cb:.1f} | "
              f"{cb / ca:.2f} |")
        print("|  per run | " + ", ".join(f"{x['wall']:.1f}" for x in a) + " | "
              + ", ".join(f"{x['wall']:.1f}" for x in b) + " | | "
              + ", ".join(f"{x['cpu']:.1f}" for x in a) + " | "
              + ", ".join(f"{x['cpu']:.1f}" for x in b) + " | |")


if __name__ == "__main__":
    main()
