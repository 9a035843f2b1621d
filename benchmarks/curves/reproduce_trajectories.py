"""Reproduce paper Fig. 10 on the bundled AIS trajectories: PrivFuncSeg vs the baseline.

Curves: AIS tracks of New York Harbor (data/SOURCES.md) projected to metres by
``data.loaders.ais_curves``; curves with >= 100 points lasting <= 12 h (as the
paper's 12-hour taxi window), a seeded sample of ``--curves`` of them. Methods:
PrivFuncSeg (linear basis, ReduceSeg on), the same release after the continuity
projection, the "LS approximation" (least squares on the released breakpoints,
no noise: not private, for reference), and the baseline [LY23] with the oracle
best k in {N/10, N/5} (unsmoothed) and best (k, s), s in {k/20, k/10}
(smoothed). GP (ε) and CGP (ρ = ε²/2, the CGP level an ε-GP mechanism
satisfies, Lemma C.1). Errors are dist₂(q̃, q)/‖q − q̄‖₂ (q̄ the time mean:
the raw coordinates sit ~7.7e6 m from the projection origin, which would make
every normalised error ~1000x smaller); all mechanisms are translation
equivariant, so centring changes only the normaliser.

Run: .venv/bin/python benchmarks/curves/reproduce_trajectories.py [--quick] [--runs 30]
"""

from __future__ import annotations

import argparse
import time

import _common as C  # noqa: I001
import numpy as np

from mechanisms.curves import baseline_points, continuity_projection, least_squares, privfuncseg
from mechanisms.metrics import l2_error, l2_norm

GRID = [(10, "1"), (10, "k/20"), (10, "k/10"), (5, "1"), (5, "k/20"), (5, "k/10")]


def _s(k: int, rule: str) -> int:
    return {"1": 1, "k/20": max(1, round(k / 20)), "k/10": max(1, round(k / 10))}[rule]


def _labels() -> list[str]:
    return [f"baseline k=N/{d} s={r}" if r != "1" else f"baseline k=N/{d} s=1" for d, r in GRID]


def _one_curve(args: tuple) -> dict[str, np.ndarray]:
    idx, t, v, eps_grid, runs, seed = args
    tmean = np.trapezoid(v, t, axis=0) / (t[-1] - t[0])
    norm = l2_norm(t, v - tmean)
    n = t.size
    methods = ["PrivFuncSeg", "PrivFuncSeg (continuous)", "LS approximation", *_labels()]
    out = {m: np.zeros((2, len(eps_grid), runs)) for m in methods}
    for a, notion in enumerate(("gp", "cgp")):
        for e, eps in enumerate(eps_grid):
            kw = {"epsilon": eps} if notion == "gp" else {"rho": eps * eps / 2}
            for r in range(runs):
                rng = np.random.default_rng([seed, idx, a, e, r])
                f = privfuncseg(t, v, rng=rng, **kw)
                out["PrivFuncSeg"][a, e, r] = l2_error(t, v, f) / norm
                g = continuity_projection(f)
                out["PrivFuncSeg (continuous)"][a, e, r] = l2_error(t, v, g) / norm
                fit = least_squares(t, v, "linear", breakpoints=f.breakpoints)
                out["LS approximation"][a, e, r] = l2_error(t, v, fit) / norm
                for (d, rule), label in zip(GRID, _labels(), strict=True):
                    k = max(2, n // d)
                    b = baseline_points(t, v, k, smooth=_s(k, rule), rng=rng, **kw)
                    out[label][a, e, r] = l2_error(t, v, b) / norm
    return out


def _load(time_unit: str, n_curves: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from data.loaders import ais_curves

    df = ais_curves(time_unit)
    horizon = {"s": 12 * 3600.0, "h": 12.0}[time_unit]
    curves = []
    for _, g in df.groupby(["user_id", "curve_id"], sort=True):
        t = g["t"].to_numpy(dtype=np.float64)
        if t.size >= 100 and t[-1] - t[0] <= horizon:
            curves.append((t, g[["x", "y"]].to_numpy(dtype=np.float64)))
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(curves), size=min(n_curves, len(curves)), replace=False))
    return [curves[i] for i in pick], len(curves)


