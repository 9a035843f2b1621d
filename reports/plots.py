"""Matplotlib plots for reports: each function returns PNG bytes (Agg, deterministic).

Plots never read files and never see raw data except `raw_vs_private`, which
only the `evaluate` flow calls (public or synthetic data). Axes always carry
their units; counts of users use integer ticks; coordinates are printed
without offsets (no "1e6" corner labels).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, ScalarFormatter  # noqa: E402

plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 110, "font.size": 9,
                     "svg.hashsalt": "privpipe", "path.simplify": True,
                     "axes.formatter.useoffset": False})


@dataclass(frozen=True)
class Track:
    """One curve to draw: a label, its times and its coordinates (columns of `xy`)."""

    label: str
    t: np.ndarray
    xy: np.ndarray


def _png(fig: plt.Figure) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _plain(ax: plt.Axes) -> None:
    """Tick labels as plain numbers: no offset, no scientific corner label."""
    for axis in (ax.xaxis, ax.yaxis):
        fmt = ScalarFormatter(useOffset=False)
        fmt.set_scientific(False)
        axis.set_major_formatter(fmt)


def _lon(v: float, _pos: object = None) -> str:
    return f"{abs(v):.3f}°{'W' if v < 0 else 'E'}"


def _lat(v: float, _pos: object = None) -> str:
    return f"{abs(v):.3f}°{'S' if v < 0 else 'N'}"


def tracks_map(tracks: Sequence[Track], title: str, *, raw: Track | None = None) -> bytes:
    """Trajectories on a lon/lat frame (x: longitude, y: latitude, equal ground scale).

    `raw` (evaluation only) is drawn in black under the private tracks.
    """
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    if raw is not None:  # underneath, so private tracks stay visible where they agree
        ax.plot(raw.xy[:, 0], raw.xy[:, 1], color="black", lw=2.0, alpha=0.45, label=raw.label)
    for i, tr in enumerate(tracks):
        ax.plot(tr.xy[:, 0], tr.xy[:, 1], lw=0.9, color=f"C{i % 10}", label=tr.label, zorder=3)
        ax.plot(tr.xy[:1, 0], tr.xy[:1, 1], "o", ms=3, color=f"C{i % 10}")
    lats = np.concatenate([tr.xy[:, 1] for tr in tracks] + ([raw.xy[:, 1]] if raw else []))
    mid = float(np.clip(np.nanmedian(lats), -85, 85)) if lats.size else 0.0
    ax.set_aspect(1.0 / np.cos(np.radians(mid)), adjustable="datalim")
    ax.xaxis.set_major_formatter(FuncFormatter(_lon))
    ax.yaxis.set_major_formatter(FuncFormatter(_lat))
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("longitude (WGS84 degrees)")
    ax.set_ylabel("latitude (WGS84 degrees)")
    ax.grid(True, lw=0.3, alpha=0.6)
    ax.legend(fontsize=7, loc="best", title="dot: start of each curve", title_fontsize=7)
    ax.set_title(title)
    return _png(fig)


def curves_over_time(tracks: Sequence[Track], columns: Sequence[str], value_unit: str,
                     time_unit: str, title: str, *, raw: Track | None = None) -> bytes:
    """One panel per curve (at most 4): each value column against time from the curve's start."""
    shown = list(tracks[:4])
    fig, axs = plt.subplots(len(shown), 1, figsize=(8, 1.9 * len(shown) + 0.7), squeeze=False)
    for ax, tr in zip(axs[:, 0], shown, strict=True):
        if raw is not None:  # underneath, so the private curve stays visible where they agree
            ax.plot(raw.t, raw.xy[:, 0], color="black", lw=1.6, alpha=0.45, label=raw.label)
        for j, col in enumerate(columns):
            ax.plot(tr.t, tr.xy[:, j], lw=0.8, color=f"C{j}",
                    label=col if raw is None else tr.label, zorder=3)
        ax.set_ylabel(f"{columns[0] if len(columns) == 1 else 'value'} ({value_unit})")
        ax.set_title(tr.label, fontsize=8, loc="left")
        ax.set_xlabel(f"time from the curve's start ({time_unit})")
        _plain(ax)
        if len(columns) > 1 or raw is not None:
            ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=9)
    return _png(fig)


@dataclass(frozen=True)
class StreamView:
    """A stream span to draw, in the domain's units."""

    x: np.ndarray                 # time of each shown step, in `x_label` units
    samples: np.ndarray | None    # private reports of the randomizer, in the value unit
    reconstruction: np.ndarray | None
    x_label: str
    value_label: str
    title: str
    warning: str = ""             # shown on the plot, e.g. "no significant period"
    band: tuple[float, float] | None = None   # the declared value range
    reports_label: str = "Square Wave reports"   # the legend of unscaled reports


