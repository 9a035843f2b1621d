"""Safe file creation: the one way privpipe writes a file (see docs/files.md).

Every file is **born private**: created under a fresh temporary name with an
exclusive, no-follow open (``O_CREAT | O_EXCL | O_NOFOLLOW``) and mode 0600
whatever the process umask, written, optionally fsynced, then renamed over
its final name. A rename replaces a symlink planted at the final name; it
never writes through it. Directories are born 0700. A finished output
directory gets the operator's modes in one pass (`set_output_modes`), which
opens every entry without following symlinks and refuses anything that is not
a regular file or a directory.

The operator's modes come from ``PRIVPIPE_UMASK`` (octal, default ``077``):
outputs are ``0666 & ~umask``, directories ``0777 & ~umask``. The CLI also
applies it as the process umask (`apply_operator_umask`), so the ledger and the
Prefect database follow it too. Raw-data-bearing files (staging chunks, noise
seeds, the noise key) stay 0600 whatever the setting.

A write that runs out of space raises `FileSystemError` naming the file, the
size when known, the space left, and what to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import os
import stat
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from schemas.errors import FileSystemError, OutputIntegrityError, ParameterError

RAW_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
DEFAULT_UMASK = 0o077
UMASK_ENV = "PRIVPIPE_UMASK"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


# --------------------------------------------------------------------------- modes


def operator_umask() -> int:
    """The umask the operator chose in ``PRIVPIPE_UMASK`` (octal, e.g. ``027``), else 077.

    Raises:
        ParameterError: the setting is not an octal number in 000-777.
    """
    text = os.environ.get(UMASK_ENV, "").strip()
    if not text:
        return DEFAULT_UMASK
    digits = text[2:] if text.lower().startswith("0o") else text
    try:
        value = int(digits, 8)
    except ValueError:
        value = -1
    if not 0 <= value <= 0o777:
        raise ParameterError(f"{UMASK_ENV}={text!r} is not a umask: give an octal number such "
                             "as 077 (outputs 0600, the default) or 027 (group-readable)")
    return value


def apply_operator_umask() -> int:
    """Make `operator_umask()` the process umask (files DuckDB and Prefect create follow it).

    Group and world write bits are always masked in the process umask: the
    ledger, its WAL and Prefect's database are refused when another user could
    write them (`ledger.paths.check_private`), so nothing privpipe creates may
    be writable by others. Published outputs still get exactly the operator's
    modes (`set_output_modes`).
    """
    value = operator_umask()
    os.umask(value | 0o022)
    return value


def output_file_mode() -> int:
    """Mode of a published output file: ``0666 & ~PRIVPIPE_UMASK``."""
    return 0o666 & ~operator_umask()


def output_dir_mode() -> int:
    """Mode of a published output directory: ``0777 & ~PRIVPIPE_UMASK``."""
    return 0o777 & ~operator_umask()


# --------------------------------------------------------------------------- errors


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def _size(n: int) -> str:
    return f"{n} bytes" if n < 10_000 else f"{n / 1e6:.2f} MB"


@contextmanager
def disk_errors(path: Path, size: int | None = None) -> Iterator[None]:
    """Turn "no space left" (and quota) errors while writing `path` into a `FileSystemError`.

    The message names `path`, its size when the caller knows it, the space left
    on its file system and what to do.
    """
    try:
        yield
    except OSError as err:
        if err.errno not in _NO_SPACE:
            raise
        free = _free_bytes(path)
        facts = []
        if size is not None:
            facts.append(f"the file needs {_size(size)}")
        if free is not None:
            facts.append(f"{_size(free)} free there")
        detail = f" ({'; '.join(facts)})" if facts else ""
        raise FileSystemError(
            f"{os.strerror(err.errno)} writing {path}{detail}: free space on that file system "
            "or choose another output directory, then rerun the same command (a rerun "
            "charges nothing twice)") from None


# --------------------------------------------------------------------------- files


def _open_file(fd: int) -> BinaryIO:
    return io.BufferedWriter(io.FileIO(fd, "wb"), buffer_size=1 << 16)


class NewFile:
    """A file being written under a temporary name; it appears at `path` only on `commit`.

    Use as a context manager (commit on success, abort on error)::

        with NewFile(path) as fh:
            fh.write(data)

    Attributes:
        path: the final name.
        file: the buffered binary file to write to.
    """

    def __init__(self, path: str | Path, *, mode: int = RAW_FILE_MODE, durable: bool = True,
                 size: int | None = None):
        """Create the temporary file (exclusive, no-follow, exactly `mode`) next to `path`.

        `size`, when known, is named by a "no space left" error.
        """
        self.path = Path(path)
        self.durable = durable
        self.size = size
        self._tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
        with disk_errors(self.path):
            fd = os.open(self._tmp, _OPEN_NEW, mode)
        try:
            os.fchmod(fd, mode)  # exactly `mode`, whatever the process umask
        except BaseException:
            os.close(fd)
            self._tmp.unlink(missing_ok=True)
            raise
        self.file: BinaryIO = _open_file(fd)
        self._done = False

    def commit(self, target: str | Path | None = None) -> Path:
        """Flush, fsync (if durable), close and rename over `target` (default: `path`)."""
        final = Path(target) if target is not None else self.path
        try:
            with disk_errors(self.path, self.size):
                self.file.flush()
                if self.durable:
                    os.fsync(self.file.fileno())
                self.file.close()
            os.replace(self._tmp, final)
        except BaseException:
            self.abort()
            raise
        self._done = True
        return final

    def abort(self) -> None:
        """Close and delete the temporary file (nothing appears at `path`)."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):  # e.g. the flush of a full disk; deleted next
            self.file.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> BinaryIO:
        return self.file

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
            return
        self.abort()
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            with disk_errors(self.path, self.size):
                raise exc


