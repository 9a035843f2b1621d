"""Printing a benchmark's Markdown table, and keeping it beside earlier runs."""
from __future__ import annotations

from pathlib import Path


def publish(text: str, markdown: str | Path | None) -> None:
    """Print `text`; when `markdown` is a path, also append it there (earlier runs are kept)."""
    print(text)
    if markdown:
        with open(markdown, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of `rows` (cells already formatted) under `columns`."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