def run(time_unit: str, eps_grid: list[float], n_curves: int, runs: int, seed: int) -> str:
    curves, eligible = _load(time_unit, n_curves, seed)
    t0 = time.perf_counter()
    results = C.parallel_map(
        _one_curve, [(i, t, v, eps_grid, runs, seed) for i, (t, v) in enumerate(curves)]
    )
    elapsed = time.perf_counter() - t0
    methods = list(results[0])
    labels = _labels()
    text = [
        f"## AIS trajectories, time unit = **{time_unit}**, values in metres\n",
        f"{len(curves)} of {eligible} eligible curves (>= 100 points, <= 12 h), {runs} runs "
        f"each; points per curve: median {int(np.median([c[0].size for c in curves]))}; "
        f"{elapsed:.0f} s.\n",
    ]
    for a, notion in enumerate(("gp", "cgp")):
        l2 = {m: np.array([np.mean([res[m][a, e] for res in results]) for e in
                           range(len(eps_grid))]) for m in methods}
        sq = {m: np.array([np.mean([res[m][a, e] ** 2 for res in results]) for e in
                           range(len(eps_grid))]) for m in methods}
        s_l2 = C.summarise(l2, labels)
        s_sq = C.summarise(sq, labels)
        best_base = np.minimum(s_l2["baseline (best k)"], s_l2["baseline smoothed (best k, s)"])
        best_config = [min(labels, key=lambda m, e=e: l2[m][e]) for e in range(len(eps_grid))]
        par = "ε" if notion == "gp" else "ρ = ε²/2"
        text.append(f"\n### {notion.upper()} ({par}), time unit {time_unit}\n")
        header = [f"ε [1/(m·{time_unit}^½)]", *[f"{m} L2" for m in s_l2], "ratio best baseline / "
                  "PrivFuncSeg", "best baseline config"]
        rows = []
        for e, eps in enumerate(eps_grid):
            rows.append([C.fmt(eps), *[C.fmt(s_l2[m][e]) for m in s_l2],
                         C.fmt(best_base[e] / s_l2["PrivFuncSeg"][e]), best_config[e]])
        text.append(C.markdown_table(header, rows))
        text.append("\nMean normalised squared L2 error (functional MSE):\n")
        header2 = [f"ε [1/(m·{time_unit}^½)]", *[f"{m} L2²" for m in s_sq]]
        rows2 = [[C.fmt(eps), *[C.fmt(s_sq[m][e]) for m in s_sq]]
                 for e, eps in enumerate(eps_grid)]
        text.append(C.markdown_table(header2, rows2))
        C.plot_lines(
            C.OUT / f"trajectories_{notion}_{time_unit}.png",
            np.array(eps_grid),
            s_l2,
            xlabel=f"ε (GP; CGP uses ρ = ε²/2), time in {time_unit}",
            ylabel="mean normalised L2 error",
            title=f"AIS trajectories, {notion.upper()}, time unit {time_unit}",
        )
    return "\n".join(text) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 curves, 2 runs")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--curves", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    runs, n_curves = (2, 4) if args.quick else (args.runs, args.curves)
    eps_s = [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    parts = ["# Curves reproduction: AIS trajectories (paper Fig. 10)\n", __doc__ or ""]
    parts.append(run("s", eps_s, n_curves, runs, args.seed))
    # same protection in hours: distances shrink by 60, so ε_h = 60·ε_s
    parts.append(run("h", [60 * e for e in eps_s], n_curves, runs, args.seed))
    path = C.write("trajectories.md", "\n".join(parts))
    print("\n".join(parts[2:]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