def write_file(path: str | Path, data: bytes, *, mode: int = RAW_FILE_MODE,
               durable: bool = True) -> None:
    """Write `data` to `path` as a new private file (see `NewFile`); the error names `path`."""
    with NewFile(path, mode=mode, durable=durable, size=len(data)) as fh:
        fh.write(data)


def open_append(path: str | Path, *, mode: int = RAW_FILE_MODE) -> BinaryIO:
    """Open a log file for appending: created with exactly `mode`, never through a symlink.

    For logs that grow across runs (e.g. the temporary Prefect server's); an
    existing file keeps its mode.

    Raises:
        OSError: ELOOP when `path` is a symlink.
    """
    p = Path(path)
    with disk_errors(p):
        try:
            fd = os.open(p, _OPEN_NEW | os.O_APPEND, mode)
            os.fchmod(fd, mode)
        except FileExistsError:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    return os.fdopen(fd, "ab")


def make_dirs(path: str | Path, *, mode: int = PRIVATE_DIR_MODE) -> Path:
    """Create `path` (and missing parents) and check it is a real directory, not a symlink.

    A directory created here has exactly `mode`; an existing one is kept as is.

    Raises:
        FileSystemError: `path` is a symlink or not a directory, or the disk is full.
    """
    p = Path(path)
    with disk_errors(p):
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(p, mode)
            os.chmod(p, mode)
        except FileExistsError:
            pass
    st = os.lstat(p)
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise FileSystemError(f"{p} is {kind}: privpipe writes only into real directories; "
                              "remove it and rerun")
    return p


def private_dir(path: str | Path) -> Path:
    """Create or reuse `path` as a private directory: a real directory of ours, mode 0700.

    Raises:
        FileSystemError: `path` is a symlink, not a directory, or owned by another user.
    """
    p = make_dirs(path)
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise FileSystemError(f"{p} belongs to uid {st.st_uid}, not to this user: privpipe "
                                  "keeps raw data there and needs its own directory; remove it")
        if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
            os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)
    return p


