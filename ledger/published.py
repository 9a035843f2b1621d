"""The ledger's store of published files: what a later release on another host reads.

A stream release continues the earlier ones (`tasks.stream_history`): day 2
reads day 1's published ``samples.parquet``. Kept only under day 1's output
root, day 2 on another host (another ``--out``) would not find it. So the
ledger keeps a copy, **content-addressed by SHA-256**, in the directory
``published/`` beside the ledger file (``<ledger dir>/published/<sha256>.parquet``),
and serves it like any other ledger operation (`Ledger.put_published`,
`Ledger.published`; over ``privpipe ledger serve``, streaming routes).

Guarantees:

- **Only what the ledger recorded.** A file is accepted only for a release
  recorded as settled whose manifest (MAC'd in the ledger) names it with
  exactly the SHA-256 of the bytes given; the bytes are hashed while they are
  written to a new temporary file in the store and renamed into place only
  when the digest matches (`PublishedFileError` otherwise; nothing is kept).
- **Checked on every read.** A reader copies the stored file out while hashing
  it and refuses it (`OutputIntegrityError`, nothing left at the destination)
  when it does not match the manifest's digest: a file edited on disk is
  detected and not used.
- **Never through a symlink.** The store directory must be a real directory
  of the ledger's owner (mode 0700); stored files are created exclusive,
  no-follow, mode 0600, fsynced and renamed (a rename replaces a planted
  symlink, never writes through it); reads open with ``O_NOFOLLOW``.
- **Idempotent.** The same bytes have the same name: storing them again
  leaves the file as it is (a stored file that no longer matches its name is
  replaced).

Reading a published file charges nothing: it is post-processing of output
that has already left the system.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ledger.errors import PublishedFileError
from schemas.errors import OutputIntegrityError
from schemas.names import check_name

STORE_NAME = "published"
BLOCK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SUFFIX = re.compile(r"(\.[A-Za-z0-9]{1,16})?")


def store_dir(ledger_path: str | os.PathLike[str]) -> Path:
    """The store of the ledger at `ledger_path`: ``published/`` in the ledger's directory."""
    return Path(ledger_path).parent / STORE_NAME


def _suffix(name: str) -> str:
    suffix = Path(name).suffix
    return suffix if _SUFFIX.fullmatch(suffix) else ""


def stored_name(sha256: str, name: str) -> str:
    """The store's file name of bytes with digest `sha256` published as `name`."""
    return f"{sha256}{_suffix(name)}"


def expected_sha256(record: dict[str, Any] | None, release_id: str, name: str) -> str:
    """The SHA-256 a settled release's manifest records for its file `name`.

    Raises:
        ParameterError: `release_id` or `name` is not a safe name.
        PublishedFileError: no such release, not settled, or its manifest does
            not name `name` with a digest.
    """
    check_name(release_id, "release_id")
    check_name(name, "file name")
    if record is None:
        raise PublishedFileError(f"the ledger has no release {release_id!r}")
    if record.get("state") != "settled":
        raise PublishedFileError(
            f"release {release_id!r} is {record.get('state')}, not settled: only a settled "
            "release's published files are kept in the ledger")
    digest = ((record.get("manifest") or {}).get("sha256") or {}).get(name)
    if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        raise PublishedFileError(f"the manifest of release {release_id!r} in the ledger names "
                                 f"no file {name!r} with a SHA-256")
    return digest


