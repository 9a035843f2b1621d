"""Warnings a reader of a curve release needs, from released outputs and public parameters.

Two questions a report must answer plainly, because the rest of it reads the
same either way:

- **Does the guarantee protect anything at the data's scale?** The guarantee
  hides a shift of a whole curve of about X (`reports.guarantee.hidden_shift`,
  a public number). It is compared with the spread of the *released* curves
  (the median RMS of each curve about its own time-weighted mean), less the
  share the noise can account for (the data-independent error bound, RMS). The
  raw data's own spread is not public; the released curves are, and anything
  computed from them is post-processing (no further privacy cost). When X is
  below 1/`SCALE_RATIO` of that spread, two curves that differ visibly are told
  apart almost surely: the report says so.
- **Does the released function show the data?** Two checks on the released
  curves alone: a straight line in t explains at least `STRAIGHT_SHARE` of the
  variation of most released curves (a one-segment linear basis can show
  nothing else: an ECG released as straight lines), or the noise's RMS bound is
  so large that it may account for at least `NOISE_SHARE` of what the released
  curves show.

Only the first row group of ``values.parquet`` is read (one chunk of users), as
for the report's plots; the text says how many curves were measured. Streams
are not checked here: their guarantee covers the whole declared value range by
construction, and CPR's fallbacks are flagged by the reconstruction section.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reports.guarantee import hidden_shift, ratio_text, shift_exponent
from reports.release_sections import ReleaseContext, median_duration
from reports.render import md_table, num, quantity

SCALE_RATIO = 100.0   # warn when the hidden shift is below 1/100 of the released signal spread
STRAIGHT_SHARE = 0.98  # a straight line explains >= 98 % of a curve's variation
NOISE_SHARE = 0.5     # the noise may account for >= half of the released variation


@dataclass(frozen=True)
class Released:
    """Per released curve (first row group), in the value unit.

    Attributes:
        t: times of the first curve (for the figure).
        first: values of the first curve, first value column (for the figure).
        spread: RMS of each curve about its time-weighted mean (norm over the columns).
        straight: share of each curve's variation a straight line in t explains, in [0, 1].
    """

    t: np.ndarray
    first: np.ndarray
    spread: np.ndarray
    straight: np.ndarray


@dataclass(frozen=True)
class Checks:
    """What the warnings compare (all public: parameters, error bounds, released outputs)."""

    hidden: float         # whole-curve shift hidden at likelihood ratio e (value unit)
    noise: float | None   # the error bound's RMS over time, mean over curves (value unit)
    released: Released

    @property
    def spread(self) -> float:
        """The median RMS of the released curves about their mean."""
        return float(np.median(self.released.spread))

    @property
    def signal(self) -> float:
        """The spread less what the noise bound can account for (0 when noise explains all)."""
        noise = self.noise or 0.0
        return float(np.sqrt(max(0.0, self.spread ** 2 - noise ** 2)))

    @property
    def noise_share(self) -> float:
        """The share of the released curves' variance the noise bound may account for."""
        if self.noise is None:
            return 0.0
        return 1.0 if self.spread == 0 else min(1.0, (self.noise / self.spread) ** 2)

    @property
    def straight_share(self) -> float:
        """The median share of a released curve's variation a straight line explains."""
        return float(np.median(self.released.straight))

    @property
    def weak_guarantee(self) -> bool:
        """The guarantee hides less than 1/`SCALE_RATIO` of the released signal's spread."""
        return self.signal > 0 and self.hidden * SCALE_RATIO < self.signal

    @property
    def straight_lines(self) -> bool:
        """Most released curves are (near) straight lines."""
        return self.straight_share >= STRAIGHT_SHARE

    @property
    def mostly_noise(self) -> bool:
        """The noise may account for at least `NOISE_SHARE` of the released variation."""
        return self.noise_share >= NOISE_SHARE


