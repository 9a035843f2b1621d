"""Release report sections that differ between curves and streams (see `release_sections`).

Plots read the first row group of a released file only (one chunk of users),
so a report never loads a whole release.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mechanisms import registry
from reports.release_sections import ReleaseContext, stream_title
from reports.render import cell, md_table, num
from schemas.units import stream_time


def _head(path: Any) -> pa.Table:
    pf = pq.ParquetFile(path)
    return pf.read_row_group(0) if pf.metadata.num_row_groups else pf.schema_arrow.empty_table()


def _groups(table: pa.Table, key: str, limit: int) -> list[tuple[str, str, np.ndarray]]:
    """The first `limit` (user_id, item id, row indices) runs of a row group."""
    users = table.column("user_id").to_pylist()
    items = table.column(key).to_pylist()
    out: list[tuple[str, str, list[int]]] = []
    for i, k in enumerate(zip(users, items, strict=True)):
        if not out or (out[-1][0], out[-1][1]) != k:
            if len(out) == limit:
                break
            out.append((k[0], k[1], []))
        out[-1][2].append(i)
    return [(u, c, np.asarray(rows)) for u, c, rows in out]


def _files_table(ctx: ReleaseContext, described: dict[str, str]) -> list[str]:
    files = ctx.manifest.get("files") or {}
    rows = [{"file": f, "holds": described.get(name, name)} for name, f in sorted(files.items())]
    if not rows:
        return []
    return ["## Output files", "", md_table(rows, ["file", "holds"]), ""]


# ------------------------------------------------------------------ curves

def curve_error_bounds(ctx: ReleaseContext) -> list[str]:
    """The data-independent (1-β) error bounds, in the metric's and the value units."""
    eb = ctx.manifest.get("error_bound") or {}
    if not ctx.released or eb.get("max") is None:
        return []
    vu, units = ctx.manifest.get("value_unit", ""), ctx.manifest["units"]
    lines = ["## Error bounds (data-independent)", "",
             f"With probability ≥ {1 - (eb.get('beta') or 0):.2f}, each released curve is "
             f"within its ErrBound of the input's projection on the mechanism's basis: mean "
             f"{eb['mean']:.4g}, max {eb['max']:.4g} ({cell(units)}). The bound adds the "
             "projection error, which is not released."]
    if eb.get("rms_mean") is not None:
        lines.append(f"Divided by √(duration) this is a root-mean-square deviation over time of "
                     f"mean {eb['rms_mean']:.4g} {vu}, max {eb['rms_max']:.4g} {vu}.")
    return [*lines, ""]


def curve_outputs(ctx: ReleaseContext) -> list[str]:
    """Which file holds what, in which units."""
    d = ctx.definition
    vu, tu = ctx.manifest.get("value_unit", ""), ctx.manifest.get("time_unit", "")
    cols = ", ".join(d.get("value_columns") or [])
    return _files_table(ctx, {
        "values": f"each curve evaluated on its grid: t ({tu} from the curve's start), "
                  f"{cols} ({vu})",
        "segments": "the private function: segments and their noisy coefficients",
        "curves": "one row per curve: basis, dimension, duration, error bound, cost",
        "values_lonlat": f"the same points as longitude/latitude (WGS84 degrees; inverse of the "
                         f"public {d.get('projection')} projection), t ({tu})",
        "curves_lonlat": "GeoParquet 1.1: one lon/lat LineString per curve (OGC:CRS84)",
        "curves_geojson": "GeoJSON FeatureCollection: one lon/lat LineString per curve",
    })


