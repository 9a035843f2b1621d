"""Reproduce paper Fig. 8 on synthetic Gaussian mixtures: PrivFuncSelect vs the baseline.

Data: ``data.synthetic.gaussian_mixture_curves`` (50 curves on [0, 100], 1-5
bumps, 1001 points). PrivFuncSelect over the 33 orthonormal Legendre
polynomials of degree <= 32 (same nested spans as the paper's monomials,
spec §1.6), and for reference PrivFuncSeg (linear basis) on the same curves.
Baseline [LY23]: k in {10, 20, 50, 100}, s in {1, k/10}, oracle best per ε.
GP (ε) and CGP (ρ = ε²/2). Errors are dist₂(q̃, q)/‖q‖₂.

Run: .venv/bin/python benchmarks/curves/reproduce_mixtures.py [--quick] [--runs 30]
"""

from __future__ import annotations

import argparse
import time

import _common as C  # noqa: I001
import numpy as np

from mechanisms.curves import baseline_points, privfuncseg, privfuncselect
from mechanisms.metrics import l2_error, l2_norm


def _labels() -> list[str]:
    return [f"baseline k={k} s={s}" for k, s in C.baseline_grid("mixture", 0)]


def _one_curve(args: tuple) -> tuple[dict[str, np.ndarray], list[int]]:
    idx, t, v, eps_grid, runs, seed = args
    norm = l2_norm(t, v)
    methods = ["PrivFuncSelect", "PrivFuncSeg (linear)", *_labels()]
    out = {m: np.zeros((2, len(eps_grid), runs)) for m in methods}
    selected = np.zeros((2, len(eps_grid), runs))
    for p, notion in enumerate(("gp", "cgp")):
        for e, eps in enumerate(eps_grid):
            kw = {"epsilon": eps} if notion == "gp" else {"rho": eps * eps / 2}
            for r in range(runs):
                rng = np.random.default_rng([seed, idx, p, e, r])
                f = privfuncselect(t, v, rng=rng, **kw)
                out["PrivFuncSelect"][p, e, r] = l2_error(t, v, f) / norm
                selected[p, e, r] = len(f.diagnostics["selected_terms"])
                g = privfuncseg(t, v, rng=rng, **kw)
                out["PrivFuncSeg (linear)"][p, e, r] = l2_error(t, v, g) / norm
                for (k, s), label in zip(C.baseline_grid("mixture", 0), _labels(), strict=True):
                    b = baseline_points(t, v, k, smooth=s, rng=rng, **kw)
                    out[label][p, e, r] = l2_error(t, v, b) / norm
    return out, selected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 curves, 2 runs")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--curves", type=int, default=50)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    from data.synthetic import gaussian_mixture_curves

    n_curves, runs = (4, 2) if args.quick else (args.curves, args.runs)
    df = gaussian_mixture_curves(n_curves, seed=args.seed)
    curves = [(g["t"].to_numpy(), g["value"].to_numpy()[:, None])
              for _, g in df.groupby("user_id", sort=True)]
    eps_grid = [float(x) for x in np.logspace(-0.5, 3.5, 6)]
    t0 = time.perf_counter()
    res = C.parallel_map(_one_curve, [(i, t, v, eps_grid, runs, args.seed)
                                      for i, (t, v) in enumerate(curves)])
    elapsed = time.perf_counter() - t0
    results = [r[0] for r in res]
    labels = _labels()
    methods = list(results[0])
    parts = ["# Curves reproduction: Gaussian mixtures, PrivFuncSelect (paper Fig. 8)\n",
             __doc__ or "",
             f"\n{len(curves)} curves x {runs} runs on [0, 100] (time unit: 1, values "
             f"dimensionless); {elapsed:.0f} s.\n"]
    for p, notion in enumerate(("gp", "cgp")):
        l2 = {m: np.array([np.mean([r[m][p, e] for r in results]) for e in range(len(eps_grid))])
              for m in methods}
        sq = {m: np.array([np.mean([r[m][p, e] ** 2 for r in results])
                           for e in range(len(eps_grid))]) for m in methods}
        s_l2, s_sq = C.summarise(l2, labels), C.summarise(sq, labels)
        best = np.minimum(s_l2["baseline (best k)"], s_l2["baseline smoothed (best k, s)"])
        best_cfg = [min(labels, key=lambda m, e=e: l2[m][e]) for e in range(len(eps_grid))]
        sel = [np.mean([r[1][p, e] for r in res]) for e in range(len(eps_grid))]
        par = "ε" if notion == "gp" else "ρ = ε²/2"
        parts.append(f"\n## {notion.upper()} ({par}); time unit 1 on [0, 100]\n")
        header = ["ε", *[f"{m} L2" for m in s_l2], "ratio best baseline / PrivFuncSelect",
                  "mean #terms selected", "best baseline config"]
        rows = [[C.fmt(eps), *[C.fmt(s_l2[m][e]) for m in s_l2],
                 C.fmt(best[e] / s_l2["PrivFuncSelect"][e]), f"{sel[e]:.1f}", best_cfg[e]]
                for e, eps in enumerate(eps_grid)]
        parts.append(C.markdown_table(header, rows))
        parts.append("\nMean normalised squared L2 error (functional MSE):\n")
        parts.append(C.markdown_table(
            ["ε", *[f"{m} L2²" for m in s_sq]],
            [[C.fmt(eps), *[C.fmt(s_sq[m][e]) for m in s_sq]] for e, eps in enumerate(eps_grid)],
        ))
        C.plot_lines(C.OUT / f"mixtures_{notion}.png", np.array(eps_grid), s_l2,
                     xlabel="ε (GP; CGP uses ρ = ε²/2)", ylabel="mean normalised L2 error",
                     title=f"Gaussian mixtures on [0, 100], {notion.upper()}")
    path = C.write("mixtures.md", "\n".join(parts))
    print("\n".join(parts[2:]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
