"""A release's staging directory: private, owned by a lock the release holds, never left behind.

Staging holds raw input chunks and noise seeds, so it lives in a private
``OUT/.staging/`` (mode 0700, ours, not a symlink) and each release gets its own
``OUT/.staging/<uuid>/`` (0700; every file in it 0600, see `files.safe_files`).

**Ownership is an flock, not a pid.** The release holds an exclusive `flock`
on its directory (an open descriptor of ``<uuid>/`` itself, no lock file) for as
long as it runs; the kernel drops the lock when the process dies, however it
dies. A pid can be reused by an unrelated process (pid 1 is always alive); a
lock cannot be held by a dead one.

**Sweep.** Every new release first takes an exclusive flock on ``OUT/.staging``
and removes every staging directory whose lock it can take (its owner is
gone: killed, or an older privpipe's ``owner.pid`` directory); then it creates
its own directory and locks it before letting go of ``OUT/.staging``, so a
sweep never sees a directory whose lock is not yet held. (flock needs a local
file system for ``OUT``; see docs/files.md.)

**Reaper.** A release killed with SIGKILL cannot clean up, and no later release
may come. So each release also starts a tiny detached reaper process
(`files/staging_reaper.py`) that waits on a pipe only the release holds open
and deletes the directory as soon as the release ends: after 5 SIGKILLed
releases no staging directory is left, and no reaper either.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from files.safe_files import PRIVATE_DIR_MODE, disk_errors, private_dir

STAGING = ".staging"
_REAPER = Path(__file__).with_name("staging_reaper.py")


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def sweep(root: Path) -> list[Path]:
    """Remove every staging directory under `root` whose owner is gone; return them.

    Call with `root` locked exclusively. An entry that is not a directory (a
    planted file or symlink) is unlinked, never followed.
    """
    removed = []
    for entry in sorted(os.listdir(root)):
        path = root / entry
        try:
            fd = _open_dir(path)
        except OSError as err:
            if err.errno == errno.ENOENT:
                continue  # removed meanwhile (by a reaper)
            if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            path.unlink(missing_ok=True)
            removed.append(path)
            continue
        try:
            if _try_lock(fd):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        finally:
            os.close(fd)
    return removed


class StagingDir:
    """This release's staging directory; `close` deletes it (raw chunks, seeds) and unlocks it.

    Attributes:
        path: ``OUT/.staging/<uuid>``, mode 0700.
    """

    def __init__(self, path: Path, lock_fd: int, reaper_fd: int):
        """Wrap an already created and locked directory (use `StagingDir.create`)."""
        self.path = path
        self._lock_fd: int | None = lock_fd
        self._reaper_fd: int | None = reaper_fd

    @classmethod
    def create(cls, out_root: str | Path) -> StagingDir:
        """Sweep ``OUT/.staging`` and create this release's locked staging directory there.

        Raises:
            FileSystemError: ``OUT/.staging`` is a symlink, not ours, or the disk is full.
        """
        root = private_dir(Path(out_root) / STAGING)
        root_fd = _open_dir(root)
        try:
            fcntl.flock(root_fd, fcntl.LOCK_EX)
            sweep(root)
            path = root / uuid.uuid4().hex
            with disk_errors(path):
                os.mkdir(path, PRIVATE_DIR_MODE)
            os.chmod(path, PRIVATE_DIR_MODE)
            lock_fd = _open_dir(path)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        finally:
            os.close(root_fd)
        try:
            reaper_fd = _start_reaper(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            os.close(lock_fd)
            raise
        return cls(path, lock_fd, reaper_fd)

    def close(self) -> None:
        """Delete the directory, then release its lock and let the reaper go (idempotent)."""
        if self._lock_fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock_fd)
        self._lock_fd = None
        if self._reaper_fd is not None:
            os.close(self._reaper_fd)
            self._reaper_fd = None

    def __enter__(self) -> StagingDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start_reaper(path: Path) -> int:
    """Start the detached reaper of `path`; return the write end of its pipe (keep it open)."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv: our interpreter and our script
            [sys.executable, "-I", "-S", str(_REAPER), str(read_fd), str(path)],
            pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        proc.wait()  # the first process exits at once; its detached child does the work
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    if proc.returncode != 0:
        os.close(write_fd)
        raise RuntimeError(f"the staging reaper did not start (exit {proc.returncode})")
    return write_fd