def curve_plots(ctx: ReleaseContext) -> list[str]:
    """A map of released trajectories (lon/lat) or released curves against time."""
    from reports import plots  # matplotlib: only when a report is drawn, not at start-up

    if not ctx.released:
        return []
    lonlat, values = ctx.file("values_lonlat"), ctx.file("values")
    if lonlat is not None:
        table = _head(lonlat)
        tracks = [plots.Track(f"{u[:16]} / {c[:12]}", table.column("t").to_numpy()[r],
                              np.column_stack([table.column("lon").to_numpy()[r],
                                               table.column("lat").to_numpy()[r]]))
                  for u, c, r in _groups(table, "curve_id", 6)]
        ctx.plots["private_tracks_map.png"] = plots.tracks_map(
            tracks, f"Released trajectories (private; first {len(tracks)} curves)")
        return ["## Plots (private outputs only)", "",
                f"The first {len(tracks)} released curves, mapped back to longitude/latitude.",
                "", "![released trajectories](plots/private_tracks_map.png)", ""]
    if values is None:
        return []
    table = _head(values)
    cols = list(ctx.definition.get("value_columns") or
                [c for c in table.column_names if c not in ("user_id", "curve_id", "t")])
    tracks = [plots.Track(f"{u[:24]} / {c[:16]}", table.column("t").to_numpy()[r],
                          np.column_stack([table.column(k).to_numpy()[r] for k in cols]))
              for u, c, r in _groups(table, "curve_id", 4)]
    ctx.plots["private_curves.png"] = plots.curves_over_time(
        tracks, cols, ctx.manifest.get("value_unit", ""), ctx.manifest.get("time_unit", ""),
        f"Released curves (private; first {len(tracks)})")
    return ["## Plots (private outputs only)", "",
            f"The first {len(tracks)} released curves, in {ctx.manifest.get('value_unit', '')}.",
            "", "![released curves](plots/private_curves.png)", ""]


# ------------------------------------------------------------------ streams

def _value_scale(ctx: ReleaseContext) -> tuple[float, str]:
    vr = ctx.definition.get("value_range")
    if vr:
        return float(vr[1]) - float(vr[0]), str(ctx.manifest.get("value_unit", ""))
    return 1.0, "normalised units"


def _cpr(ctx: ReleaseContext) -> bool:
    """Whether the release's randomizer supports the CPR reconstruction."""
    return "cpr" in registry.stream(ctx.manifest.get("mechanism") or "square_wave").reconstructions


def stream_error_bounds(ctx: ReleaseContext) -> list[str]:
    """The randomizer's worst-case standard deviation per report, in the value unit."""
    eb = ctx.manifest.get("error_bound") or {}
    if not ctx.released or eb.get("max") is None:
        return []
    scale, unit = _value_scale(ctx)
    pooled = "; the CPR reconstruction pools every period of a stream" if _cpr(ctx) else ""
    return ["## Error bounds (data-independent)", "",
            f"The unbiased estimate of each sample from its {stream_title(ctx.manifest)} report "
            f"has a standard deviation of at most {num(eb['max'] * scale)} {unit} "
            f"({eb['max']:.4g} times the width of the declared range). Averages over k samples "
            f"shrink this by √k{pooled}.", ""]


def _period_text(period: int | None, definition: dict[str, Any]) -> str:
    if period is None:
        return "none"
    t = stream_time(np.array([period]), definition)
    return f"{period} steps" + (f" ({t[0]:g} {definition.get('time_unit')})"
                                if t is not None else "")


def reconstruction(ctx: ReleaseContext) -> list[str]:
    """CPR's outcome per stream, with a warning wherever it fell back to a non-periodic fit."""
    periods = ctx.manifest.get("periods") or []
    if not periods:
        return []
    status = Counter(p["status"] for p in periods)
    fell_back = [p for p in periods if p.get("period") is None]
    lines = ["## Reconstruction (CPR, post-processing: no budget)", "",
             md_table([{"status": s, "streams": n} for s, n in sorted(status.items())],
                      ["status", "streams"])]
    if fell_back:
        lines += ["", f"> **Warning:** for {len(fell_back)} of {len(periods)} stream(s) CPR found "
                  "no significant period. Their reconstruction is a shrunk smooth or constant "
                  "fit of the noisy reports, not a recovered periodic pattern: do not read a "
                  "cycle into it.", ""]
    rows = [{"user_id": p["user_id"], "stream_id": p["stream_id"], "samples": p["samples"],
             "period": _period_text(p.get("period"), ctx.definition), "status": p["status"]}
            for p in periods]
    return [*lines, "", md_table(rows, ["user_id", "stream_id", "samples", "period", "status"],
                                 20), ""]


