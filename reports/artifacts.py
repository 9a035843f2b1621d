"""Prefect artifacts of a report: keyed by release id, images embedded.

Prefect artifact keys allow lowercase letters, digits and dashes only, so a
release id becomes its key by one documented rule (`artifact_key`): lowercase,
and every other character becomes ``-`` (``rc-ais_tracks-3f2a`` ->
``rc-ais-tracks-3f2a``); the artifact's description carries the exact id and
the artifact belongs to the flow run named after it. Images are embedded as
``data:`` URIs (`embed_images`), so the markdown renders in the Prefect UI
wherever the UI runs, not only on the machine holding the files.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

_IMAGE = re.compile(r"!\[([^\]]*)\]\((plots/[^)\s]+\.png)\)")
_KEY_MAX = 100


def artifact_key(name: str) -> str:
    """The Prefect artifact key of `name` (a release id, ``audit``, ``evaluate``)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-"
                   for c in name.lower())[:_KEY_MAX]


def embed_images(markdown_text: str, rdir: Path) -> str:
    """Replace every ``![t](plots/x.png)`` by the PNG's bytes as a ``data:`` URI.

    A link whose file does not exist is left as it is.
    """
    def inline(m: re.Match[str]) -> str:
        path = rdir / m.group(2)
        if not path.is_file():
            return m.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"![{m.group(1)}](data:image/png;base64,{data})"

    return _IMAGE.sub(inline, markdown_text)
