"""Shared helpers of the curves benchmarks: paths, parallel map, tables, plots."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "curves"


def workers() -> int:
    """Worker processes: the machine's cores, capped at 4."""
    return max(1, min(4, os.cpu_count() or 1))


def parallel_map(fn: Callable, items: Iterable, n_workers: int | None = None) -> list:
    """Map over items in worker processes (order kept); serial when one worker."""
    items = list(items)
    n = workers() if n_workers is None else n_workers
    if n <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ProcessPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, items, chunksize=1))


def fmt(x: float) -> str:
    """Compact scientific format for a table cell."""
    if not np.isfinite(x):
        return "n/a"
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write(name: str, text: str) -> Path:
    """Write a Markdown result file under benchmarks/results/curves/."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    path.write_text(text)
    return path


def plot_lines(
    path: Path,
    x: np.ndarray,
    series: dict[str, np.ndarray],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
) -> None:
    """Log-log line plot of several series against x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, y in series.items():
        ax.plot(x, y, marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def baseline_grid(kind: str, n_points: int) -> list[tuple[int, int]]:
    """(k, s) grids of the paper's baselines (spec §1.11); s = 1 means no smoothing."""
    if kind == "trajectory":
        ks = sorted({max(2, n_points // 10), max(2, n_points // 5)})
        return [(k, s) for k in ks for s in sorted({1, max(1, round(k / 20)),
                                                    max(1, round(k / 10))})]
    if kind == "ecg":
        return [(k, s) for k in (100, 200, 800) for s in (1, max(1, k // 20), max(1, k // 10))]
    if kind == "mixture":
        return [(k, s) for k in (10, 20, 50, 100) for s in sorted({1, max(1, k // 10)})]
    raise ValueError(kind)


def summarise(
    errors: dict[str, np.ndarray], baseline_keys: list[str]
) -> dict[str, np.ndarray]:
    """Collapse per-config baseline errors into the best unsmoothed and best smoothed lines.

    Args:
        errors: method -> array (n_eps,) of mean errors; baseline configs are
            named ``baseline k=.. s=..``.
        baseline_keys: the baseline config names.

    Returns:
        The non-baseline series plus ``baseline (best k)`` and
        ``baseline smoothed (best k, s)`` (oracle minimum per ε, as the paper).
    """
    out = {k: v for k, v in errors.items() if k not in baseline_keys}
    plain = [k for k in baseline_keys if k.endswith("s=1")]
    smooth = [k for k in baseline_keys if not k.endswith("s=1")]
    out["baseline (best k)"] = np.min([errors[k] for k in plain], axis=0)
    if smooth:
        out["baseline smoothed (best k, s)"] = np.min([errors[k] for k in smooth], axis=0)
    return out
