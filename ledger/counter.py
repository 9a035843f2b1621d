"""The head counter file: what the key directory remembers of the latest chain head.

From schema 4 every head write increments ``chain_head.counter``, which the
Ed25519 signature and the keyed seal cover. After each committed write the
operator's process records the head in ``<ledger>.counter`` next to the keys
(JSON ``{"format", "ledger_id", "counter", "seq", "hash"}``, mode 0600,
replaced atomically: a new file renamed over the old one, under an exclusive
``flock`` on the directory). The file only moves forward: a process never
writes a counter lower than the one it finds.

A database whose head counter is below the file's was rolled back: an old
``chain_head`` row restored over a newer one (the entries after it deleted)
or an old copy of the file. Nothing in the database can hide that, because
the file is not in it; `verify` fails and writes are refused. A counter above
the file's is normal after a crash between the commit and the file update.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import LedgerOpenError
from ledger.keys import read_private_file

COUNTER_FORMAT = "privpipe-head-counter-v1"


@dataclass(frozen=True)
class Recorded:
    """The head a counter file records."""

    ledger_id: str
    counter: int
    seq: int
    hash: str


def counter_path(ledger_path: str | os.PathLike[str]) -> Path:
    """Where a ledger's head counter lives: ``<ledger path>.counter``, next to its keys."""
    p = Path(ledger_path)
    return p.with_name(p.name + ".counter")


def _parse(data: bytes, where: str) -> Recorded:
    try:
        obj = json.loads(data.decode("utf-8"))
        if obj.get("format") != COUNTER_FORMAT:
            raise ValueError
        rec = Recorded(str(obj["ledger_id"]), int(obj["counter"]), int(obj["seq"]),
                       str(obj["hash"]))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise LedgerOpenError(f"the head counter file {where} is malformed; restore it from the "
                              "backup of the keys") from None
    return rec


def read(path: Path, *, private: bool) -> Recorded | None:
    """The recorded head, or None when the file does not exist.

    `private` (the operator): the file must pass the key-file checks
    (`keys.read_private_file`). Otherwise (an auditor reading the operator's
    directory) a file that cannot be read counts as absent.

    Raises:
        LedgerOpenError: malformed, or (private) unsafe.
    """
    if private:
        try:
            data = read_private_file(path, "head counter file")
        except FileNotFoundError:
            return None
    else:
        try:
            data = path.read_bytes()
        except OSError:
            return None
    return _parse(data, repr(str(path)))


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _replace(path: Path, rec: Recorded) -> None:
    text = json.dumps({"format": COUNTER_FORMAT, "ledger_id": rec.ledger_id,
                       "counter": rec.counter, "seq": rec.seq, "hash": rec.hash},
                      sort_keys=True) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def advance(path: Path, rec: Recorded, *, locked: bool = False) -> None:
    """Record `rec` unless the file already holds this counter or a later one.

    `locked`: the caller already holds the directory's lock (`Ledger.init`).

    Raises:
        LedgerOpenError: the file cannot be written (nothing else changes).
    """
    try:
        with contextlib.nullcontext() if locked else _directory_lock(path.parent):
            current = read(path, private=True)
            if current is not None and current.counter >= rec.counter:
                return
            _replace(path, rec)
    except OSError as err:
        raise LedgerOpenError(f"cannot write the head counter file {str(path)!r}: "
                              f"{err.strerror}") from None