def _weights(t: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Trapezoid weights of each sample within its curve (half intervals at the ends)."""
    dt = np.diff(t)
    dt[starts[1:] - 1] = 0.0  # no interval across two curves
    w = (np.concatenate([[0.0], dt]) + np.concatenate([dt, [0.0]])) / 2
    total = np.add.reduceat(w, starts)
    flat = np.repeat(total <= 0, np.diff(np.append(starts, t.size)))
    w[flat] = 1.0  # a one-point (or zero-length) curve: plain average
    return w


def curve_shapes(t: np.ndarray, values: np.ndarray, starts: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Each curve's RMS about its mean and the share of it a straight line in t explains.

    Args:
        t: times of all curves, curve after curve (increasing within a curve).
        values: (N, k) values at `t`.
        starts: index of each curve's first row.

    Returns:
        (spread, straight): one entry per curve, time-weighted (trapezoid rule).
    """
    v = values.reshape(len(t), -1)
    w = _weights(t, starts)
    sizes = np.diff(np.append(starts, t.size))
    total = np.add.reduceat(w, starts)

    def mean(x: np.ndarray) -> np.ndarray:
        return np.add.reduceat(w[:, None] * x.reshape(len(t), -1), starts) / total[:, None]

    tc = t - np.repeat(mean(t)[:, 0], sizes)
    vc = v - np.repeat(mean(v), sizes, axis=0)
    var_t = mean(tc * tc)[:, 0]
    var_v = mean(vc * vc)
    cov = mean(tc[:, None] * vc)
    total_var = var_v.sum(axis=1)
    explained = np.divide((cov ** 2).sum(axis=1), var_t, out=np.zeros_like(var_t),
                          where=var_t > 0)
    straight = np.divide(explained, total_var, out=np.ones_like(total_var),
                         where=total_var > 0)
    return np.sqrt(total_var), np.clip(straight, 0.0, 1.0)


def released_curves(path: Any, value_columns: list[str]) -> Released | None:
    """`Released` for the curves of the first row group of ``values.parquet`` (None: none)."""
    pf = pq.ParquetFile(path)
    if not pf.metadata.num_row_groups:
        return None
    table: pa.Table = pf.read_row_group(0, columns=["user_id", "curve_id", "t", *value_columns])
    if not table.num_rows:
        return None
    users = table.column("user_id").to_numpy(zero_copy_only=False)
    curves = table.column("curve_id").to_numpy(zero_copy_only=False)
    new = np.ones(table.num_rows, dtype=bool)
    new[1:] = (users[1:] != users[:-1]) | (curves[1:] != curves[:-1])
    starts = np.flatnonzero(new)
    t = table.column("t").to_numpy().astype(np.float64)
    values = np.column_stack([table.column(c).to_numpy().astype(np.float64)
                              for c in value_columns])
    spread, straight = curve_shapes(t, values, starts)
    end = starts[1] if starts.size > 1 else t.size
    return Released(t=t[:end], first=values[:end, 0], spread=spread, straight=straight)


def curve_checks(notion: str, amount: Fraction, definition: dict[str, Any],
                 duration: float | None, error_bound: dict[str, Any],
                 released: Released) -> Checks:
    """The numbers the warnings compare (`duration`: the guarantee reading's, public)."""
    sup = definition.get("metric", "l2") == "dist_inf"
    noise = error_bound.get("mean") if sup else error_bound.get("rms_mean")
    return Checks(hidden=hidden_shift(notion, amount, definition, duration),
                  noise=None if noise is None else float(noise), released=released)


def scale_warning(c: Checks, notion: str, amount: Fraction, definition: dict[str, Any],
                  duration: float | None) -> str:
    """The plain warning that the guarantee protects almost nothing at the data's scale."""
    vu = definition.get("value_unit", "")
    one_pct = c.signal / 100
    x = shift_exponent(notion, amount, definition, duration, one_pct)
    noise = ("" if c.noise is None else
             f", less the share the noise can account for (its data-independent RMS bound, "
             f"{quantity(c.noise, vu)})")
    return (f"> **Warning: at the data's scale this guarantee protects almost nothing.** It "
            f"hides a shift of a whole curve of about {quantity(c.hidden, vu)} (likelihood "
            f"ratio e; the reading above), while the released curves vary by about "
            f"{quantity(c.signal, vu)} about their own mean, {num(c.signal / c.hidden, 3)} "
            f"times more. A difference of 1% of that ({quantity(one_pct, vu)} over the whole "
            f"curve) is told apart at a likelihood ratio of up to {ratio_text(x)}: curves of "
            f"two users that differ visibly are distinguishable almost surely. Compared: the "
            f"median RMS of the {c.released.spread.size} measured released curves about their "
            f"mean{noise}; released outputs, so this costs no budget. The raw data's spread is "
            f"not public. A smaller ε (or ρ) protects more, at more noise (error bounds below).")


def straight_warning(c: Checks, basis: str) -> str:
    """The plain warning that the released curves are (near) straight lines."""
    n = c.released.straight.size
    k = int(np.count_nonzero(c.released.straight >= STRAIGHT_SHARE))
    return (f"> **Warning: the released curves are (near) straight lines.** For {k} of the {n} "
            f"measured released curves a straight line in time explains at least "
            f"{STRAIGHT_SHARE:.0%} of the curve's variation (median {c.straight_share:.1%}). "
            f"Whatever the data do between a curve's ends, this release shows little more "
            f"than their trend: the mechanism's function ({basis}) cannot follow faster "
            f"changes (an ECG's beats, a vessel's turns). If the data vary faster, release "
            f"with a richer basis (the mechanism's options) and check it on public data with "
            f"`privpipe evaluate`; the error bounds below do not include this projection "
            f"error.")


def noise_warning(c: Checks, definition: dict[str, Any]) -> str:
    """The plain warning that the released curves are mostly noise."""
    vu = definition.get("value_unit", "")
    return (f"> **Warning: the released curves are mostly noise.** The noise's "
            f"data-independent RMS bound ({quantity(c.noise or 0.0, vu)}) is "
            f"{num(100 * (c.noise or 0.0) / c.spread if c.spread else 100, 3)}% of the "
            f"released curves' median RMS about their mean ({quantity(c.spread, vu)}): the "
            f"noise alone may account for up to {c.noise_share:.0%} of what they show. Read "
            f"single curves as noise; a larger ε (or ρ) protects less and leaves more of the "
            f"data, and a basis with fewer functions draws less noise but shows coarser "
            f"shapes.")


def _basis_text(ctx: ReleaseContext) -> str:
    """The released function's basis and median dimension (``curves.parquet``, public)."""
    path = ctx.file("curves")
    if path is None:
        return "the mechanism's basis"
    pf = pq.ParquetFile(path)
    if not pf.metadata.num_row_groups:
        return "the mechanism's basis"
    table = pf.read_row_group(0, columns=["basis", "basis_params", "dim"])
    if not table.num_rows:
        return "the mechanism's basis"
    basis, params = table.column("basis")[0].as_py(), table.column("basis_params")[0].as_py()
    dim = float(np.median(table.column("dim").to_numpy()))
    return f"basis {basis} {params}, a median of {num(dim)} coefficients per curve"


def _table(c: Checks, vu: str) -> list[str]:
    row = {"shift hidden (ratio e)": quantity(c.hidden, vu),
           "released curves' spread (median RMS about the mean)": quantity(c.spread, vu),
           "noise RMS bound (data-independent)":
               "none stated" if c.noise is None else quantity(c.noise, vu),
           "spread less noise": quantity(c.signal, vu),
           "straight-line share (median)": f"{c.straight_share:.1%}",
           "noise share (up to)": f"{c.noise_share:.0%}",
           "curves measured": c.released.spread.size}
    return [md_table([row], list(row)), ""]


def curve_caveats(ctx: ReleaseContext) -> list[str]:
    """The release report's warnings section (`reports.release_sections.ReleaseContext`)."""
    from reports import plots_caveats  # matplotlib: only when a report is drawn

    path = ctx.file("values")
    if not ctx.released or ctx.notion == "wevent" or path is None:
        return []
    released = released_curves(path, list(ctx.definition.get("value_columns") or []))
    if released is None:
        return []
    d, vu = ctx.definition, ctx.manifest.get("value_unit", "")
    duration = median_duration(ctx)
    c = curve_checks(ctx.notion, ctx.amount, d, duration, ctx.manifest.get("error_bound") or {},
                     released)
    lines = ["## Scale and shape checks (released outputs only)", "",
             "What the guarantee hides, next to what the released curves show; computed "
             "from the released curves (the first chunk) and public parameters, never from "
             "raw data.", "", *_table(c, vu)]
    if c.weak_guarantee:
        ctx.plots["guarantee_scale.png"] = plots_caveats.scale_bars(
            [("shift hidden by the guarantee (ratio e)", c.hidden),
             ("1% of the released curves' spread", c.signal / 100),
             ("noise RMS bound", c.noise or 0.0),
             ("released curves' spread less noise", c.signal)], vu,
            "What the guarantee hides against the released curves' scale")
        lines += [scale_warning(c, ctx.notion, ctx.amount, d, duration), "",
                  "![the guarantee against the data's scale](plots/guarantee_scale.png)", ""]
    if c.straight_lines or c.mostly_noise:
        ctx.plots["shape_checks.png"] = plots_caveats.shape_checks(
            released.t, released.first, released.straight, c.noise_share,
            (STRAIGHT_SHARE, NOISE_SHARE), value_label=vu,
            time_label=f"time from the curve's start ({d.get('time_unit', '')})",
            title="Released curves: straight-line share and the noise's possible share")
        lines += [*([straight_warning(c, _basis_text(ctx)), ""] if c.straight_lines else []),
                  *([noise_warning(c, d), ""] if c.mostly_noise else []),
                  "![shape checks of the released curves](plots/shape_checks.png)", ""]
    if not (c.weak_guarantee or c.straight_lines or c.mostly_noise):
        lines += ["No warning: the guarantee hides at least 1/100 of the released curves' "
                  "spread, and they are neither straight lines nor mostly noise.", ""]
    return lines
