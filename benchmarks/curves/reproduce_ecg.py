"""Reproduce paper Fig. 6 on the bundled ECG: Project-and-Privatize (sinc) vs the baseline.

Data: MIT-BIH record 208 lead MLII at 100 Hz cut into thirty 10 s records
(``data.loaders.ecg_curves``; the paper used PTB-XL lead II, 100 Hz, 10 s).
As in the paper the values are in µV and time is scaled by 80 (T = 799.2, the
last sample; unit 1/80 s, sample spacing dt = 0.8). Project-and-Privatize runs
with three sinc bases φ_j(t) = sinc((t − jh)/h)/√h (Gram = I over R):

* the paper's fixed basis, h = 1, j = 1..800 (m = 800, whatever ε);
* a fixed basis tied to the sample spacing, h = dt = 0.8, centres 0..T (m = 1000);
* the budget rule `mechanisms.curves.sinc_basis_for_budget`: h ∈ dt·{1/16 .. 16}
  minimising the public model A²(h/dt)³ + B²(h/dt) + E‖Z‖²/b² (b = ε, or √(2ρ)),
  centres h·Z ∩ [0, T], at most 20 000 terms. A = 440 and B = 225 µV·(s/80)^½ are
  the least-squares fit of that model to the noise-free approximation errors
  of records 0-9 (a public prior in a deployment; here tuned on 10 of the 30
  records, in the spirit of the paper's hand-picked m = 800).

Baseline [LY23]: k in {100, 200, 800}, s in {1, k/20, k/10}, oracle best per ε.
GP (ε) and CGP (ρ = ε²/2), each on its own log-spaced ε grid. Errors are
dist₂(q̃, q)/‖q‖₂ over [0, T].

Exact errors without quadrature per term: on the cells of a lattice that holds
the sample grid and the sinc centres the curve is linear and the expansion
smooth; 8 Gauss-Legendre nodes per cell, the expansion evaluated at all nodes by
FFT convolution (``_sinc_lattice.SincLattice``). Checked against
`mechanisms.metrics.l2_error` (printed). The noise is drawn by
`privatize_coefficients`, the noise step of `project_and_privatize`; the rule's
basis is checked to be the one `project_and_privatize(..., spacing="auto")` uses.

Run: .venv/bin/python benchmarks/curves/reproduce_ecg.py [--quick] [--runs 30]
"""

from __future__ import annotations

import argparse
import math
import time

import _common as C  # noqa: I001
import numpy as np
from _sinc_lattice import SincLattice

from mechanisms.curves import (
    SincBasis,
    baseline_points,
    privatize_coefficients,
    project_and_privatize,
    sinc_basis_for_budget,
)
from mechanisms.metrics import l2_error, l2_norm

SCALE_T = 80.0
DT = 0.8  # 100 Hz in units of 1/80 s
KINK_ERROR = 440.0  # µV·(s/80)^½, fitted on records 0-9 (see docstring)
EDGE_ERROR = 225.0
RULE = {"sample_spacing": DT, "kink_error": KINK_ERROR, "edge_error": EDGE_ERROR}
GRIDS = {"gp": [float(x) for x in np.logspace(-1.5, 3.0, 7)],
         "cgp": [float(x) for x in np.logspace(-3.0, 1.5, 7)]}
PAPER = "P&P sinc h=1 m=800 (paper)"
FIXED = "P&P sinc h=0.8 m=1000"
AUTO = "P&P sinc h(ε) rule"
PP = [PAPER, FIXED, AUTO]

