"""Speed of PrivFuncSeg: one 2-D curve of 1e5 and 1e6 points, and 1,000 curves of 1,000.

Prints points/s and the ratio of the mechanism's time to one ``np.cumsum`` pass
over the same (N, 2) array, measured side by side in the same run (best of
``--repeat``). Goal: cost linear in N (one pass over the samples builds the
dyadic moment tree, no pass per SVT level) and >= 1e6 points/s on one core.
Curves: seeded 2-D random walks on a 1 s grid (ε = 1 GP, linear basis,
ReduceSeg on). Also times the continuity projection on the output.

Run: .venv/bin/python benchmarks/curves/speed.py [--quick] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import _common as C  # noqa: I001
import numpy as np

from mechanisms.curves import continuity_projection, privfuncseg


def _walk(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.arange(n, dtype=np.float64), np.cumsum(rng.standard_normal((n, 2)), axis=0)


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [10**4, 10**5] if args.quick else [10**5, 10**6]
    many = (100, 1000) if args.quick else (1000, 1000)
    rows = []
    for n in sizes:
        t, v = _walk(n, n)
        rng = np.random.default_rng(0)
        f = privfuncseg(t, v, epsilon=1.0, rng=rng)
        mech = _best(lambda t=t, v=v: privfuncseg(t, v, epsilon=1.0,
                                                  rng=np.random.default_rng(1)), args.repeat)
        cum = _best(lambda v=v: np.cumsum(v, axis=0), args.repeat)
        cont = _best(lambda f=f: continuity_projection(f), args.repeat)
        rows.append([f"1 curve x {n:,} points", f"{mech:.3f}", f"{n / mech:.3g}",
                     f"{cum * 1e3:.2f}", f"{mech / cum:.0f}", str(f.diagnostics["k_bar"]),
                     str(f.diagnostics["segments"]), f"{cont * 1e3:.1f}"])
    count, n = many
    curves = [_walk(n, 10_000 + i) for i in range(count)]
    stacked = np.concatenate([c[1] for c in curves])

    def run_many() -> None:
        rng = np.random.default_rng(2)
        for t, v in curves:
            privfuncseg(t, v, epsilon=1.0, rng=rng)

    mech = _best(run_many, args.repeat)
    cum = _best(lambda: np.cumsum(stacked, axis=0), args.repeat)
    segs = np.mean([privfuncseg(t, v, epsilon=1.0, rng=np.random.default_rng(3))
                    .diagnostics["segments"] for t, v in curves[:50]])
    rows.append([f"{count:,} curves x {n:,} points", f"{mech:.3f}", f"{count * n / mech:.3g}",
                 f"{cum * 1e3:.2f}", f"{mech / cum:.0f}", "-", f"{segs:.0f} (mean)", "-"])
    header = ["input", "privfuncseg s", "points/s", "np.cumsum ms", "ratio to cumsum",
              "k̄", "segments", "continuity ms"]
    table = C.markdown_table(header, rows)
    text = "# Curves speed: PrivFuncSeg\n\n" + (__doc__ or "") + "\n" + table + "\n"
    path = C.write("speed.md", text)
    print(table)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
