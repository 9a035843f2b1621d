"""The evaluation report: error tables in the domain's units and labelled raw-vs-private plots.

Only for public or synthetic data (it shows raw data); it says so at the top,
and that nothing was charged and no ledger was opened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from files.report_files import finish_dir, save_text
from ingest.projection import unproject
from mechanisms import registry
from reports import plots
from reports.guarantee import curves_reading, streams_reading
from reports.render import cell, md_table, num, publish_artifacts, render
from schemas.policy import Domain
from schemas.units import domain_record, lonlat_supported, stream_time, to_value_range

if TYPE_CHECKING:  # the evaluation's data types (tasks.evaluation); no runtime import
    from tasks.evaluation import Loaded, Outcome


@dataclass
class Suite:
    """One evaluated input: what it is, its domain, and the outcome at each ε."""

    label: str
    source: str
    dom: Domain
    mechanism: str
    data: Loaded
    outcomes: dict[float, Outcome]

    @property
    def mid(self) -> float:
        """The middle ε of the grid: the one plotted."""
        grid = sorted(self.outcomes)
        return grid[len(grid) // 2]


def _symbol(dom: Domain) -> str:
    return "ρ" if dom.notion == "cgp" else "ε"


def error_rows(s: Suite) -> list[dict[str, Any]]:
    """The suite's error table, one row per (ε, mechanism), with units in the headers."""
    vu, units = s.dom.value_unit, s.dom.units_label()
    rows = []
    for amount, out in sorted(s.outcomes.items()):
        for r in out.rows:
            row = {f"{_symbol(s.dom)} ({units})": f"{amount:g}", "mechanism": r["mechanism"]}
            if s.dom.kind == "curves":
                row[f"L2 error ({vu}·{s.dom.time_unit}^½)"] = num(r["L2 error"])
                row[f"RMS error ({vu})"] = num(r["RMS error"])
                row["normalised error"] = num(r["normalised error"])
            else:
                row[f"RMS error ({vu})"] = num(r["RMS error"])
                row["cosine distance"] = num(r["cosine distance"])
            rows.append(row)
    return rows


def summary_rows(s: Suite) -> list[dict[str, Any]]:
    """One row per (ε, mechanism) with the same keys for every domain (CLI table, JSON)."""
    vu, sym = s.dom.value_unit, _symbol(s.dom)
    out = []
    for amount, outcome in sorted(s.outcomes.items()):
        for r in outcome.rows:
            other = (f"normalised {num(r['normalised error'])}" if "normalised error" in r
                     else f"cosine {num(r['cosine distance'])}")
            out.append({"domain": s.dom.name, sym: f"{amount:g}", "mechanism": r["mechanism"],
                        "RMS error": f"{num(r['RMS error'])} {vu}", "relative": other,
                        "units": s.dom.units_label()})
    return out


def _curve_plot(s: Suite, name: str, images: dict[str, bytes]) -> str:
    shown, d = s.outcomes[s.mid].shown, s.dom
    t = shown["t"]
    sym = _symbol(d)
    private = {k: v for k, v in shown.items() if k not in ("t", "raw")}
    if lonlat_supported(d.projection, d.ref_lat):
        def ll(v: np.ndarray) -> np.ndarray:
            return np.column_stack(unproject(v[:, 0], v[:, 1], projection=d.projection or "",
                                             ref_lat=d.ref_lat))
        images[name] = plots.tracks_map(
            [plots.Track(f"{k} ({sym} = {s.mid:g})", t, ll(v)) for k, v in private.items()],
            f"{s.label}: raw against private (one curve)",
            raw=plots.Track("raw (public data)", t, ll(shown["raw"])))
    else:
        raw = plots.Track("raw (public data)", t, shown["raw"])
        images[name] = plots.curves_over_time(
            [plots.Track(f"{k} ({sym} = {s.mid:g})", t, v) for k, v in private.items()],
            list(d.value_columns), d.value_unit, d.time_unit,
            f"{s.label}: raw against private ({d.value_columns[0]}, one curve)", raw=raw)
    return name