FINDINGS = """
## Findings

**What the paper does (Sec. 3.5, 5.1, App. E.4).** Time ×80 (T = 800), the
normalised sinc(t − j), j = 1..800 (spacing 1 = 12.5 ms, one term per 1/80 s;
the 100 Hz samples are 0.8 apart), the Gram matrix over R (= I), the right-hand
side ∫₀ᵀ q φ_j of the zero extension, noise Z/ε. m = 800 is chosen by hand from
the QRS length ("central zero-crossings ... approximately capture that
length"; "alternatively, sinc functions with appropriately scaled non-integer
zero-crossings"), and it is the same at every ε: the paper has no rule that
grows D with ε. Our `SincBasis` matches this exactly (centres (first + j)h,
1/√h normalisation, Gram = I over R, exact Si/cos inner products with the
piecewise-linear interpolant, tested against quadrature).

**Why the fixed basis stalls.** With D fixed the error cannot fall below the
span's approximation error: 4.05% of the norm for h = 1, 2.92% for h = dt = 0.8
(table above), while the baseline with k = 800 of the 1000 samples reaches 7%.
So the ratio peaks near 8.5x at ε ≈ 1 and falls to 1.7x at large ε. The
floor has two parts: the interpolant's kinks at every sample (out-of-band
energy ∝ h³) and the jumps of the zero extension at 0 and T (∝ h). Padding the
span with centres outside [0, T] helps little (records 0-2, 50 extra terms a
side: 4.13% → 3.87% at h = 1, whose first centre is 1 rather than 0; 3.10% →
3.09% at h = 0.8): the L²(R) projection of a jump rings whatever the centres.

**What changed.** `sinc_basis_for_budget` / ``spacing="auto"`` chooses h from
the budget with a public model (module `mechanisms.curves.sinc_rule`), centres
h·Z ∩ [0, T] (`SincBasis.covering`), so D grows with ε (167 terms at the
smallest ε up to 15 985 at h = dt/16). It never reads the curve, so it costs no
budget. Its two constants are fitted on records 0-9. Against the best spacing
of a similar ladder per ε (an oracle, estimated from the noise-free floors and
the expected noise), the rule's error is within 10% at every ε and equal at
ε ≥ 1 (GP) / ε ≥ 0.03 (CGP).

**Goal (≥ 5x lower mean normalised L2 error at the larger ε).** Met with the
rule for GP at every ε ≥ 1 (8.6x-21x) and for CGP at every ε ≥ 0.03 (10x-23x).
Missed with the paper's fixed basis at large ε (1.7x-2.2x for ε ≥ 31.6 GP,
ε ≥ 1 CGP): that is the approximation floor above. Missed at small budgets
with any basis (GP ε = 0.18: 3.7x; CGP ε = 0.0056: 4.3x), where the noise
dominates and the smoothed baseline is competitive; the goal does not ask for
those. The best method's error spans 0.48 → 0.0033 (GP) and 0.91 → 0.0031
(CGP), not down to 1e-3: at h = 0.05 the floor (0.31%) is mostly the edge
jumps, which shrink only like √h (1e-3 would need h ≈ 0.004, ~2·10⁵ terms, or a boundary
treatment that is not an isometry and would cost budget).

**Before (commit b2173ce, ε grid 10^-1.5..10^2.5 for both notions).** GP:
ε = 0.0316 / 0.2 / 1.26 / 7.94 / 50.1 / 316 → P&P sinc h=1 1.66 / 0.266 /
0.0586 / 0.0411 / 0.0406 / 0.0405, best baseline 2.66 / 0.825 / 0.505 / 0.227 /
0.078 / 0.0701, ratio 1.6 / 3.1 / 8.6 / 5.5 / 1.9 / 1.7. CGP (same ε):
ratio 10.1 / 5.4 / 1.9 / 1.7 / 1.7 / 1.7.
"""


def _amount(notion: str, eps: float) -> float:
    return eps if notion == "gp" else eps * eps / 2


def _budget_kw(notion: str, eps: float) -> dict[str, float]:
    return {"epsilon": eps} if notion == "gp" else {"rho": eps * eps / 2}


def _bases(t_end: float) -> dict[tuple[str, int], SincBasis]:
    """(method, notion, ε index) → basis; fixed bases do not depend on the budget."""
    out = {}
    for notion, grid in GRIDS.items():
        for e, eps in enumerate(grid):
            out[(PAPER, notion, e)] = SincBasis(800, spacing=1.0, first=1)
            out[(FIXED, notion, e)] = SincBasis.covering(0.0, t_end, DT)
            out[(AUTO, notion, e)] = sinc_basis_for_budget(0.0, t_end, **RULE,
                                                           **_budget_kw(notion, eps))
    return out


