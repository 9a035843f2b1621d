"""Benchmark (c): speed of the Square Wave sampler and of CPR, as ratios to one FFT.

Every timing is the best of `--repeats` runs, and each is printed next to the
time of one `numpy.fft.rfft` of the same length measured in the same run, so
the ratios are comparable across machines. Goals: `square_wave` >= 10^7
samples/s; CPR cost growing like n log n (a roughly constant ratio to the
FFT would be n log n; the EM part is O(T·B) per iteration after merging reports
with equal likelihood, so it grows slower than n); 10^6 samples under 10 s.
The streams are the bundled ItalyPowerDemand stream (period 24), tiled to
length, privatized at ε = 5, w = 5.

    .venv/bin/python benchmarks/streams/speed.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from mechanisms.reconstruct import cpr, detect_period  # noqa: E402
from mechanisms.streams import square_wave  # noqa: E402


def best_of(fn, repeats):
    best = float("inf")
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes up to 10^5, 1 repeat")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    rng = np.random.default_rng(0)
    rows_sw = []
    for n in [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7]:
        x = rng.random(n)
        t_sw, _ = best_of(lambda x=x: square_wave(x, epsilon_per_step=1.0, rng=rng), repeats)
        t_fft, _ = best_of(lambda x=x: np.fft.rfft(x), repeats)
        rows_sw.append(
            [
                f"{n:.0e}",
                f"{t_sw * 1e3:.1f}",
                f"{n / t_sw:.3g}",
                f"{t_fft * 1e3:.2f}",
                f"{t_sw / t_fft:.1f}",
            ]
        )
    x24, period = C.italy()
    rows_cpr = []
    for n in [10**4, 10**5] if args.quick else [10**4, 10**5, 10**6]:
        x = np.resize(x24, n)
        y, e0 = C.sw_reports(x, epsilon=5, w=5, rng=np.random.default_rng(1))
        t_fft, _ = best_of(lambda y=y: np.fft.rfft(y), max(repeats, 5))
        t_det, t_hat = best_of(lambda y=y: detect_period(y), repeats)
        t_cpr, res = best_of(lambda y=y, e0=e0: cpr(y, epsilon_per_step=e0), repeats)
        rows_cpr.append(
            [
                f"{n:.0e}",
                f"{t_fft * 1e3:.3f}",
                f"{t_det:.3f}",
                f"{t_cpr:.3f}",
                f"{t_det / t_fft:.0f}",
                f"{t_cpr / t_fft:.0f}",
                f"{t_cpr / (n * np.log2(n)) * 1e9:.1f}",
                res.period,
                res.diagnostics.get("em_iterations_max"),
            ]
        )
    md = [
        f"# Streams speed (best of {repeats})",
        "",
        "## square_wave sampler",
        "",
        C.md_table(["n", "square_wave ms", "samples/s", "one rfft ms", "ratio to rfft"], rows_sw),
        "",
        "## CPR (detection + phase EM + KDE + tiling)",
        "",
        C.md_table(
            [
                "n",
                "one rfft ms",
                "detect_period s",
                "cpr s",
                "detect / rfft",
                "cpr / rfft",
                "cpr ns per n·log2 n",
                "period",
                "EM iterations (max)",
            ],
            rows_cpr,
        ),
        "",
    ]
    text = "\n".join(md)
    out = C.out_dir()
    suffix = "_quick" if args.quick else ""
    (out / f"speed{suffix}.md").write_text(text + "\n")
    print(text)
    print(f"wrote {out / f'speed{suffix}.md'}")


if __name__ == "__main__":
    main()
