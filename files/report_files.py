"""The one place reports and user-unit outputs write files: `files.safe_files`.

Every report page, plot, table export and user-unit output goes through these
functions, which create each file as a new private file (exclusive, no-follow,
renamed into place: docs/files.md) inside a directory made by `make_dirs`. A
reader never sees half a file, and a symlink planted at a name is replaced,
never written through. The directory gets the operator's modes when its
writer is done (`set_output_modes`, called by the release publisher or by the
audit and evaluate writers).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from files.safe_files import NewFile, make_dirs, set_output_modes, write_file

__all__ = ["finish_dir", "new_file", "save_bytes", "save_text"]


class new_file:  # noqa: N801 - used like open()
    """``with new_file(path) as fh:`` a new private file that appears at `path` on exit."""

    def __init__(self, path: str | os.PathLike[str]):
        """Prepare the new file at `path` (its directory is created if needed)."""
        self.path = Path(path)
        make_dirs(self.path.parent)
        self._new = NewFile(self.path)

    def __enter__(self) -> BinaryIO:
        return self._new.__enter__()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._new.__exit__(exc_type, exc, tb)


def save_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` as a new private file; return the path."""
    make_dirs(Path(path).parent)
    write_file(path, data)
    return Path(path)


def save_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 `text` to `path` as a new private file; return the path."""
    return save_bytes(path, text.encode("utf-8"))


def finish_dir(path: str | os.PathLike[str]) -> None:
    """Give a finished report directory (audit, evaluate) the operator's modes."""
    set_output_modes(path)