def _key(b: SincBasis) -> tuple[int, float, int]:
    return (b.m, b.spacing, b.first)


def _labels() -> list[str]:
    return [f"baseline k={k} s={s}" for k, s in C.baseline_grid("ecg", 0)]


def _one_record(args: tuple) -> dict:
    idx, t, v, runs, seed = args
    norm = l2_norm(t, v)
    bases = _bases(float(t[-1]))
    fits = {}
    for b in {_key(b): b for b in bases.values()}.values():
        lat = SincLattice(t, b)
        a = b.inner(t, v)
        resid = lat.curve(t, v[:, 0]) - lat.evaluate(a[:, 0])
        fits[_key(b)] = (lat, a, resid, lat.sq_norm(resid))
    out: dict = {"approx": {k: math.sqrt(f[3]) / norm for k, f in fits.items()}}
    for notion, grid in GRIDS.items():
        res = {m: np.zeros((len(grid), runs)) for m in PP + _labels()}
        for e, eps in enumerate(grid):
            amount = _amount(notion, eps)
            for r in range(runs):
                rng = np.random.default_rng([seed, idx, 0 if notion == "gp" else 1, e, r])
                for method in PP:
                    lat, a, resid, _ = fits[_key(bases[(method, notion, e)])]
                    z = privatize_coefficients(a[None], notion=notion, amount=amount,
                                               rng=rng)[0, :, 0] - a[:, 0]
                    d2 = lat.sq_norm(resid - lat.evaluate(z))
                    res[method][e, r] = math.sqrt(d2) / norm
                for (k, s), label in zip(C.baseline_grid("ecg", 0), _labels(), strict=True):
                    b = baseline_points(t, v, k, smooth=s, rng=rng, **_budget_kw(notion, eps))
                    res[label][e, r] = l2_error(t, v, b) / norm
        out[notion] = res
    return out


def _check(t: np.ndarray, v: np.ndarray) -> float:
    """Largest relative difference between the lattice error and l2_error (two releases)."""
    worst = 0.0
    cases = [(SincBasis(800, spacing=1.0, first=1), {"epsilon": 2.0}),
             ("sinc", {"spacing": "auto", **RULE, "epsilon": GRIDS["gp"][0]})]
    for basis, kw in cases:
        f = project_and_privatize(t, v, basis, rng=np.random.default_rng(0), **kw)
        b = f.basis()
        lat = SincLattice(t, b)
        d = math.sqrt(lat.sq_norm(lat.curve(t, v[:, 0]) - lat.evaluate(f.coefficients[0, :, 0])))
        ref = l2_error(t, v, f)
        worst = max(worst, abs(d - ref) / ref)
    return worst


