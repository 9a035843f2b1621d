"""Benchmark: the exact discrete Gaussian against the floating-point samplers.

Measured side by side in one run (the machine is shared; compare ratios):

1. per-coordinate time of one user's noise vector of D coordinates (one call
   per user, as the release draws them) for D = 8, 33, 256, and for 10^5
   coordinates in one call: the float Gaussian (`samplers.gaussian`), the
   spherical Laplace (`samplers.slap`), the exact lattice sampler
   (`discrete_gaussian.cgp_lattice`) and the scalar Fraction sampler it
   replaced (`_fraction_sampler.cgp_lattice`, 8bbd391);
2. whole mechanisms on --curves synthetic curves (500 points each), one
   generator per curve: PrivFuncSeg (batched) and Project-and-Privatize
   (Legendre degree 8) under ρ-CGP with ``noise="gaussian"`` against the
   default exact sampler, and under ε-GP for reference.

    nice -n 10 .venv/bin/python benchmarks/sampling/bench_exact.py [--curves 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "sampling"))

import _fraction_sampler  # noqa: E402

from mechanisms.curves import CurveBatch, privfuncseg_batch  # noqa: E402
from mechanisms.curves.project_and_privatize import project_and_privatize  # noqa: E402
from mechanisms.curves.samplers import gaussian, slap  # noqa: E402
from mechanisms.discrete_gaussian import cgp_lattice  # noqa: E402
from tasks.keyed_rng import release_generator  # noqa: E402

RHO = Fraction(1, 2)


def _per_coordinate(draw, dim: int, calls: int) -> float:
    """Microseconds per coordinate of `calls` draws of `dim` coordinates, one generator each."""
    w = np.random.default_rng(1).normal(size=dim) * 3.0
    gens = [release_generator(1000 + i) for i in range(calls)]
    start = time.perf_counter()
    for g in gens:
        draw(w, g)
    return (time.perf_counter() - start) / (calls * dim) * 1e6


SAMPLERS = {
    "float Gaussian": lambda w, g: w + gaussian(w.size, rng=g),
    "spherical Laplace (GP)": lambda w, g: w + slap(w.size, rng=g),
    "exact lattice (now)": lambda w, g: cgp_lattice(w, rho=RHO, rng=g),
    "exact Fraction (before)": lambda w, g: _fraction_sampler.cgp_lattice(w, rho=RHO, rng=g),
}


def sampler_table() -> list[str]:
    """Rows: µs per coordinate for each sampler and vector size."""
    sizes = [(8, 300), (33, 100), (256, 20), (100_000, 1)]
    rows = ["| sampler | " + " | ".join(f"D = {d:,} (µs/coord)" for d, _ in sizes)
            + " | ratio to float, D = 33 |",
            "|---|" + "---:|" * (len(sizes) + 1)]
    base = None
    for name, draw in SAMPLERS.items():
        cells = []
        for dim, calls in sizes:
            if name.startswith("exact Fraction") and dim > 256:
                cells.append("(not run)")
                continue
            if name.startswith("exact Fraction"):
                calls = max(1, calls // 10)
            cells.append(_per_coordinate(draw, dim, calls))
        if base is None:
            base = cells[1]
        shown = [c if isinstance(c, str) else f"{c:.3g}" for c in cells]
        rows.append(f"| {name} | " + " | ".join(shown) + f" | {cells[1] / base:,.0f}× |")
    return rows


def _curves(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    t = np.linspace(0.0, 10.0, 500)
    return [(t, np.column_stack([np.sin(t * rng.uniform(0.5, 3.0)),
                                 np.cumsum(rng.normal(size=500)) * 0.1]))
            for _ in range(count)]


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def mechanism_table(count: int) -> list[str]:
    """Rows: seconds per mechanism run on `count` curves, float vs exact noise."""
    curves = _curves(count)
    batch = CurveBatch.from_curves(curves)
    gens = lambda: [release_generator(i) for i in range(count)]  # noqa: E731
    runs = {
        "PrivFuncSeg": lambda **kw: privfuncseg_batch(batch, rngs=gens(), **kw),
        "P&P Legendre 8": lambda **kw: [
            project_and_privatize(t, v, "legendre", degree=8, rng=g, **kw)
            for (t, v), g in zip(curves, gens(), strict=True)],
    }
    rows = [f"| mechanism ({count:,} curves) | GP (s) | CGP float Gaussian (s) | "
            "CGP exact (s) | exact / float |", "|---|---:|---:|---:|---:|"]
    for name, run in runs.items():
        gp = _seconds(lambda run=run: run(epsilon=1.0))
        flt = _seconds(lambda run=run: run(rho=RHO, noise="gaussian"))
        exact = _seconds(lambda run=run: run(rho=RHO))
        rows.append(f"| {name} | {gp:.2f} | {flt:.2f} | {exact:.2f} | {exact / flt:.2f}× |")
    return rows


def main() -> None:
    """Print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curves", type=int, default=2000)
    args = parser.parse_args()
    print("\n".join(sampler_table()))
    print()
    print("\n".join(mechanism_table(args.curves)))


if __name__ == "__main__":
    main()
