"""Safe names: every name privpipe turns into a file or directory name.

Release ids (``OUT/<release_id>/``), domain names (they enter default release
ids), and the names of the files a release writes all pass `check_name`
before any path is built from them. The alphabet is documented in
``docs/files.md``:

* 1 to 128 characters: ASCII letters, digits, ``.``, ``_`` and ``-``;
* the first character is a letter or a digit (no leading ``.``: no hidden
  files, no ``.`` or ``..``; no leading ``-``: never read as an option);
* no ``..`` anywhere.

So a safe name never contains ``/``, is never absolute, never climbs out of
its directory and means the same thing on every file system.
"""

from __future__ import annotations

import re

from schemas.errors import ParameterError

SAFE_NAME_RULE = ("1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or a "
                  "digit, without '..' (no '/', no leading '.')")
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_safe_name(name: object) -> bool:
    """True when `name` is a string in the safe alphabet (see the module docstring)."""
    return isinstance(name, str) and _SAFE.fullmatch(name) is not None and ".." not in name


def check_name(name: object, what: str) -> str:
    """Return `name` if it is safe, else raise a ParameterError naming `what` and the rule.

    Args:
        name: the candidate name (e.g. a ``--release-id`` value).
        what: how the user gave it, e.g. ``"--release-id"``; it starts the message.

    Raises:
        ParameterError: `name` is not a safe name; nothing has been written yet.
    """
    if not is_safe_name(name):
        raise ParameterError(f"{what} {name!r} is not a safe name: it becomes a file name, so "
                             f"it must be {SAFE_NAME_RULE}")
    return name  # type: ignore[return-value]


def check_relative_path(path: str, what: str) -> tuple[str, ...]:
    """Split a ``/``-separated relative path and check each part with `check_name`.

    Args:
        path: e.g. ``"plots/private_curves.png"``.
        what: what the path is, for the error message.

    Returns:
        The parts, e.g. ``("plots", "private_curves.png")``.

    Raises:
        ParameterError: an empty, absolute or unsafe part.
    """
    parts = tuple(path.split("/"))
    for part in parts:
        check_name(part, f"{what} {path!r}: part")
    return parts
