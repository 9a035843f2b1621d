"""Cumulative reconstruction: how CPR improves as daily releases accumulate (issue #15, item 2).

A stream released one day at a time (w = 5, per-step ε/5) is reconstructed
after each day from every report released so far, as `tasks.reconstruct`
does with the history of earlier releases. For the bundled Taylor demand
(48 half-hours a day) and 40 households of `data.households`, each trial
releases the whole stream once (the days are prefixes of it, so a day's
reports are the same in every later reconstruction, as with incremental
releases) and reports, after 3, 7, 14, 28, 56 and 84 days: the cosine
distance to the truth of the reconstruction of the first 3 days (the same
days in every column, so the columns compare like with like), next to the
constant predictor's on those days, the share of streams with a significant
period, and the share whose period is the true one (48 for Taylor, each
household's own). Writes benchmarks/results/streams/cumulative.md.

    .venv/bin/python benchmarks/streams/cumulative.py [--trials N] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from data import households as hh  # noqa: E402
from mechanisms.metrics import cosine_distance  # noqa: E402
from mechanisms.reconstruct import cpr_on_steps  # noqa: E402

DAYS = [3, 7, 14, 28, 56, 84]
EVAL_DAYS = 3  # every column scores the reconstruction of the first 3 days
EPS = [2.0, 4.0]
W = 5


def _households(seed: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    df = hh.households(40, max(DAYS), seed=seed)
    periods = df.attrs["periods"]
    return [(g["t"].to_numpy(), g["value"].to_numpy() / hh.VALUE_MAX, periods[u])
            for u, g in df.groupby("user_id", sort=True)]


def _taylor() -> list[tuple[np.ndarray, np.ndarray, int]]:
    x, period = C.taylor()
    return [(np.arange(x.size), x, period)]


def run(trials: int, days: list[int]) -> dict:
    """(set, eps, days) -> (mean cosine distance, significant %, exact period %)."""
    out = {}
    for name in ("taylor", "households"):
        for eps in EPS:
            acc: dict[int, list[tuple[float, float, bool, bool]]] = {d: [] for d in days}
            for trial in range(trials):
                streams = _taylor() if name == "taylor" else _households(100 + trial)
                for k, (st, x, period) in enumerate(streams):
                    rng = np.random.default_rng([trial, k, int(eps * 10)])
                    y, _ = C.sw_reports(x, epsilon=eps, w=W, rng=rng)
                    e0 = eps / W
                    for d in days:
                        sel = st < d * hh.STEPS_PER_DAY
                        if sel.sum() < 8:
                            continue
                        res = cpr_on_steps(y[sel], st[sel], epsilon_per_step=e0)
                        periodic = res.diagnostics["path"] == "periodic"
                        first = st[sel] < EVAL_DAYS * hh.STEPS_PER_DAY
                        const = np.full(int(first.sum()), 0.5)
                        acc[d].append((cosine_distance(x[sel][first], res.reconstruction[first]),
                                       cosine_distance(x[sel][first], const), periodic,
                                       periodic and res.period == period))
            for d in days:
                a = np.array(acc[d], dtype=float)
                out[(name, eps, d)] = (a[:, 0].mean(), a[:, 1].mean(), 100 * a[:, 2].mean(),
                                       100 * a[:, 3].mean())
            print(f"  {name} eps={eps} done", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    """Run and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="2 trials, days 3 / 14 / 56")
    args = ap.parse_args(argv)
    trials = 2 if args.quick else args.trials
    days = [3, 14, 56] if args.quick else DAYS
    t0 = time.perf_counter()
    res = run(trials, days)
    md = [f"# Cumulative reconstruction as days accumulate (w = {W}, {trials} trials; "
          "households: 40 per trial)", "",
          "Each cell: mean cosine distance to the truth on the first 3 days (CPR / constant) "
          "/ % of streams with a significant period / % with the true period.", ""]
    rows = []
    for name in ("taylor", "households"):
        for eps in EPS:
            rows.append([name, f"{eps:g}"] + [
                "{:.3f} / {:.3f} / {:.0f} % / {:.0f} %".format(*res[(name, eps, d)])
                for d in days])
    md.append(C.md_table(["data set", "ε"] + [f"after {d} days" for d in days], rows))
    md += ["", f"Wall time {time.perf_counter() - t0:.0f} s."]
    path = C.out_dir() / f"cumulative{'_quick' if args.quick else ''}.md"
    path.write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
