"""The ledger's store of published files in a backup, and back into a restored ledger.

A backup copies the files of the store (`ledger.published`) that the
snapshot's **settled** releases name in their manifests (MAC'd in the
ledger, verified with the snapshot): ``<sha256><suffix>`` for each file name
and digest a settled manifest records. Each file is hashed while copied and
must match its name and that digest; a file that does not (edited on disk),
or that is not a regular file (a symlink is never followed), is refused with
the file named and nothing is kept. A named file the store does not hold
(not every output file is kept, only a stream's ``samples.parquet``) is
simply not copied. The copies go to ``published/`` of the backup directory
(0700, files 0600) and are listed in its manifest (``published``: file,
sha256, size, release_id, name).

A restore checks each listed file against the snapshot's settled manifests
(a file no settled release names is refused) and keeps it in the target's
store through `published.Incoming`, which hashes the bytes again and keeps
them only when they match (an edited file is refused, named). A stored file
is named by its content, so keeping it again is idempotent, and a file kept
by a restore that is then refused is never read: only a settled release that
names its digest reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import duckdb

from ledger import published
from ledger.errors import LedgerIntegrityError, PublishedFileError

STORE_DIR = published.STORE_NAME


def named_files(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    """Stored name -> {sha256, release_id, name} of every file a settled release's manifest names.

    The first release (by id) naming a digest is the one recorded.
    """
    rows = con.execute("SELECT release_id, manifest FROM releases WHERE state = 'settled' "
                       "AND manifest IS NOT NULL ORDER BY release_id").fetchall()
    out: dict[str, dict[str, str]] = {}
    for rid, text in rows:
        digests = (json.loads(text) or {}).get("sha256") or {}
        for name, sha in sorted(digests.items()) if isinstance(digests, dict) else ():
            if isinstance(sha, str) and published._HEX64.fullmatch(sha):
                out.setdefault(published.stored_name(sha, name),
                               {"sha256": sha, "release_id": rid, "name": name})
    return out


def _open_regular(path: Path, what: str) -> Any:
    """`path` opened for reading without following a link; None if missing.

    Raises:
        LedgerIntegrityError: a symlink or not a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise LedgerIntegrityError(f"{what} {str(path)!r} cannot be opened without following "
                                   f"a link ({err.strerror}); nothing was kept") from None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise LedgerIntegrityError(f"{what} {str(path)!r} is not a regular file; nothing "
                                   "was kept")
    return f


def _copy_checked(src: Any, dest: Path, expected: str, what: str) -> int:
    """Copy the open file `src` to the new file `dest` (0600), hashing; its size.

    Raises:
        LedgerIntegrityError: the bytes do not match `expected` (`dest` removed).
    """
    h, size = hashlib.sha256(), 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            while block := src.read(published.BLOCK):
                h.update(block)
                size += len(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != expected:
            raise LedgerIntegrityError(
                f"{what} does not match its name and the SHA-256 its release's manifest "
                f"records ({expected[:16]}...): edited or damaged on disk; nothing was kept. "
                "Remove it (the backup then goes without it) or keep the genuine bytes again "
                "(run the release again: it replays and keeps its samples)")
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return size


def back_up_store(store: Path, named: dict[str, dict[str, str]], out: Path
                  ) -> list[dict[str, Any]]:
    """Copy the named files the store holds into ``out/published/`` (module docstring).

    Returns:
        The manifest's ``published`` list, sorted by file.

    Raises:
        LedgerIntegrityError: a stored file does not match, or is a link or not a file.
    """
    try:
        published.open_store(store, create=False)
    except PublishedFileError as err:
        if "does not exist" in str(err):
            return []
        raise LedgerIntegrityError(str(err)) from None
    dest_dir = out / STORE_DIR
    listed: list[dict[str, Any]] = []
    for fname, info in sorted(named.items()):
        what = f"the ledger's stored copy of {info['release_id']}/{info['name']}"
        f = _open_regular(store / fname, what)
        if f is None:
            continue
        if not listed:
            os.mkdir(dest_dir, 0o700)
        with f:
            size = _copy_checked(f, dest_dir / fname, info["sha256"],
                                 f"{what} ({str(store / fname)!r})")
        listed.append({"file": fname, "size": size, **info})
    if listed:
        published._fsync_dir(dest_dir)
    return listed


def _checked_entry(entry: Any, named: dict[str, dict[str, str]], where: Path
                   ) -> dict[str, str]:
    """The settled release naming a listed file (LedgerIntegrityError: none, or other digest)."""
    fname = entry.get("file") if isinstance(entry, dict) else None
    info = named.get(fname) if isinstance(fname, str) else None
    if info is None or entry.get("sha256") != info["sha256"]:
        raise LedgerIntegrityError(
            f"the backup {str(where)!r} lists a published file {fname!r} that no settled "
            "release of its snapshot names with that SHA-256; nothing was restored")
    return info


def check_backup_store(snap_dir: Path, entries: Any, named: dict[str, dict[str, str]]
                       ) -> None:
    """Hash every listed file of a backup against its name and the snapshot's manifests.

    Raises:
        LedgerIntegrityError: a file is missing, a link, not named, or edited (named).
    """
    if not isinstance(entries, list):
        raise LedgerIntegrityError(f"the manifest of {str(snap_dir)!r}: 'published' is not "
                                   "a list; nothing was restored")
    for entry in entries:
        info = _checked_entry(entry, named, snap_dir)
        path = snap_dir / STORE_DIR / entry["file"]
        f = _open_regular(path, "the backup's published file")
        if f is None:
            raise LedgerIntegrityError(f"the backup's published file {str(path)!r} is "
                                       "missing; nothing was restored")
        h = hashlib.sha256()
        with f:
            while block := f.read(published.BLOCK):
                h.update(block)
        if h.hexdigest() != info["sha256"]:
            raise LedgerIntegrityError(
                f"the backup's published file {str(path)!r} ({info['release_id']}/"
                f"{info['name']}) does not match its SHA-256 in the snapshot's manifest "
                "(edited or damaged since the backup); nothing was restored")


def restore_store(snap_dir: Path, entries: list[dict[str, Any]],
                  named: dict[str, dict[str, str]], store: Path) -> int:
    """Keep each listed file of a backup in `store` (0700), hashed again; how many.

    Raises:
        LedgerIntegrityError: a file does not match (named), or the store is unsafe.
    """
    for entry in entries:
        info = _checked_entry(entry, named, snap_dir)
        path = snap_dir / STORE_DIR / entry["file"]
        try:
            published.put(store, {"state": "settled", "manifest": {"sha256": {
                info["name"]: info["sha256"]}}}, info["release_id"], info["name"],
                published.blocks_of(path))
        except (PublishedFileError, OSError) as err:
            raise LedgerIntegrityError(f"the backup's published file {str(path)!r} cannot be "
                                       f"kept in {str(store)!r}: {err}") from None
    return len(entries)