# --------------------------------------------------------------------------- trees


def _walk(fd: int, prefix: str, where: Path) -> Iterator[tuple[str, int, bool]]:
    """Yield (relative path, open fd, is_dir) for every entry under directory `fd`.

    Entries are opened relative to their directory with O_NOFOLLOW, so a symlink
    is never followed; anything that is not a regular file or a directory is refused.
    """
    for name in sorted(os.listdir(fd)):
        rel = f"{prefix}{name}"
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise OutputIntegrityError(f"{where / rel} is a symlink")
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise OutputIntegrityError(f"{where / rel} is not a regular file")
        child = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            now = os.fstat(child)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise OutputIntegrityError(f"{where / rel} was replaced while being read")
            if stat.S_ISDIR(now.st_mode):
                yield rel, child, True
                yield from _walk(child, f"{rel}/", where)
            else:
                yield rel, child, False
        finally:
            os.close(child)


@contextmanager
def _open_tree(root: Path) -> Iterator[int]:
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OutputIntegrityError(f"{root} is not a directory (a symlink?)") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _sha256(fd: int) -> str:
    digest = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while block := os.read(fd, 1 << 20):
        digest.update(block)
    return digest.hexdigest()


HASH_THREADS = 2
"""Files `tree_sha256` hashes at once: hashlib hashes a 1 MB block without the GIL, and a
stream release's two large files (samples and samples_units) then take the two cores."""


def _sha256_of_dup(fd: int) -> str:
    """`_sha256` of a duplicated descriptor, closed after."""
    try:
        return _sha256(fd)
    finally:
        os.close(fd)


def tree_sha256(root: str | Path, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """SHA-256 of every file under `root` by ``/``-separated relative path (`skip` left out).

    Each file is opened (and checked) by the walk as before; its hash is taken
    on one of `HASH_THREADS` threads from a duplicate of that descriptor (the
    same open file: a file renamed into its place meanwhile is not read).

    Raises:
        OutputIntegrityError: a symlink or a special file under `root`, naming it.
    """
    base = Path(root)
    with _open_tree(base) as fd, ThreadPoolExecutor(HASH_THREADS) as pool:
        pending = {rel: pool.submit(_sha256_of_dup, os.dup(child))
                   for rel, child, is_dir in _walk(fd, "", base)
                   if not is_dir and rel not in skip}
        return {rel: future.result() for rel, future in pending.items()}


def set_output_modes(root: str | Path) -> None:
    """Give a finished output directory the operator's modes, then fsync its directories.

    Files become ``output_file_mode()``, directories (`root` included)
    ``output_dir_mode()``. Nothing is followed: a symlink or a special file
    anywhere under `root` is refused, naming it.
    """
    base = Path(root)
    file_mode, dir_mode = output_file_mode(), output_dir_mode()
    with _open_tree(base) as fd:
        for _rel, child, is_dir in _walk(fd, "", base):
            os.fchmod(child, dir_mode if is_dir else file_mode)
            if is_dir:
                os.fsync(child)
        os.fchmod(fd, dir_mode)
        os.fsync(fd)


# --------------------------------------------------------------------------- renames

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.renameat2
    except (OSError, AttributeError):
        return None


def rename_new(src: str | Path, dst: str | Path) -> None:
    """Rename `src` to `dst` only if nothing exists at `dst` (atomic where the OS allows).

    Uses renameat2(RENAME_NOREPLACE) on Linux; elsewhere a directory rename still
    fails on a non-empty directory, and an existing entry is checked first.

    Raises:
        FileExistsError: something (a file, a directory, a symlink) is at `dst`.
    """
    fn = _renameat2()
    if fn is not None:
        res = fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst),  # type: ignore[operator]
                 _RENAME_NOREPLACE)
        if res == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):  # the file system does not support it
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def fsync_dir(path: str | Path) -> None:
    """Flush a directory to disk (fsync): names created or renamed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
