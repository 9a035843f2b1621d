"""Reports: Markdown + HTML files with PNG plots, mirrored as Prefect artifacts.

Release reports show only private outputs, counts, reasons (never values),
budget figures and data-independent error bounds. Raw data is plotted only
by the `evaluate` flow, on public or synthetic data.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import markdown as md_lib
from prefect import task

from ledger import Ledger, format_fraction
from tasks.artifacts import artifact_key, embed_images
from tasks.safe_files import write_file

_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; max-width: 60em;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
code { background: #f6f6f6; padding: 0 0.2em; }
img { max-width: 100%; border: 1px solid #ddd; }
h1 { border-bottom: 2px solid #444; } .note { color: #555; font-size: 0.9em; }
"""


def md_table(rows: list[dict[str, Any]], columns: list[str], limit: int = 50) -> str:
    """A Markdown table of `rows` (at most `limit`, then a line saying how many more)."""
    if not rows:
        return "_none_\n"

    def cell(v: Any) -> str:
        return str("" if v is None else v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows[:limit]:
        lines.append("| " + " | ".join(cell(r.get(c)) for c in columns) + " |")
    if len(rows) > limit:
        lines.append(f"\n_... and {len(rows) - limit} more._")
    return "\n".join(lines) + "\n"


def render(markdown_text: str, md_path: Path, title: str) -> Path:
    """Write `markdown_text` to `md_path` and an HTML rendering next to it (new private files)."""
    write_file(md_path, markdown_text.encode("utf-8"))
    body = md_lib.markdown(markdown_text, extensions=["tables", "fenced_code"])
    html = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>\n")
    html_path = md_path.with_suffix(".html")
    write_file(html_path, html.encode("utf-8"))
    return html_path


def publish_artifacts(key: str, markdown_text: str, rdir: Path,
                      table: list[dict[str, Any]] | None = None) -> None:
    """Mirror a report as Prefect artifacts keyed by `key` (images embedded; tasks/artifacts.py)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.context import get_run_context

    try:
        get_run_context()
    except Exception:  # noqa: BLE001 - not inside a flow run: nothing to publish to
        return
    text = embed_images(markdown_text, rdir)
    slug = artifact_key(key)
    create_markdown_artifact(text, key=slug, description=f"privpipe report {key}")
    if table:
        create_table_artifact(table, key=f"{slug}-summary"[:100], description="summary")


def budget_summary(ledger_path: str, domain: str) -> list[dict[str, Any]]:
    """Spent and remaining budget across the domain's accounts (no per-user values)."""
    rows = Ledger(ledger_path).balances(domain=domain)
    if not rows:
        return []
    spent = sorted(float(r["spent"]) for r in rows)
    remaining = sorted(float(r["remaining"]) for r in rows)
    cap = max(float(r["cap"]) for r in rows)

    def q(v: list[float], p: float) -> float:
        return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]

    return [{"accounts": len(rows), "cap": f"{cap:g}",
             "spent min / median / max": f"{spent[0]:.4g} / {q(spent, .5):.4g} / {spent[-1]:.4g}",
             "remaining min / median / max":
                 f"{remaining[0]:.4g} / {q(remaining, .5):.4g} / {remaining[-1]:.4g}",
             "accounts within 10% of cap": sum(1 for r in remaining if r <= 0.1 * cap)}]