def stream_plot(view: StreamView, *, raw: np.ndarray | None = None,
                others: dict[str, np.ndarray] | None = None) -> bytes:
    """A stream span: private reports (dots), reconstruction (line), declared range (band).

    `raw` and `others` (evaluation only): the raw series and further estimates.
    """
    fig, ax = plt.subplots(figsize=(8.5, 3.9))
    if view.band is not None:
        ax.axhspan(view.band[0], view.band[1], color="tab:green", alpha=0.07,
                   label="declared value range")
    if view.samples is not None:
        label = "per-sample estimates (private, noisy)" if view.band else view.reports_label
        if view.band is not None:
            lo, hi = view.band
            lim = (lo - 0.6 * (hi - lo), hi + 0.6 * (hi - lo))
            out = int(np.sum((view.samples < lim[0]) | (view.samples > lim[1])))
            ax.set_ylim(*lim)
            if out:
                label += f"; {out} of {len(view.samples)} beyond the axes"
        ax.plot(view.x, view.samples, ".", ms=2.2, alpha=0.45, color="tab:gray", label=label)
    if raw is not None:
        ax.plot(view.x, raw, color="black", lw=1.3, label="raw (public data)")
    for i, (name, v) in enumerate((others or {}).items()):
        ax.plot(view.x, v, lw=1.0, color=f"C{i + 1}", label=name)
    if view.reconstruction is not None:
        ax.plot(view.x, view.reconstruction, color="tab:red", lw=1.5,
                label="CPR reconstruction (post-processing)")
    if view.warning:
        ax.text(0.01, 0.97, view.warning, transform=ax.transAxes, va="top", ha="left",
                fontsize=8, color="#a40", bbox={"fc": "#fff6ec", "ec": "#c60", "lw": 0.6})
    ax.set_xlabel(view.x_label)
    ax.set_ylabel(view.value_label)
    _plain(ax)
    ax.set_title(view.title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              frameon=False)
    return _png(fig)


def users_histogram(values: Sequence[float], title: str, xlabel: str,
                    cap: float | None = None) -> bytes:
    """How many users (integer counts) spent how much, with the cap as a red line."""
    vals = np.asarray(values, dtype=float)
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    top = max(cap or 0.0, float(vals.max()) if vals.size else 0.0) or 1.0
    distinct, counts = np.unique(vals, return_counts=True)
    if len(distinct) <= 15:  # few exact values (a charge per curve): one bar at each
        ax.bar(distinct, counts, width=top / 80, color="tab:blue", alpha=0.85)
        ax.set_xlim(-top * 0.02, top * 1.04)
    else:
        ax.hist(vals, bins=40, range=(0.0, top * 1.02), color="tab:blue", alpha=0.85)
    if cap is not None:
        ax.axvline(cap, color="tab:red", ls="--", lw=1.2, label=f"cap {cap:g}")
    if cap is not None:
        ax.legend(fontsize=7, loc="upper center")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("users")
    return _png(fig)


@dataclass(frozen=True)
class SpendSeries:
    """Per release of one domain, in time order: labels, balances after it, its charge."""

    labels: list[str]             # one tick label per release (time, short id)
    max_after: list[float]        # largest account balance after the release
    p90_after: list[float]
    median_after: list[float]
    charge_max: list[float]       # largest per-user charge of the release itself
    charge_median: list[float]
    cap: list[float]              # the cap in force at the release


def spend_over_time(s: SpendSeries, symbol: str, title: str) -> bytes:
    """Top: account balances after each release (cumulative); bottom: each release's charge."""
    x = np.arange(len(s.labels))
    fig, (top, bot) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    # The cap as a step line across each release's slot (visible for one release too).
    edges = np.append(x - 0.5, x[-1] + 0.5) if len(x) else np.zeros(1)
    top.stairs(s.cap, edges, baseline=None, color="tab:red", ls="--", lw=1.2,
               label="cap in force")
    top.plot(x, s.max_after, "o-", color="tab:purple", ms=3.5, label="largest account")
    top.plot(x, s.p90_after, "s-", color="tab:blue", ms=3, label="90th percentile")
    top.plot(x, s.median_after, "^-", color="tab:cyan", ms=3, label="median account")
    top.set_ylim(bottom=0)
    top.set_ylabel(f"spent after the release ({symbol})", fontsize=8)
    top.legend(fontsize=7, loc="upper left")
    top.set_title(title)
    width = 0.38
    bot.bar(x - width / 2, s.charge_median, width, color="tab:cyan", label="median user")
    bot.bar(x + width / 2, s.charge_max, width, color="tab:purple", label="most charged user")
    bot.set_ylabel(f"charged by it ({symbol})", fontsize=8)
    bot.legend(fontsize=7, loc="upper left")
    step = max(1, len(x) // 10)
    bot.set_xticks(x[::step], [s.labels[i] for i in range(0, len(x), step)], rotation=30,
                   ha="right", fontsize=7)
    bot.set_xlabel("release (time of its reservation, UTC)")
    pad = max(0.0, (4 - len(x)) / 2)  # a few releases stay narrow, centred bars
    bot.set_xlim(-0.6 - pad, len(x) - 0.4 + pad)
    for ax in (top, bot):
        ax.grid(True, axis="y", lw=0.3)
    return _png(fig)


def denials_per_day(days: Sequence[str], users: Sequence[int], title: str) -> bytes:
    """Bars: distinct users denied per day (UTC); only called when there are denials."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    x = np.arange(len(days))
    ax.bar(x, users, width=0.6, color="tab:orange")
    pad = max(0.0, (6 - len(x)) / 2)  # a few days stay narrow bars
    ax.set_xlim(-0.6 - pad, len(x) - 0.4 + pad)
    step = max(1, len(x) // 12)
    ax.set_xticks(x[::step], list(days)[::step], rotation=30, ha="right", fontsize=7)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("day (UTC)")
    ax.set_ylabel("users denied")
    ax.set_title(title)
    return _png(fig)