def _stream_plot(s: Suite, name: str, images: dict[str, bytes]) -> tuple[str, str]:
    shown, d = s.outcomes[s.mid].shown, s.dom
    period = int(shown["period"][0])
    n = len(shown["steps"])
    span = n if n <= 600 else min(n, max(480, 8 * period))
    vr = d.value_range or (0.0, 1.0)
    steps = shown["steps"][:span]
    t = stream_time(steps, domain_record(d)["definition"])
    x, x_label = (steps, "step index") if t is None else (t, f"time ({d.time_unit})")
    text = f"steps {steps[0]}–{steps[-1]}, {span} of the stream's {n} samples"
    rec = next((k for k in shown if k.endswith(" + CPR")), None)  # None: no CPR for it
    avg = next(k for k in shown if k.endswith(" moving average"))
    images[name] = plots.stream_plot(
        plots.StreamView(x=x, samples=to_value_range(shown["reports"][:span], vr),
                         reconstruction=None if rec is None else
                         to_value_range(shown[rec][:span], vr),
                         x_label=x_label, value_label=d.value_unit,
                         title=f"{s.label}: raw against private (ε = {s.mid:g} per window)",
                         warning="" if period or rec is None else "CPR: no significant period",
                         band=(float(vr[0]), float(vr[1]))),
        raw=to_value_range(shown["raw"][:span], vr),
        others={avg: to_value_range(shown[avg][:span], vr)})
    return name, text


def suite_section(s: Suite, images: dict[str, bytes]) -> list[str]:
    """One input's section: source, guarantee reading, error table, plot."""
    d = s.dom
    lines = [f"## {cell(s.label)}: domain `{d.name}`", "",
             f"- Input: {cell(s.source)}; {s.data.users_read} user(s) read, "
             f"{s.data.users_rejected} rejected by validation; {len(s.data.items)} "
             f"{'curve' if d.kind == 'curves' else 'stream'}(s) evaluated",
             f"- Mechanism: `{s.mechanism}`; metric: {cell(d.units_label())}; policy digest "
             f"`{domain_record(d)['digest']}`", ""]
    if not s.data.items:
        return [*lines, "Nothing to evaluate: no valid curve or stream in the input.", ""]
    definition = domain_record(d)["definition"]
    amount = Fraction(str(s.mid))
    if d.kind == "curves":
        durations = [float(t[-1] - t[0]) for _, _, t, _ in s.data.items]
        reading = (curves_reading(d.notion, amount, definition, float(d.window),
                                  "the domain's fixed window") if d.window is not None else
                   curves_reading(d.notion, amount, definition, float(np.median(durations)),
                                  "the median duration of the evaluated curves"))
        shown = _curve_plot(s, f"{d.name}_raw_vs_private.png", images)
        caption = "The first evaluated curve"
    else:
        reading = streams_reading(amount, definition, registry.stream(s.mechanism).title)
        shown, text = _stream_plot(s, f"{d.name}_raw_vs_private.png", images)
        caption = f"The first evaluated stream ({text})"
    rows = error_rows(s)
    return [*lines, md_table(rows, list(rows[0]), 100), "", reading, "",
            f"{caption}, at {_symbol(d)} = {s.mid:g}:", "",
            f"![{d.name} raw against private](plots/{shown})", ""]


HEADER = ["# privpipe evaluation: raw against private", "",
          "> **This page shows raw data.** Use it only on public or synthetic data. Nothing "
          "was charged and no ledger was opened: the noise here comes from a seeded generator, "
          "not from any release's key, so it says nothing about a release's outputs. Release "
          "reports never plot raw data.", "",
          "Errors are means over the evaluated curves or streams, in the domain's units. "
          "Curves: the L2 distance to the raw curve, the same divided by √(duration) (an RMS "
          "deviation over time), and the L2 distance over the L2 norm of the centred raw "
          "curve. Streams: the RMS error in the declared unit and the cosine distance on the "
          "[0, 1]-normalised scale.", ""]


def write_evaluation_report(out_dir: str | Path, suites: list[Suite]) -> dict[str, Any]:
    """Write ``OUT/evaluate/``: report (md, self-contained html), plots, evaluation.json."""
    out = Path(out_dir) / "evaluate"
    images: dict[str, bytes] = {}
    lines = list(HEADER)
    rows: list[dict[str, Any]] = []
    for s in suites:
        lines += suite_section(s, images)
        rows += summary_rows(s)
    text = "\n".join(lines)
    html = render(text, out, "privpipe evaluation (raw against private)", images)
    save_text(out / "evaluation.json",
               json.dumps({"charged": "nothing", "ledger": "none opened", "rows": rows},
                          indent=2, sort_keys=True) + "\n")
    finish_dir(out)  # born private; now the operator's modes (docs/files.md)
    publish_artifacts("evaluate", text, out, rows)
    return {"rows": rows, "report": str(html)}
