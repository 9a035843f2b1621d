"""One run at a time per release id: an exclusive flock on ``OUT/.locks/<digest>.lock``.

Two runs of the same release (a retried schedule, two workers given the same
parameters, an operator rerunning by hand) would both draw the same noise and
both publish into ``OUT/<release_id>/``. The release therefore holds an
exclusive `flock` on a lock file of its own id from the moment the id is known
until it has published (or failed); a second run waits there, then finds the
release published and replays it (`flows.release_stages.answer_early`), drawing
nothing. The kernel drops the lock when its holder dies, however it dies, so a
killed run never blocks the next one.

The lock file is named by the SHA-256 of the release id (ids are checked names,
but the file name need not carry them), lives in the private ``OUT/.locks/``
(0700, ours, not a symlink) and is opened without following symlinks; it is
never deleted (deleting a lock file lets two runs lock two different files).
flock needs a local file system for ``OUT`` (docs/files.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from files.safe_files import RAW_FILE_MODE, private_dir
from schemas.errors import FileSystemError

LOCKS = ".locks"


def lock_path(out_root: str | Path, release_id: str) -> Path:
    """The lock file of `release_id` under `out_root` (the directory is not created)."""
    digest = hashlib.sha256(release_id.encode("utf-8")).hexdigest()
    return Path(out_root) / LOCKS / f"{digest}.lock"


def _open_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, RAW_FILE_MODE)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise FileSystemError(f"{path} is not a regular file of this user: remove it and rerun")
    return fd


@contextmanager
def release_lock(out_root: str | Path, release_id: str, *,
                 on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the release's lock for the block; wait while another run holds it.

    Args:
        out_root: the output directory ``OUT``.
        release_id: the release id.
        on_wait: called once if the lock is held by another run (before waiting).

    Raises:
        FileSystemError: ``OUT/.locks`` or the lock file is a symlink, not ours,
            or not a regular file.
    """
    path = lock_path(out_root, release_id)
    private_dir(path.parent)
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
