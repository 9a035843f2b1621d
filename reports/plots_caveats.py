"""The figures behind a curve release's warnings (`reports.caveats`): released outputs only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reports.plots import _plain, _png, plt  # Agg, the deterministic rcParams, PNG bytes


def scale_bars(rows: Sequence[tuple[str, float]], unit: str, title: str) -> bytes:
    """Magnitudes to compare (label, value in `unit`) as bars on a logarithmic axis."""
    labels = [r[0] for r in rows]
    values = np.array([max(r[1], 1e-300) for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.4))
    y = np.arange(len(rows))[::-1]
    ax.barh(y, values, color=[f"C{i}" for i in range(len(rows))], alpha=0.85)
    for yi, v in zip(y, values, strict=True):
        ax.text(v, yi, f"  {v:.3g} {unit}", va="center", ha="left", fontsize=8)
    ax.set_xscale("log")
    lo, hi = float(values.min()), float(values.max())
    ax.set_xlim(lo / 3, hi * 30)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel(f"{unit} (logarithmic scale)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="x", lw=0.3, alpha=0.6)
    return _png(fig)


def shape_checks(t: np.ndarray, first: np.ndarray, straight: np.ndarray,
                 noise_share: float, thresholds: tuple[float, float], *,
                 value_label: str, time_label: str, title: str) -> bytes:
    """Left: the first released curve and its straight-line fit; right: every measured curve.

    The right panel places each measured curve by the share of its variation a
    straight line explains; the noise's possible share (one number for the
    release, from the error bound) is the horizontal line.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6),
                                      gridspec_kw={"width_ratios": [3, 2]})
    left.plot(t, first, lw=0.9, color="C0", label="first released curve")
    if t.size > 1 and np.ptp(t) > 0:
        slope, icpt = np.polyfit(t, first, 1)
        left.plot(t, slope * t + icpt, "--", lw=1.1, color="C3", label="its straight-line fit")
    left.set_xlabel(time_label)
    left.set_ylabel(value_label)
    _plain(left)
    left.legend(fontsize=7, loc="best")
    x = np.arange(straight.size)
    right.plot(x, straight, "o", ms=3.5, color="C0",
               label="share explained by a straight line (per curve)")
    right.axhline(thresholds[0], color="C0", ls=":", lw=1.0,
                  label=f"straight-line warning at {thresholds[0]:.0%}")
    right.axhline(noise_share, color="C3", lw=1.2,
                  label=f"share the noise may account for ({noise_share:.0%})")
    right.axhline(thresholds[1], color="C3", ls=":", lw=1.0,
                  label=f"noise warning at {thresholds[1]:.0%}")
    right.set_ylim(-0.03, 1.08)
    right.set_xlabel("measured released curve")
    right.set_ylabel("share of the curve's variation")
    right.legend(fontsize=6.5, loc="lower left")
    fig.suptitle(title, fontsize=9)
    return _png(fig)
