"""The audit web page's building blocks: page frame, style sheet, tables, links, pagers.

Every value that comes from the ledger goes through `esc` (HTML escaping,
quotes included) or `link` (a URL built with `urllib.parse.urlencode`, then
escaped), so a user id such as ``<script>`` is shown as text. The style is the
static audit's (`reports.audit_report`): plain, printable, numbers aligned right.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import datetime
from fractions import Fraction
from typing import Any
from urllib.parse import urlencode

from ledger import format_fraction

PAGE_SIZE = 50

CSS = """
body{font-family:Georgia,'Times New Roman',serif;max-width:70rem;margin:0 auto;
 padding:0 1.2rem 3rem;color:#1b1b1b;line-height:1.45}
header{border-bottom:3px double #444;margin-bottom:1rem}
header h1{font-size:1.5rem;margin:.8rem 0 .3rem}
nav a{margin-right:1.1rem;font-family:Helvetica,Arial,sans-serif;font-size:.95rem}
nav form{display:inline;margin-left:.5rem}
h2{font-size:1.2rem;border-bottom:1px solid #bbb;margin-top:1.8rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem;
 font-family:Helvetica,Arial,sans-serif}
th,td{border:1px solid #ccc;padding:.25rem .55rem;text-align:left;vertical-align:top}
th{background:#f1f1ec}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#155724;font-weight:bold}
.bad{color:#b00020;font-weight:bold}
.banner{border:2px solid;padding:.6rem .9rem;margin:1rem 0;font-size:1.05rem}
.banner.bad{background:#fdecea;border-color:#b00020}
.banner.ok{background:#eaf6ec;border-color:#155724}
.banner.wait{background:#fff8e1;border-color:#a67c00;color:#6b4f00}
.note{color:#555;font-size:.9rem}
.hash{font-family:monospace;font-size:.85rem;word-break:break-all}
form.filters{font-family:Helvetica,Arial,sans-serif;font-size:.92rem;margin:.6rem 0}
form.filters label{margin-right:.8rem}
.pager{margin:.6rem 0;font-family:Helvetica,Arial,sans-serif}
.pager a{margin-right:1rem}
@media print{nav,form,.pager{display:none}body{max-width:none;font-size:10pt}
 a{color:inherit;text-decoration:none}.banner{border-width:1px}}
"""

NAV = (("Overview", "/"), ("Releases", "/releases"), ("Denials", "/denials"),
       ("Policy history", "/policy"), ("Since a checkpoint", "/since"))


def esc(value: Any) -> str:
    """`value` as HTML text (None: empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def url(path: str, **params: Any) -> str:
    """A link target: `path` with its query (None values left out), escaped for HTML."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return esc(path + ("?" + query if query else ""))


def link(text: Any, path: str, **params: Any) -> str:
    """An ``<a>`` to `path` with `params`, showing `text` (escaped)."""
    return f'<a href="{url(path, **params)}">{esc(text)}</a>'


def amount(value: Fraction | None, unit: str = "") -> str:
    """An exact amount as a decimal (or ``p/q (≈ d)``), with its unit."""
    if value is None:
        return ""
    return esc(format_fraction(value) + (f" {unit}" if unit else ""))


def when(value: datetime | None) -> str:
    """A time as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return "" if value is None else esc(value.strftime("%Y-%m-%d %H:%M:%S") + " UTC")


def count(value: int | None) -> str:
    """A whole number with thousands separators."""
    return "" if value is None else f"{int(value):,}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = (),
          empty: str = "None.") -> str:
    """A table of pre-escaped cells; columns in `numeric` are right-aligned."""
    def cell(tag: str, i: int, text: str) -> str:
        cls = ' class="num"' if i in numeric else ""
        return f"<{tag}{cls}>{text}</{tag}>"

    body = ["<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows]
    if not body:
        return f'<p class="note">{esc(empty)}</p>'
    head = "<tr>" + "".join(cell("th", i, esc(h)) for i, h in enumerate(headers)) + "</tr>"
    return f"<table><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


def pager(rows: list[Any], offset: int, path: str, **params: Any) -> tuple[list[Any], str]:
    """The rows of this page (one extra row means a next page) and its Previous/Next links."""
    more = len(rows) > PAGE_SIZE
    shown = rows[:PAGE_SIZE]
    parts = []
    if offset > 0:
        parts.append(link("← Previous page", path, **params,
                          offset=max(0, offset - PAGE_SIZE) or None))
    if shown:
        parts.append(f"<span>Rows {offset + 1:,}–{offset + len(shown):,}</span>")
    if more:
        parts.append(link("Next page →", path, **params, offset=offset + PAGE_SIZE))
    return shown, f'<div class="pager">{" ".join(parts)}</div>'


def page(title: str, body: str, ledger_name: str) -> str:
    """A whole page: header with the ledger's name, navigation and user lookup, then `body`."""
    nav = "".join(f'<a href="{href}">{esc(text)}</a>' for text, href in NAV)
    lookup = ('<form method="get" action="/user"><label>Look up a user: '
              '<input name="id" size="18" required></label> <button>Show</button></form>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(title)} — privacy ledger audit</title><style>{CSS}</style></head>"
            f"<body><header><h1>Privacy ledger audit: {esc(title)}</h1>"
            f'<p class="note">Ledger {esc(ledger_name)} — read-only view</p>'
            f"<nav>{nav}{lookup}</nav></header>{body}</body></html>")


def filter_form(path: str, fields: Sequence[tuple[str, str, str | None]],
                hidden: dict[str, str] | None = None) -> str:
    """A GET form of labelled text fields (name, label, current value) and a Show button."""
    inputs = "".join(f'<label>{esc(label)} <input name="{esc(name)}" value="{esc(value)}" '
                     f'size="14"></label>' for name, label, value in fields)
    extra = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                    for k, v in (hidden or {}).items())
    return (f'<form class="filters" method="get" action="{esc(path)}">{inputs}{extra}'
            "<button>Show</button></form>")
