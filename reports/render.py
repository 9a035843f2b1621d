"""Rendering of reports: Markdown text, one self-contained HTML page, Prefect artifacts.

A report is Markdown (``report.md``, also the Prefect artifact) plus its PNG
plots (``plots/*.png``) and an HTML page (``report.html``) that embeds every
plot as a ``data:`` URI, so the page alone (mailed, archived, printed to PDF)
shows everything. Every cell and heading built from data (user ids, release
ids, reasons) is escaped for both Markdown and HTML: an id is shown verbatim,
never interpreted.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import markdown as md_lib

from files.report_files import save_bytes, save_text
from reports.artifacts import artifact_key, embed_images

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 62em;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td { overflow-wrap: break-word; }
code { background: #f6f6f6; padding: 0 0.2em; overflow-wrap: break-word; }
img { max-width: 100%; border: 1px solid #ddd; }
h1 { border-bottom: 2px solid #444; }
h2 { border-bottom: 1px solid #bbb; margin-top: 1.6em; }
blockquote { border-left: 4px solid #c60; background: #fff6ec; margin: 0.8em 0;
             padding: 0.4em 0.9em; }
.note { color: #555; font-size: 0.9em; }
@page { size: A4; margin: 14mm; }
@media print {
  body { max-width: none; margin: 0; padding: 0; font-size: 9.5pt; }
  h1, h2, h3 { break-after: avoid; page-break-after: avoid; }
  table, tr, img, blockquote { break-inside: avoid; page-break-inside: avoid; }
  img { max-height: 120mm; }
}
"""

# Inside a table cell or a line of text only these start Markdown syntax (`<`, `>`
# and `&` are HTML-escaped first).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")
_IMG = re.compile(r'<img alt="([^"]*)" src="plots/([A-Za-z0-9_.-]+\.png)" ?/?>')


def cell(value: Any) -> str:
    """Text of one table cell or inline value: escaped for Markdown and HTML."""
    text = str("" if value is None else value).replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def num(value: float, digits: int = 4) -> str:
    """A number for people: `digits` significant digits and thousands separators.

    No exponent between 1e-4 and 1e9 (``25,840``, ``0.000158``, ``1.174``).
    """
    v = float(value)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    mag = math.floor(math.log10(abs(v)))
    if mag >= 9 or mag < -4:
        return f"{v:.{digits - 1}e}"
    decimals = max(0, digits - 1 - mag)
    text = f"{round(v, decimals):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


_PREFIX = {"µ": 1e-6, "m": 1e-3, "": 1.0}
_SI_BASES = ("m", "V", "W", "Wh", "g", "s", "A", "Hz")


def quantity(value: float, unit: str) -> str:
    """`value` `unit`, a value below 1 in a smaller SI prefix (0.000158 mV -> ``0.158 µV``).

    Values of 1 or more stay in the given unit (people read MW as MW); units that
    are not an SI base with an optional prefix are kept as given.
    """
    prefix, base = ("", unit) if unit in _SI_BASES else (unit[:1], unit[1:])
    v = float(value)
    if (base not in _SI_BASES or prefix not in _PREFIX or v == 0 or not math.isfinite(v)
            or abs(v) >= 1):
        return f"{num(v)} {unit}"
    si = v * _PREFIX[prefix]
    best = next((p for p in ("", "m", "µ") if abs(si) / _PREFIX[p] >= 1), "µ")
    if _PREFIX[best] > _PREFIX[prefix]:
        best = prefix
    return f"{num(si / _PREFIX[best])} {best}{base}"


def md_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 50) -> str:
    """A Markdown table of `rows` (at most `limit`, then a line saying how many more)."""
    if not rows:
        return "_none_\n"
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows[:limit]:
        lines.append("| " + " | ".join(cell(r.get(c)) for c in columns) + " |")
    if len(rows) > limit:
        lines.append(f"\n_... and {len(rows) - limit} more (see the CSV/JSON next to this "
                     "report)._")
    return "\n".join(lines) + "\n"


def utc_text(value: Any) -> str:
    """A ledger timestamp (naive UTC) or aware datetime as ``YYYY-MM-DD HH:MM:SS UTC``."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def now_text() -> str:
    """The current time in UTC and in the machine's local time zone (for report headers)."""
    now = datetime.now(UTC)
    local = now.astimezone()
    return (f"{now.strftime('%Y-%m-%d %H:%M:%S')} UTC (local time {local.strftime('%H:%M:%S')} "
            f"{local.tzname()}, UTC{local.strftime('%z')[:3]}:{local.strftime('%z')[3:]})")


def write_plots(rdir: Path, plots: dict[str, bytes]) -> None:
    """Write each PNG of `plots` (name -> bytes) to ``rdir/plots/NAME``."""
    for name, png in plots.items():
        save_bytes(rdir / "plots" / name, png)


def to_html(markdown_text: str, title: str, plots: dict[str, bytes]) -> str:
    """The self-contained HTML page of a Markdown report.

    Every ``![alt](plots/NAME.png)`` becomes an ``<img>`` whose source is the
    PNG itself as a ``data:`` URI; an image missing from `plots` is an error
    (this is a bug), so a page never ships with a broken image.
    """
    body = md_lib.markdown(markdown_text, extensions=["tables", "fenced_code"])

    def embed(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in plots:
            raise AssertionError(f"this is a bug: report image {name!r} was not rendered")
        data = base64.b64encode(plots[name]).decode("ascii")
        return f'<img alt="{m.group(1)}" src="data:image/png;base64,{data}">'

    body = _IMG.sub(embed, body)
    if 'src="plots/' in body:
        raise AssertionError("this is a bug: a report image is not embedded")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>\n")


def render(markdown_text: str, rdir: Path, title: str, plots: dict[str, bytes],
           name: str = "report", written: dict[str, bytes] | None = None) -> Path:
    """Write ``NAME.md``, ``plots/*.png`` and the self-contained ``NAME.html`` in `rdir`.

    `written` holds images already in ``rdir/plots`` (written by a task before the
    report): they are embedded in the page and not written again.
    """
    write_plots(rdir, plots)
    save_text(rdir / f"{name}.md", markdown_text)
    return save_text(rdir / f"{name}.html",
                     to_html(markdown_text, title, {**(written or {}), **plots}))


def publish_artifacts(key: str, markdown_text: str, rdir: Path,
                      table: list[dict[str, Any]] | None = None) -> None:
    """Mirror a report as Prefect artifacts keyed by `key` (images embedded)."""
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
