"""A small HTML reader for report tests: headings, tables, images and text, as people see them."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass
class Page:
    """What a rendered report page shows."""

    headings: list[tuple[str, str]] = field(default_factory=list)  # (tag, text)
    tables: list[list[list[str]]] = field(default_factory=list)     # rows of cell texts
    images: list[dict[str, str]] = field(default_factory=list)      # attributes of <img>
    text: str = ""
    tags: list[str] = field(default_factory=list)                   # every start tag
    table_headings: list[int] = field(default_factory=list)         # heading index per table

    def heading_texts(self) -> list[str]:
        """The text of every h1-h4."""
        return [t for _, t in self.headings]

    def table_after(self, heading: str) -> list[dict[str, str]]:
        """The first table after the heading that starts with `heading`, as row dicts."""
        idx = next(i for i, (_, t) in enumerate(self.headings) if t.startswith(heading))
        for table, under in zip(self.tables, self.table_headings, strict=True):
            if under >= idx and table:
                return [dict(zip(table[0], r, strict=True)) for r in table[1:]]
        raise LookupError(f"no table after heading {heading!r}")

    def tables_as_dicts(self) -> list[list[dict[str, str]]]:
        """Every table as a list of row dicts keyed by its header."""
        return [[dict(zip(t[0], r, strict=True)) for r in t[1:]] for t in self.tables if t]

    def section_text(self, heading: str) -> str:
        """The text between the heading that starts with `heading` and the next heading."""
        idx = next(i for i, (_, t) in enumerate(self.headings) if t.startswith(heading))
        start = self.text.index(self.headings[idx][1]) + len(self.headings[idx][1])
        nxt = self.headings[idx + 1][1] if idx + 1 < len(self.headings) else None
        end = self.text.index(nxt, start) if nxt else len(self.text)
        return self.text[start:end].strip()


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._in: list[str] = []
        self._buf: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append(tag)
        if tag in ("style", "script", "title"):
            self._skip += 1
        if tag in ("h1", "h2", "h3", "h4"):
            self._in.append(tag)
            self._buf = []
        elif tag == "table":
            self.page.tables.append([])
            self.page.table_headings.append(len(self.page.headings) - 1)
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.page.images.append({k: v or "" for k, v in attrs})

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script", "title"):
            self._skip -= 1
        if tag in ("h1", "h2", "h3", "h4") and self._in:
            self._in.pop()
            self.page.headings.append((tag, " ".join("".join(self._buf).split())))
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.page.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self._text.append(data)
        if self._in:
            self._buf.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(path: str | Path) -> Page:
    """Parse a report page."""
    reader = _Reader()
    reader.feed(Path(path).read_text(encoding="utf-8"))
    reader.close()
    reader.page.text = " ".join(" ".join(reader._text).split())
    return reader.page


def embedded_pngs(page: Page) -> list[bytes]:
    """The decoded PNG of every image; fails unless each one is embedded as a data: URI."""
    out = []
    for img in page.images:
        src = img.get("src", "")
        assert src.startswith("data:image/png;base64,"), f"image not embedded: {src[:80]!r}"
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(PNG_MAGIC) and len(png) > 2000, "not a real PNG"
        out.append(png)
    return out
