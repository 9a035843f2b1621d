"""A release's output directory: built privately, sealed by hashes, renamed into place once.

A release never writes into ``OUT/<release_id>/``. It builds the directory in
its staging directory (`ReleaseBuild.path`, private), writes every file there
as a new private file (`files.safe_files`), seals it (the manifest records the
SHA-256 of every other file), and publishes it with one rename that refuses to
replace anything (`files.safe_files.rename_new`). So ``OUT/<release_id>/``
either does not exist or is complete, and no file privpipe writes can be a
symlink planted by someone else.

A rerun that finds ``OUT/<release_id>/`` checks it against the manifest the
ledger holds (`check_published`) and leaves it alone; any difference (a file
edited, added, removed, replaced by a symlink) is an `OutputIntegrityError`
naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from files.outputs import json_bytes
from files.safe_files import (
    NewFile,
    fsync_dir,
    make_dirs,
    rename_new,
    set_output_modes,
    tree_sha256,
    write_file,
)
from schemas.errors import OutputIntegrityError
from schemas.names import check_relative_path

MANIFEST = "manifest.json"
PUBLISHED_STATES = ("settled", "closed")
_REDO = ("move it away and rerun the same command: privpipe rebuilds the same files from "
         "the ledger and charges nothing twice")


class ReleaseBuild:
    """The private directory a release is built in, published as ``OUT/<release_id>``.

    Attributes:
        path: the build directory (inside the release's staging directory).
        target: ``OUT/<release_id>``.
    """

    def __init__(self, staging: str | Path, out_root: str | Path, release_id: str):
        """Create the empty build directory (mode 0700) for `release_id`."""
        self.path = make_dirs(Path(staging) / "release")
        self.target = Path(out_root) / release_id

    def file(self, relative: str) -> NewFile:
        """A new private file at `relative` (safe names only, e.g. ``plots/map.png``)."""
        parts = check_relative_path(relative, "release file")
        if len(parts) > 1:
            make_dirs(self.path.joinpath(*parts[:-1]))
        return NewFile(self.path.joinpath(*parts))

    def seal(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Record the SHA-256 of every built file in the manifest and write ``manifest.json``.

        Returns:
            The manifest with its ``sha256`` map (relative path -> hex digest).
        """
        sealed = {**manifest, "sha256": tree_sha256(self.path, skip=(MANIFEST,))}
        write_file(self.path / MANIFEST, json_bytes(sealed))
        return sealed

    def publish(self, manifest: dict[str, Any]) -> Path:
        """Give the build the operator's modes and rename it to `target` (never replacing).

        If `target` appeared meanwhile (a concurrent rerun of the same release), it
        is kept when it checks out against `manifest`.

        Raises:
            OutputIntegrityError: `target` exists and is not this release's output.
        """
        set_output_modes(self.path)
        try:
            rename_new(self.path, self.target)
        except FileExistsError:
            check_published(self.target, manifest)
            return self.target
        fsync_dir(self.target.parent)
        return self.target


def published_release(out_root: str | Path, release_id: str,
                      record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manifest of ``OUT/<release_id>`` if it is published and intact; None if absent.

    Args:
        out_root: the output directory.
        release_id: a safe release id.
        record: the ledger's record of the release (`Ledger.release`), or None.

    Raises:
        OutputIntegrityError: the directory exists but the ledger never published
            it, or it differs from the manifest the ledger holds.
    """
    target = Path(out_root) / release_id
    if not os.path.lexists(target):
        return None
    manifest = (record or {}).get("manifest") or {}
    if record is None or record.get("state") not in PUBLISHED_STATES or "sha256" not in manifest:
        raise OutputIntegrityError(
            f"{target} exists but is not a release this ledger published (its record: "
            f"{record.get('state') if record else 'none'}); privpipe writes each release into "
            f"a new directory and writes nothing into this one: {_REDO}")
    check_published(target, manifest)
    return manifest


def check_published(target: Path, manifest: dict[str, Any]) -> None:
    """Check that `target` holds exactly the files of `manifest`, byte for byte.

    Raises:
        OutputIntegrityError: naming the first file that differs (or is a symlink,
            missing or extra).
    """
    try:
        digests = tree_sha256(target)
    except OutputIntegrityError as err:
        raise OutputIntegrityError(f"{err}: the published release was changed; {_REDO}") from None
    expected = dict(manifest.get("sha256") or {})
    problem = None
    if digests.pop(MANIFEST, None) is None:
        problem = f"{target / MANIFEST} is missing"
    else:
        try:
            on_disk = json.loads((target / MANIFEST).read_bytes())
        except ValueError:
            on_disk = None
        if on_disk != json.loads(json_bytes(manifest)):
            problem = f"{target / MANIFEST} differs from the manifest the ledger holds"
    for rel in sorted(set(expected) | set(digests)):
        if problem is not None:
            break
        if rel not in digests:
            problem = f"{target / rel} is missing"
        elif rel not in expected:
            problem = f"{target / rel} is not part of the release"
        elif digests[rel] != expected[rel]:
            problem = f"{target / rel} does not match its SHA-256 in the manifest"
    if problem is not None:
        raise OutputIntegrityError(f"{problem}: the published release was changed; {_REDO}")
