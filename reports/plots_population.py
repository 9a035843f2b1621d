"""Plots of the population view (released reports only, never raw data)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from files.report_files import save_bytes
from reports.plots import _png, plt  # Agg, the deterministic rcParams, PNG bytes

#: at most this many steps are drawn in the per-step plot (the first ones)
MAX_STEPS = 336


def plot_population(tables: dict[str, pd.DataFrame], out_dir: Path, *, value_unit: str,
                    confidence: float, period: int | None) -> list[str]:
    """The mean with its band and the quantile fan, per step (and per phase)."""
    names = []
    cuts = [("step", "step")] + ([("phase", f"phase (step mod {period})")] if period else [])
    fig, axs = plt.subplots(len(cuts), 2, figsize=(11, 3.4 * len(cuts)), squeeze=False)
    for row, (cell, label) in enumerate(cuts):
        mean = tables[f"{cell}_mean"].head(MAX_STEPS)
        dist = tables[f"{cell}_distribution"].head(MAX_STEPS)
        ax = axs[row, 0]
        ax.fill_between(mean[cell], mean["lower"], mean["upper"], color="tab:blue", alpha=0.25,
                        label=f"{100 * confidence:g} % band")
        ax.plot(mean[cell], mean["mean"], color="tab:blue", lw=1.2, label="mean of the users")
        ax.set_title(f"Population mean per {cell}")
        ax.set_xlabel(label)
        ax.set_ylabel(value_unit)
        ax.legend(fontsize=7)
        ax = axs[row, 1]
        ax.fill_between(dist[cell], dist["q10"], dist["q90"], color="tab:green", alpha=0.2,
                        label="10-90 %")
        ax.fill_between(dist[cell], dist["q25"], dist["q75"], color="tab:green", alpha=0.35,
                        label="25-75 %")
        ax.plot(dist[cell], dist["q50"], color="tab:green", lw=1.2, label="median")
        ax.set_title(f"Distribution of the users' values per {cell} (SW EM/EMS)")
        ax.set_xlabel(label)
        ax.set_ylabel(value_unit)
        ax.legend(fontsize=7)
    fig.suptitle("Population view: post-processing of the released reports (charges nothing)",
                 fontsize=9)
    save_bytes(out_dir / "population.png", _png(fig))
    names.append("population.png")
    return names
