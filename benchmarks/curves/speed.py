"""Speed of PrivFuncSeg against one ``np.cumsum`` pass, before and after, in one run.

Inputs (seeded 2-D random walks on a 1 s grid, ε = 1 GP, linear basis,
ReduceSeg on): 1,000 curves x 1,000 points, 10,000 curves x 500 points, one
curve of 10^6 points (and 10^5). Each input is timed in a child process per
code tree: this tree ("after", `privfuncseg_batch` over the whole input) and,
with ``--before DIR``, another checkout ("before": e.g. ``git worktree add
/tmp/before main``; its `privfuncseg_batch` if it has one, else `privfuncseg`
per curve). Before and after alternate, each child times the mechanism and
one ``np.cumsum(values, axis=0)`` over the same (N, 2) array side by side,
best of ``--repeat``, every run with fresh generators (one per curve, seeded
by its index). The generators are the mechanism's input: they are made before
its timing and timed apart ("generators CPU ms", about 9 us each with
``default_rng``; a release's keyed ChaCha20 generators are timed by
`benchmarks/flows/stage_costs.py`), and the ratio with them is printed too.
Until 2026-12-04 the timed mechanism included making the generators.
Times are CPU seconds of the process (``time.process_time``:
on a shared machine wall time follows the other load); the wall-clock ratio
is printed next to it. Goals (issue #16): <= 10x one cumsum for the two
batches, <= 15x for the 10^6-point curve. The continuity projection of the
10^6-point output is timed too.

Run: .venv/bin/python benchmarks/curves/speed.py [--before DIR] [--quick] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import _common as C  # noqa: I001

CHILD = r"""
import json, sys, time
root, count, n, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root)
import numpy as np
import mechanisms.curves as mc

def walk(n, seed):
    rng = np.random.default_rng(seed)
    return np.arange(n, dtype=np.float64), np.cumsum(rng.standard_normal((n, 2)), axis=0)

curves = [walk(n, 10_000 + i) for i in range(count)]
batched = hasattr(mc, "privfuncseg_batch")
if batched:
    batch = mc.CurveBatch.from_curves(curves)
    values = batch.values
else:
    values = np.concatenate([v for _, v in curves])

def fresh():
    return [np.random.default_rng(i) for i in range(count)]

def run(rngs):
    if batched:
        out = mc.privfuncseg_batch(batch, rngs=rngs, epsilon=1.0)
        return [out.function(0)] if count == 1 else None, out.diagnostics["segments"]
    fns = [mc.privfuncseg(t, v, epsilon=1.0, rng=r) for (t, v), r in zip(curves, rngs)]
    return fns[:1], [f.diagnostics["segments"] for f in fns]

def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - w0, out

best = {"mech": [1e9, 1e9], "cumsum": [1e9, 1e9], "cont": [1e9, 1e9], "gens": [1e9, 1e9]}
first, segments = run(fresh())
for _ in range(repeat):
    rngs = fresh()  # the mechanism's input, made outside its timing (and timed apart)
    for name, fn in (("mech", lambda: run(rngs)), ("cumsum", lambda: np.cumsum(values, axis=0)),
                     ("gens", fresh)):
        cpu, wall, _ = timed(fn)
        best[name] = [min(best[name][0], cpu), min(best[name][1], wall)]
    if count == 1:
        cpu, wall, _ = timed(lambda: mc.continuity_projection(first[0]))
        best["cont"] = [min(best["cont"][0], cpu), min(best["cont"][1], wall)]
print(json.dumps({"best": best, "segments": float(np.mean(segments)), "batched": batched,
                  "k_bar": int(first[0].diagnostics["k_bar"]) if count == 1 else None}))
"""


def measure(root: Path, count: int, n: int, repeat: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(count), str(n),
                           str(repeat)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({root}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(label: str, tree: str, count: int, n: int, res: dict) -> list[str]:
    mech_cpu, mech_wall = res["best"]["mech"]
    cum_cpu, cum_wall = res["best"]["cumsum"]
    cont = res["best"]["cont"][0]
    gens = res["best"]["gens"][0]
    return [label, tree, "batch" if res["batched"] else "per curve", f"{mech_cpu:.3f}",
            f"{count * n / mech_cpu:.3g}", f"{cum_cpu * 1e3:.2f}", f"{mech_cpu / cum_cpu:.1f}",
            f"{mech_wall / cum_wall:.1f}", f"{gens * 1e3:.1f}",
            f"{(mech_cpu + gens) / cum_cpu:.1f}", f"{res['segments']:.0f}",
            "-" if cont >= 1e9 else f"{cont * 1e3:.1f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="checkout of the code to compare with")
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cases = ([(100, 1000), (1000, 500), (1, 10**5)] if args.quick else
             [(1000, 1000), (10_000, 500), (1, 10**5), (1, 10**6)])
    trees = [("after", C.ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    rows = []
    for count, n in cases:
        label = f"{count:,} curve{'s' if count > 1 else ''} x {n:,} points"
        results = {name: measure(root, count, n, args.repeat) for name, root in trees}
        for name, _ in trees:
            rows.append(row(label, name, count, n, results[name]))
        print(rows[-1], flush=True)
    header = ["input", "code", "calls", "CPU s", "points/CPU s", "np.cumsum CPU ms",
              "ratio to cumsum (CPU)", "ratio (wall)", "generators CPU ms",
              "ratio with generators (CPU)", "segments (mean)", "continuity ms"]
    table = C.markdown_table(header, rows)
    text = "# Curves speed: PrivFuncSeg\n\n" + (__doc__ or "") + "\n" + table + "\n"
    path = C.write("speed.md", text)
    print(table)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
