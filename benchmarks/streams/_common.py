"""Shared helpers of the streams benchmarks: bundled data sets, output, tables."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mechanisms.cost import epsilon_per_step, exact, float_at_most
from mechanisms.streams import square_wave

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "streams"

# Paper Table I (CPR, arXiv 2605.02724): accuracy (%) per data set and w, ε = 1..5.
PAPER_TABLE_I = {
    "Darwin": {
        5: [19, 32, 75, 97, 98],
        10: [16, 25, 28, 50, 77],
        15: [14, 14, 15, 17, 39],
        20: [12, 13, 15, 8, 22],
        25: [12, 13, 13, 14, 14],
    },
    "Music": {
        5: [6, 35, 88, 100, 100],
        10: [2, 3, 9, 35, 65],
        15: [2, 2, 3, 8, 16],
        20: [1, 2, 3, 4, 7],
        25: [1, 1, 1, 3, 7],
    },
    "Raisin": {
        5: [18, 25, 35, 43, 70],
        10: [21, 21, 28, 25, 36],
        15: [17, 21, 21, 23, 30],
        20: [13, 16, 20, 21, 26],
        25: [11, 12, 16, 20, 22],
    },
    "Crowdsourced": {
        5: [8, 21, 29, 49, 70],
        10: [6, 18, 13, 21, 67],
        15: [5, 10, 10, 17, 21],
        20: [4, 6, 6, 8, 15],
        25: [0, 1, 4, 6, 8],
    },
}


def unit(v: np.ndarray) -> np.ndarray:
    """Min-max normalise to [0, 1] with the stream's (public) range."""
    v = np.asarray(v, dtype=np.float64)
    return (v - v.min()) / (v.max() - v.min())


def sw_reports(x: np.ndarray, *, epsilon: float, w: int,
               rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Square Wave reports of `x` at ε/w per step, as a stream release randomizes them.

    Returns the reports and the float ε₀ = float_at_most(ε/w) they were drawn with.
    """
    e0 = float_at_most(epsilon_per_step(exact(epsilon), w))
    return square_wave(x, epsilon_per_step=e0, rng=rng), e0


def taylor() -> tuple[np.ndarray, int]:
    """Bundled taylor demand stream, [0, 1], period 48."""
    from data import loaders

    return unit(loaders.taylor_stream()["value"].to_numpy()), 48


def italy() -> tuple[np.ndarray, int]:
    """Bundled ItalyPowerDemand rows concatenated, [0, 1], period 24."""
    from data import loaders

    return unit(loaders.italy_power_stream()["value"].to_numpy()), 24


def segments(
    seed: int, *, period: int = 40, repeats: int = 25, jitter: float = 0.01
) -> tuple[np.ndarray, int]:
    """A real electricity segment repeated with jitter (the paper's construction)."""
    from data import synthetic

    df = synthetic.periodic_stream(repeats, period, seed=seed, jitter=jitter)
    return df["value"].to_numpy(dtype=np.float64), period


def ecg_beat(seed: int, *, period: int = 40, repeats: int = 25) -> tuple[np.ndarray, int]:
    """One real MIT-BIH 208 heartbeat, resampled to `period` steps, repeated with jitter."""
    from data import quasi_periodic

    df = quasi_periodic.ecg_beat_stream(repeats, period, seed=seed)
    return df["value"].to_numpy(dtype=np.float64), period


def ecg_rhythm(seed: int, *, period: int = 40, repeats: int = 25) -> tuple[np.ndarray, int]:
    """`repeats` consecutive real heartbeats, each resampled to `period` steps, with jitter."""
    from data import quasi_periodic

    df = quasi_periodic.ecg_rhythm_stream(repeats, period, seed=seed)
    return df["value"].to_numpy(dtype=np.float64), period


def out_dir() -> Path:
    """benchmarks/results/streams, created on demand."""
    OUT.mkdir(parents=True, exist_ok=True)
    return OUT


def md_table(header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def setup_matplotlib():
    """Headless matplotlib."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