def _check_rule(t_end: float, t: np.ndarray, v: np.ndarray) -> None:
    """The benchmark's rule basis is the one project_and_privatize picks with spacing='auto'."""
    bases = _bases(t_end)
    for notion, grid in GRIDS.items():
        for e, eps in enumerate(grid):
            f = project_and_privatize(t[:50], v[:50], "sinc", spacing="auto", **RULE,
                                      rng=np.random.default_rng(0), **_budget_kw(notion, eps))
            # same rule on the short domain [0, t[49]]: compare the spacing only
            ref = sinc_basis_for_budget(0.0, float(t[49]), **RULE, **_budget_kw(notion, eps))
            assert f.basis_params["spacing"] == ref.spacing
            assert bases[(AUTO, notion, e)].spacing == sinc_basis_for_budget(
                0.0, t_end, **RULE, **_budget_kw(notion, eps)).spacing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 records, 2 runs")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    from data.loaders import ecg_curves

    df = ecg_curves()
    records = []
    for _, g in df.groupby("user_id", sort=True):
        records.append((g["t"].to_numpy() * SCALE_T, g["value"].to_numpy()[:, None] * 1000.0))
    runs = 2 if args.quick else args.runs
    if args.quick:
        records = records[:3]
    t_all = records[0][0]
    assert all(np.array_equal(r[0], t_all) for r in records)
    t_end = float(t_all[-1])
    t0 = time.perf_counter()
    _check_rule(t_end, *records[0])
    check = _check(*records[0])
    results = C.parallel_map(
        _one_record, [(i, t, v, runs, args.seed) for i, (t, v) in enumerate(records)])
    elapsed = time.perf_counter() - t0
    labels = _labels()
    bases = _bases(t_end)
    parts = [
        "# Curves reproduction: ECG, Project-and-Privatize with sinc (paper Fig. 6)\n",
        __doc__ or "",
        f"\n{len(records)} records x {runs} runs; time scaled x80 (unit: 1/80 s, T = 799.2), "
        f"values in µV; lattice error vs l2_error: relative difference {check:.1e}; "
        f"{elapsed:.0f} s.\n",
    ]
    parts.append(FINDINGS)
    # noise-free approximation floor of every basis used
    keys = sorted({_key(b) for b in bases.values()}, key=lambda k: k[1])
    parts.append("\n## Noise-free approximation error dist₂(P(q), q)/‖q‖₂ (mean over records)\n")
    parts.append(C.markdown_table(
        ["spacing h", "terms m", "first centre", "mean", "min", "max"],
        [[C.fmt(k[1]), str(k[0]), f"{k[2] * k[1]:g}",
          C.fmt(float(np.mean([r["approx"][k] for r in results]))),
          C.fmt(float(np.min([r["approx"][k] for r in results]))),
          C.fmt(float(np.max([r["approx"][k] for r in results])))] for k in keys]))
    for notion, grid in GRIDS.items():
        methods = list(results[0][notion])
        l2 = {m: np.array([np.mean([res[notion][m][e] for res in results])
                           for e in range(len(grid))]) for m in methods}
        sq = {m: np.array([np.mean([res[notion][m][e] ** 2 for res in results])
                           for e in range(len(grid))]) for m in methods}
        s_l2, s_sq = C.summarise(l2, labels), C.summarise(sq, labels)
        best = np.minimum(s_l2["baseline (best k)"], s_l2["baseline smoothed (best k, s)"])
        best_sq = np.minimum(s_sq["baseline (best k)"], s_sq["baseline smoothed (best k, s)"])
        best_cfg = [min(labels, key=lambda m, e=e: l2[m][e]) for e in range(len(grid))]
        par = "ε" if notion == "gp" else "ρ = ε²/2"
        parts.append(f"\n## {notion.upper()} ({par}); time unit 1/80 s, values µV\n")
        parts.append("Mean normalised L2 error; ratios are best baseline / P&P.\n")
        header = ["ε", "rule h (m)", *[f"{m}" for m in s_l2],
                  "ratio (paper basis)", "ratio (h(ε) rule)", "best baseline config"]
        rows = [[C.fmt(eps),
                 f"{C.fmt(bases[(AUTO, notion, e)].spacing)} ({bases[(AUTO, notion, e)].m})",
                 *[C.fmt(s_l2[m][e]) for m in s_l2],
                 C.fmt(best[e] / s_l2[PAPER][e]), C.fmt(best[e] / s_l2[AUTO][e]), best_cfg[e]]
                for e, eps in enumerate(grid)]
        parts.append(C.markdown_table(header, rows))
        parts.append("\nMean normalised squared L2 error (functional MSE):\n")
        parts.append(C.markdown_table(
            ["ε", *[f"{m} L2²" for m in s_sq], "ratio (paper basis)", "ratio (h(ε) rule)"],
            [[C.fmt(eps), *[C.fmt(s_sq[m][e]) for m in s_sq],
              C.fmt(best_sq[e] / s_sq[PAPER][e]), C.fmt(best_sq[e] / s_sq[AUTO][e])]
             for e, eps in enumerate(grid)],
        ))
        C.plot_lines(C.OUT / f"ecg_{notion}.png", np.array(grid), s_l2,
                     xlabel=("ε" if notion == "gp" else "ε (ρ = ε²/2)")
                     + "; time unit 1/80 s, µV",
                     ylabel="mean normalised L2 error",
                     title=f"ECG (MIT-BIH 208, 10 s records), {notion.upper()}")
    path = C.write("ecg.md", "\n".join(parts))
    print("\n".join(parts[2:]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