def open_store(store: Path, *, create: bool) -> Path:
    """`store` checked: a real directory (not a symlink) of this user, mode 0700.

    Created (0700) when `create` and missing.

    Raises:
        PublishedFileError: a symlink or not a directory, another user's, or
            missing (when not `create`).
    """
    if create:
        try:
            os.mkdir(store, 0o700)
        except FileExistsError:
            pass
        except OSError as err:
            raise PublishedFileError(f"cannot create the ledger's store {str(store)!r}: "
                                     f"{err.strerror}") from None
    try:
        st = os.lstat(store)
    except FileNotFoundError:
        raise PublishedFileError(f"the ledger's store {str(store)!r} does not exist (nothing "
                                 "was kept there yet)") from None
    if not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise PublishedFileError(f"the ledger's store {str(store)!r} is {what}: it is never "
                                 "followed; remove it (a real directory is created)")
    if st.st_uid != os.geteuid():
        raise PublishedFileError(f"the ledger's store {str(store)!r} belongs to uid "
                                 f"{st.st_uid}, not to the ledger's owner; remove it")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(store, 0o700)
    return store


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_sha256(path: Path) -> str | None:
    """SHA-256 of the regular file at `path` (no symlink followed), None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        h = hashlib.sha256()
        while block := f.read(BLOCK):
            h.update(block)
        return h.hexdigest()


class Incoming:
    """Bytes being written to a new temporary file of the store, hashed as they come."""

    def __init__(self, store: Path):
        """Create the temporary file (exclusive, no-follow, 0600) in the checked store."""
        self.store = open_store(store, create=True)
        self.tmp = store / f".incoming-{uuid.uuid4().hex}.tmp"
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        self.file: BinaryIO = io.FileIO(fd, "wb")
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, block: bytes) -> None:
        """Append and hash one block."""
        self.hash.update(block)
        self.size += len(block)
        view = memoryview(block)
        while view:
            view = view[self.file.write(view):]

    def commit(self, expected: str, release_id: str, name: str) -> dict[str, Any]:
        """Keep the bytes as ``<sha256><suffix>`` if their digest is `expected`.

        Returns:
            ``sha256``, ``size`` and ``stored`` (False: the same bytes were already there).

        Raises:
            PublishedFileError: the digest differs (nothing is kept).
        """
        try:
            got = self.hash.hexdigest()
            if got != expected:
                raise PublishedFileError(
                    f"the bytes given for {release_id}/{name} ({self.size} bytes, SHA-256 "
                    f"{got[:16]}...) are not the file its manifest in the ledger names "
                    f"(SHA-256 {expected[:16]}...); nothing was kept")
            final = self.store / stored_name(expected, name)
            if _file_sha256(final) == expected:
                return {"sha256": expected, "size": self.size, "stored": False}
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, final)  # replaces a planted symlink, never follows it
            _fsync_dir(self.store)
            return {"sha256": expected, "size": self.size, "stored": True}
        finally:
            self.abort()

    def abort(self) -> None:
        """Close and remove the temporary file (idempotent)."""
        if not self.file.closed:
            self.file.close()
        self.tmp.unlink(missing_ok=True)


def blocks_of(data: bytes | str | os.PathLike[str] | BinaryIO) -> Iterator[bytes]:
    """The blocks of `data`: bytes, a file path (opened without following a symlink) or a stream."""
    if isinstance(data, bytes | bytearray | memoryview):
        yield bytes(data)
        return
    if isinstance(data, str | os.PathLike):
        fd = os.open(data, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            yield from iter(lambda: f.read(BLOCK), b"")
        return
    yield from iter(lambda: data.read(BLOCK), b"")


def put(store: Path, record: dict[str, Any] | None, release_id: str, name: str,
        blocks: Iterable[bytes]) -> dict[str, Any]:
    """Keep a settled release's published file `name` in `store` (module docstring).

    Raises:
        PublishedFileError: the release does not name that file with that digest,
            or the store is unsafe.
    """
    expected = expected_sha256(record, release_id, name)
    incoming = Incoming(store)
    try:
        for block in blocks:
            incoming.write(block)
    except BaseException:
        incoming.abort()
        raise
    return incoming.commit(expected, release_id, name)


def open_stored(store: Path, record: dict[str, Any] | None, release_id: str, name: str
                ) -> tuple[BinaryIO, str, int]:
    """(open file, expected SHA-256, size) of a stored file; no symlink is followed.

    The caller (or its client) checks the bytes against the digest.

    Raises:
        PublishedFileError: no settled release names the file, the store is
            unsafe, or the file is not kept there.
        OutputIntegrityError: the stored name is a symlink or not a regular file.
    """
    expected = expected_sha256(record, release_id, name)
    path = open_store(store, create=False) / stored_name(expected, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PublishedFileError(f"the ledger's store keeps no copy of {release_id}/{name} "
                                 f"({str(path)!r} is missing)") from None
    except OSError as err:
        raise OutputIntegrityError(f"the ledger's copy of {release_id}/{name} ({str(path)!r}) "
                                   f"cannot be opened without following a link "
                                   f"({err.strerror}): not used") from None
    f = os.fdopen(fd, "rb")
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
        f.close()
        raise OutputIntegrityError(f"the ledger's copy of {release_id}/{name} ({str(path)!r}) "
                                   "is not a regular file: not used")
    return f, expected, st.st_size


def receive(blocks: Iterable[bytes], expected: str, dest: Path, what: str) -> Path:
    """Write `blocks` to the new private file `dest` if their SHA-256 is `expected`.

    Raises:
        OutputIntegrityError: the bytes do not match `expected` (nothing is left at `dest`).
    """
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            for block in blocks:
                h.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != expected:
            raise OutputIntegrityError(
                f"the ledger's copy of {what} does not match the SHA-256 in its manifest "
                f"(edited or replaced in the store): not used")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def copy_out(store: Path, record: dict[str, Any] | None, release_id: str, name: str,
             dest: Path) -> Path:
    """Copy a stored file to `dest`, checking it against the manifest's digest on the way.

    Raises:
        PublishedFileError: see `open_stored`.
        OutputIntegrityError: the stored bytes do not match (nothing at `dest`).
    """
    f, expected, _ = open_stored(store, record, release_id, name)
    with f:
        return receive(iter(lambda: f.read(BLOCK), b""), expected, Path(dest),
                       f"{release_id}/{name}")


def stored_files(store: Path) -> list[Path]:
    """The store's files whose content matches their name (what a backup copies), sorted.

    Temporary files, symlinks, other entries and files that do not match
    their digest name are left out.
    """
    try:
        names = sorted(os.listdir(open_store(store, create=False)))
    except PublishedFileError:
        return []
    out = []
    for n in names:
        digest = n.split(".", 1)[0]
        if _HEX64.fullmatch(digest) and _file_sha256(store / n) == digest:
            out.append(store / n)
    return out
