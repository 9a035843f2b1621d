"""CPR against the constant predictor and the paper's method, w = 5 (issue #15, item 5).

For every bundled or generated quasi-periodic set and ε in {0.5, 1, 2, 4, 5}
(w = 5, per-step ε/5), each trial releases the stream once with Square Wave
and runs, on the same reports:

- ``CPR``: the default (detection on the pooled pseudo-samples);
- ``CPR (detect on reports)``: the previous default (detection on the raw
  reports), to show what the change does;
- ``reference``: the paper's method (EM + KDE-mode template, tiled) with the
  §5 reference detector (harmonic mapping, closeness tie-break, F-test
  refinement, multiple tests) run on the reports, always tiled (no fallback):
  the independent reference implementation of the issue;
- ``paper-literal``: the literal detector of the paper, always tiled;
- ``constant``: the mean of the debiased reports (spec §5 reference row);
- ``oracle period``: CPR's phase recovery at the true period, a bound that
  uses the truth (not a method).

Data sets: ``segments`` (a real 40-step electricity segment repeated 25
times, jitter 0.01), ``ecg_beat`` (one real MIT-BIH 208 heartbeat resampled to
40 steps, repeated 25 times, jitter 0.01: the held-out-style physiological
set), ``ecg_rhythm`` (25 consecutive real heartbeats, each resampled to 40
steps), each a new realisation per trial; ``taylor`` (period 48) and
``italy`` (period 24), new noise per trial. The table reports the mean cosine
distance, the paired difference CPR − constant with its standard error
(CPR "loses by more than noise" when the difference exceeds 2 SE), and at
ε = 4 the share of the gap between the previous default and the reference
that CPR closes, where the reference is better. Writes
benchmarks/results/streams/cpr_vs_constant.md.

    .venv/bin/python benchmarks/streams/cpr_vs_constant.py [--quick] [--trials N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from mechanisms.metrics import cosine_distance  # noqa: E402
from mechanisms.reconstruct import cpr  # noqa: E402
from mechanisms.streams import square_wave_estimate  # noqa: E402

EPS = [0.5, 1.0, 2.0, 4.0, 5.0]
W = 5
METHODS = ["CPR", "CPR (detect on reports)", "reference", "paper-literal", "constant",
           "oracle period"]
#: trials per cell: the generated sets change every trial, the bundled ones only their noise
TRIALS = {"segments": 100, "ecg_beat": 100, "ecg_rhythm": 100, "taylor": 30, "italy": 12}
GENERATED = {"segments": (C.segments, 2000), "ecg_beat": (C.ecg_beat, 3000),
             "ecg_rhythm": (C.ecg_rhythm, 4000)}


def _stream(name: str, trial: int) -> tuple[np.ndarray, int]:
    if name in GENERATED:
        make, base = GENERATED[name]
        return make(seed=base + trial)
    return C.taylor() if name == "taylor" else C.italy()


def one_trial(ds: str, eps: float, trial: int) -> dict[str, float]:
    """Cosine distance of every method on one release of one stream."""
    x, period = _stream(ds, trial)
    rng = np.random.default_rng([7, trial, int(eps * 10), len(ds)])
    y, e0 = C.sw_reports(x, epsilon=eps, w=W, rng=rng)
    level = float(np.clip(square_wave_estimate(y, epsilon_per_step=e0).mean(), 0.0, 1.0))
    recs = {
        "CPR": cpr(y, epsilon_per_step=e0).reconstruction,
        "CPR (detect on reports)": cpr(y, epsilon_per_step=e0,
                                       detect_on="reports").reconstruction,
        "reference": cpr(y, epsilon_per_step=e0, detect_on="reports",
                         fallback=False).reconstruction,
        "paper-literal": cpr(y, epsilon_per_step=e0, detect_on="reports", method="paper",
                             fallback=False).reconstruction,
        # a constant's cosine distance does not depend on its (positive) level;
        # a level clipped to 0 would score 1, so it is floored at a tiny value
        "constant": np.full(x.size, max(level, 1e-6)),
        "oracle period": cpr(y, epsilon_per_step=e0, period=period).reconstruction,
    }
    return {m: cosine_distance(x, r) for m, r in recs.items()}


def run(datasets: list[str], eps_list: list[float], trials: dict[str, int]) -> dict:
    """(dataset, eps) -> method -> array of per-trial cosine distances."""
    out: dict = {}
    t0 = time.perf_counter()
    for ds in datasets:
        for eps in eps_list:
            rows = [one_trial(ds, eps, t) for t in range(trials[ds])]
            out[(ds, eps)] = {m: np.array([r[m] for r in rows]) for m in METHODS}
        print(f"  {ds} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def _verdict(diff: np.ndarray) -> tuple[float, float, str]:
    mean = float(diff.mean())
    se = float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else float("nan")
    if np.allclose(diff, 0.0, atol=1e-9):
        return mean, se, "tie (constant)"
    if mean > 2 * se:
        return mean, se, "LOSES"
    return mean, se, "wins" if mean < -2 * se else "within noise"


def report(res: dict, datasets: list[str], eps_list: list[float], trials: dict[str, int],
           wall: float) -> str:
    """The Markdown tables."""
    md = [f"# CPR vs the constant predictor and the paper's method (w = {W})", "",
          "Mean cosine distance (lower is better). Trials per cell: "
          + ", ".join(f"{d} {trials[d]}" for d in datasets) + ".", ""]
    for ds in datasets:
        md += [f"## {ds}", ""]
        rows = [[m] + [f"{res[(ds, e)][m].mean():.4f}" for e in eps_list] for m in METHODS]
        verdicts = []
        for e in eps_list:
            d = res[(ds, e)]["CPR"] - res[(ds, e)]["constant"]
            mean, se, word = _verdict(d)
            verdicts.append(f"{mean:+.4f} ± {se:.4f} ({word})")
        rows.append(["CPR − constant (± SE)"] + verdicts)
        md.append(C.md_table(["method"] + [f"ε={e:g}" for e in eps_list], rows))
        md.append("")
    md += ["## Gap to the reference at ε = 4", "",
           "Where the reference (the paper's method with the §5 detector, always tiled) "
           "beats the previous default, the share of that gap CPR closes: "
           "(previous − CPR) / (previous − reference).", ""]
    rows = []
    for ds in datasets:
        if (ds, 4.0) not in res:
            continue
        r = res[(ds, 4.0)]
        old, new, ref = (float(r[m].mean()) for m in ("CPR (detect on reports)", "CPR",
                                                      "reference"))
        share = f"{100 * (old - new) / (old - ref):.0f} %" if ref < old else "reference not better"
        rows.append([ds, f"{old:.4f}", f"{new:.4f}", f"{ref:.4f}", share])
    md.append(C.md_table(["data set", "previous default", "CPR", "reference", "gap closed"],
                         rows))
    md += ["", f"Wall time {wall:.0f} s."]
    return "\n".join(md)


def main(argv: list[str] | None = None) -> None:
    """Run the grid and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 trials per cell, ε in {1, 4}")
    ap.add_argument("--trials", type=int, default=None, help="trials per cell for every set")
    ap.add_argument("--datasets", nargs="+", default=list(TRIALS))
    args = ap.parse_args(argv)
    eps_list = [1.0, 4.0] if args.quick else EPS
    n = 5 if args.quick else args.trials
    trials = {d: n or TRIALS[d] for d in args.datasets}
    t0 = time.perf_counter()
    res = run(args.datasets, eps_list, trials)
    text = report(res, args.datasets, eps_list, trials, time.perf_counter() - t0)
    suffix = "_quick" if args.quick else ""
    path = C.out_dir() / f"cpr_vs_constant{suffix}.md"
    path.write_text(text + "\n")
    print(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