def write_release_report_fn(rdir: str, manifest: dict[str, Any], denied: list[dict[str, Any]],
                            rejected: list[dict[str, Any]], ledger_path: str,
                            publish_dir: str | None = None) -> dict[str, str]:
    """Write ``report.md``/``report.html`` and plots for one release.

    `rdir` is where the files are written (the release's private build
    directory); `publish_dir` (default `rdir`) is where they will be once the
    release is published, which the Prefect artifact's plot links point to.
    """
    from tasks import plots  # matplotlib: imported when a report is drawn, not at start-up

    out = Path(rdir)
    counts = manifest["counts"]
    params = manifest["parameters"]
    units = manifest["units"]
    plot_files: list[tuple[str, str]] = []
    files = manifest.get("files", {})
    if "values" in files:
        dom_cols = [c for c in _value_columns(out / files["values"])]
        plot_files.append(("Sample of released curves", plots.plot_private_curves(
            out / files["values"], dom_cols, out / "plots" / "private_curves.png", units,
            manifest.get("value_unit", ""), manifest.get("time_unit", ""))))
    if "samples" in files:
        recon = out / files["reconstruction"] if "reconstruction" in files else None
        plot_files.append(("Privatized samples and CPR reconstruction of one stream",
                           plots.plot_private_streams(out / files["samples"], recon,
                                                      out / "plots" / "private_stream.png")))
    budget = budget_summary(ledger_path, manifest["domain"])
    amount = format_fraction(Fraction(params.get("amount") or params.get("epsilon")))
    notion = params.get("notion")
    lines = [
        f"# Release `{manifest['release_id']}`",
        "",
        f"- Flow: `{manifest['flow']}`; domain `{manifest['domain']}` ({units})",
        f"- Mechanism: `{manifest['mechanism']}`; notion `{notion}`; "
        f"{'ρ' if notion == 'cgp' else 'ε'} = {amount}"
        + (f" per window of w = {params.get('w')} steps (ε/w per sample)"
           if notion == "wevent" else " per curve"),
        f"- Parameters: `{_compact(params)}`",
        f"- Input fingerprint (sha256): `{manifest['input_fingerprint']}`; ledger entries "
        f"{manifest['ledger_entries']['first_seq']}–{manifest['ledger_entries']['last_seq']}",
        "",
        "## Users",
        "",
        md_table([{"released": counts["users_released"], "denied (budget)": counts["users_denied"],
                   "rejected (invalid input)": counts["users_rejected"],
                   "curves/streams": counts["items"], "points": counts["points"]}],
                 ["released", "denied (budget)", "rejected (invalid input)", "curves/streams",
                  "points"]),
        "### Denied (budget would be exceeded; nothing drawn, nothing released)",
        "",
        md_table(denied, ["user_id", "reason"]),
        "### Rejected (invalid input; nothing charged)",
        "",
        md_table([{"user_id": r["user_id"], "reasons": "; ".join(r["reasons"])}
                  for r in rejected], ["user_id", "reasons"]),
        "## Budget",
        "",
        f"Across all accounts of domain `{manifest['domain']}` after this release ({units}):",
        "",
        md_table(budget, list(budget[0]) if budget else []),
        "## Error bounds (data-independent)",
        "",
    ]
    eb = manifest.get("error_bound") or {}
    if notion == "wevent":
        lines.append(f"Each Square Wave report has standard deviation at most "
                     f"{eb.get('max') or 0:.4g} (normalised units) around its unbiased estimate.")
    elif eb.get("max") is not None:
        lines.append(f"With probability ≥ {1 - (eb.get('beta') or 0):.2f} each released curve "
                     f"is within its ErrBound of the input's projection: mean "
                     f"{eb['mean']:.4g}, max {eb['max']:.4g} ({units}); the bound adds "
                     "the (unreleased) projection error.")
        if eb.get("rms_mean") is not None:
            lines.append(f"Divided by the square root of each curve's duration this is an RMS "
                         f"deviation over time of mean {eb['rms_mean']:.4g}, max "
                         f"{eb['rms_max']:.4g} ({manifest.get('value_unit', 'value units')}).")
    if manifest.get("periods"):
        per = manifest["periods"]
        lines += ["", "## Reconstruction (CPR, post-processing)", "",
                  md_table(per, ["user_id", "stream_id", "samples", "period", "status"], 20)]
    lines += ["", "## Plots (private outputs only)", ""]
    for title, name in plot_files:
        lines += [f"### {title}", "", f"![{title}](plots/{name})", ""]
    lines += ["", f"<p class='note'>{manifest.get('public_metadata', '')}.</p>", ""]
    text = "\n".join(lines)
    html = render(text, out / "report.md", f"privpipe release {manifest['release_id']}")
    # images are embedded from where they are now (the private build directory)
    publish_artifacts(manifest["release_id"], text, out, [
        {"release_id": manifest["release_id"], "domain": manifest["domain"],
         "released": counts["users_released"], "denied": counts["users_denied"],
         "rejected": counts["users_rejected"]}])
    return {"md": str(out / "report.md"), "html": str(html)}


def _compact(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _value_columns(values_path: Path) -> list[str]:
    import pyarrow.parquet as pq

    names = pq.read_schema(values_path).names
    return [n for n in names if n not in ("user_id", "curve_id", "t")]


write_release_report = task(write_release_report_fn, name="release-report", persist_result=False)
