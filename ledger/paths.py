"""Checks of a ledger path that name the real cause before anything opens it.

A directory, a CSV file or an empty file given as ``--ledger`` is not "a ledger
whose noise key is missing": these checks run before the key is looked for,
so the error says what the path really is.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ledger.errors import LedgerOpenError

# A DuckDB database file carries this magic at byte offset 8 (DuckDB storage format).
_DUCKDB_MAGIC = b"DUCK"
_MAGIC_OFFSET = 8


_file_locks: dict[str, threading.RLock] = {}
_file_locks_guard = threading.Lock()


def file_lock(path: str | os.PathLike[str]) -> threading.RLock:
    """The lock this process takes around every use of the ledger file at `path`.

    DuckDB guards its database file with POSIX ``fcntl`` record locks, and POSIX
    drops every such lock of a process on a file when the process closes *any*
    descriptor of that file. So no thread may open and close the ledger file
    (`is_duckdb_file`) while another thread holds a DuckDB connection to it:
    the connection's lock would silently go, and a second process could write
    the file at the same time. Threads of one process therefore queue on this
    lock for connections (`storage.Store.transact`) and for reads of the file
    alike (re-entrant: the thread holding it may do both).
    """
    k = str(Path(path).resolve())
    with _file_locks_guard:
        lock = _file_locks.get(k)
        if lock is None:
            lock = _file_locks[k] = threading.RLock()
        return lock


def is_duckdb_file(path: Path) -> bool:
    """Whether `path` starts like a DuckDB database file.

    Reads under `file_lock`, so the read cannot release a DuckDB lock that
    another thread of this process holds on the same file.
    """
    try:
        with file_lock(path), open(path, "rb") as f:
            head = f.read(_MAGIC_OFFSET + len(_DUCKDB_MAGIC))
    except OSError:
        return False
    return head[_MAGIC_OFFSET:] == _DUCKDB_MAGIC


def check_private(path: str | os.PathLike[str], what: str) -> None:
    """Refuse a file or directory another user owns or may write (a co-tenant's plant).

    A ledger, its WAL, its directory (where the WAL and keys are created) and
    Prefect's home and database must be owned by the user running privpipe and
    writable by nobody else: otherwise another user could replace the ledger,
    plant a WAL that DuckDB replays into it, or read what Prefect writes.
    A path that does not exist passes (it will be created private).

    Raises:
        LedgerOpenError: naming the path, what is wrong, and the fix.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return
    me = os.geteuid()
    if st.st_uid != me:
        raise LedgerOpenError(
            f"{what} {str(p)!r} is owned by uid {st.st_uid}, not by the user running privpipe "
            f"(uid {me}): another user could have planted it; if it is yours, "
            f"`chown {me} {p}`, else remove it")
    if st.st_mode & 0o022:
        who = "world" if st.st_mode & 0o002 else "group"
        raise LedgerOpenError(
            f"{what} {str(p)!r} is {who}-writable (mode {oct(st.st_mode & 0o777)}): another "
            f"user could change or replace it; fix: `chmod go-w {p}`")


def check_ledger_files(path: Path) -> None:
    """`check_private` for a ledger's directory, file and WAL (`LedgerOpenError`)."""
    check_private(path.resolve().parent, "the ledger's directory")
    check_private(path, "the ledger")
    check_private(Path(f"{path}.wal"), "the ledger's WAL")


def check_existing_ledger(path: str | os.PathLike[str]) -> Path:
    """Refuse a path that cannot be an existing ledger, saying what it is instead.

    Raises:
        LedgerOpenError: missing, a directory, not a regular file, unreadable,
            or not a DuckDB database.
    """
    p = Path(path)
    if not p.exists():
        raise LedgerOpenError(
            f"no ledger at {str(p)!r}; create one with `privpipe ledger init --ledger {p}`")
    if p.is_dir():
        raise LedgerOpenError(
            f"{str(p)!r} is a directory, not a ledger file; pass the ledger's file, "
            f"e.g. --ledger {p / 'ledger.duckdb'}")
    if not p.is_file():
        raise LedgerOpenError(f"{str(p)!r} is not a regular file, so not a ledger")
    check_ledger_files(p)
    if not os.access(p, os.R_OK):
        raise LedgerOpenError(f"cannot read the ledger {str(p)!r}: permission denied")
    if not is_duckdb_file(p):
        what = "an empty file" if p.stat().st_size == 0 else "not a readable DuckDB database"
        raise LedgerOpenError(
            f"{str(p)!r} is not a privpipe ledger ({what}); pass the ledger's .duckdb file, "
            "or create one with `privpipe ledger init`")
    return p


def check_new_ledger_path(path: str | os.PathLike[str]) -> Path:
    """Refuse a path where no ledger can be created or opened (a directory, a foreign file).

    A missing path is fine (it will be created); an existing one must pass
    `check_existing_ledger`.

    Raises:
        LedgerOpenError: as `check_existing_ledger`, for an existing path.
    """
    p = Path(path)
    if p.exists() or p.is_symlink():
        check_existing_ledger(p)
    elif p.parent.exists() and not p.parent.is_dir():
        raise LedgerOpenError(f"cannot create {str(p)!r}: {str(p.parent)!r} is not a directory")
    else:
        check_private(p.parent, "the ledger's directory")
    return p