def stream_outputs(ctx: ReleaseContext) -> list[str]:
    """Which file holds what, in which units."""
    _, unit = _value_scale(ctx)
    tu = ctx.definition.get("time_unit", "step")
    t_col = "" if tu == "step" else f", t ({tu})"
    return _files_table(ctx, {
        "samples": (f"{stream_title(ctx.manifest)} reports y, on [−b, 1 + b] around the "
                    "normalised scale [0, 1] of the declared range" if _cpr(ctx) else
                    f"{stream_title(ctx.manifest)} reports y, on the normalised scale [0, 1] of "
                    "the declared range widened by the randomizer's output bound"),
        "reconstruction": "CPR reconstruction value_hat on the normalised scale",
        "samples_units": f"the unbiased estimate of each sample from its report, value "
                         f"({unit}){t_col}: noisy, often outside the declared range",
        "reconstruction_units": f"the reconstruction as value_hat ({unit}){t_col}",
    })


def _span(n: int, period: int | None) -> int:
    return n if n <= 600 else min(n, max(480, 8 * period) if period else 480)


def _first_stream(ctx: ReleaseContext, name: str, column: str
                  ) -> tuple[str, str, np.ndarray, np.ndarray] | None:
    path = ctx.file(name)
    if path is None:
        return None
    table = _head(path)
    groups = _groups(table, "stream_id", 1)
    if not groups:
        return None
    user, stream, rows = groups[0]
    steps, values = table.column("step").to_numpy(), table.column(column).to_numpy()
    return user, stream, steps[rows], values[rows]


def stream_plots(ctx: ReleaseContext) -> list[str]:
    """The first stream: per-sample estimates and reconstruction, in the declared unit."""
    from reports import plots  # matplotlib: only when a report is drawn, not at start-up

    if not ctx.released:
        return []
    scaled = ctx.file("samples_units") is not None
    first = (_first_stream(ctx, "samples_units", "value") if scaled
             else _first_stream(ctx, "samples", "y"))
    if first is None:
        return []
    user, stream, steps_all, values = first
    per = next((p for p in ctx.manifest.get("periods") or []
                if p["user_id"] == user and p["stream_id"] == stream), None)
    span = _span(len(steps_all), per.get("period") if per else None)
    steps, values = steps_all[:span], values[:span]
    rec = _first_stream(ctx, "reconstruction_units" if scaled else "reconstruction",
                        "value_hat")
    rec_v = rec[3][:span] if rec is not None and rec[:2] == (user, stream) else None
    vr = ctx.definition.get("value_range") if scaled else None
    _, unit = _value_scale(ctx) if scaled else (1.0, "normalised units")
    t = stream_time(steps, ctx.definition)
    tu = ctx.definition.get("time_unit", "step")
    x, x_label = (steps, "step index") if t is None else (t, f"time ({tu})")
    shown = f"steps {steps[0]}–{steps[-1]}, {len(steps)} of the stream's {len(steps_all)} samples"
    view = plots.StreamView(
        x=x, samples=values, reconstruction=rec_v, x_label=x_label, value_label=unit,
        title=f"Stream {stream[:20]} of user {user[:20]} (private outputs; {shown})",
        warning="" if per is None or per.get("period") else f"CPR: {per['status']}",
        band=(float(vr[0]), float(vr[1])) if vr else None,
        reports_label=f"{stream_title(ctx.manifest)} reports")
    ctx.plots["private_stream.png"] = plots.stream_plot(view)
    rec_text = " and the CPR reconstruction" if rec_v is not None else ""
    what = (f"the unbiased estimate of each sample (grey; noisy){rec_text}" if scaled else
            f"the {stream_title(ctx.manifest)} reports (grey){rec_text}")
    return ["## Plots (private outputs only)", "",
            f"Stream {cell(stream)} of user {cell(user)}, {shown}: {what}, in {cell(unit)}"
            + (f"; period {_period_text(per.get('period'), ctx.definition)}" if per else "")
            + ".", "", "![released stream](plots/private_stream.png)", ""]
