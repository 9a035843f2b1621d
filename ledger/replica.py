"""A read-only replica that follows the ledger's chain, for auditors to read there.

Each round takes a verified snapshot of the ledger (`backup.backup`: one read
transaction, then chain, balances, seal, MACs and signed head verified with
the ledger's keys), checks that its chain still contains the head the replica
holds (same ledger id, same entry at the replica's seq with the same hash),
and only then puts it in place of the replica's file. So a replica only ever
moves forward along one chain: a ledger rolled back, truncated or rewritten
since the last round (even by whoever holds its keys, e.g. a restore with
``--accept-loss``) is refused, and the replica keeps the last head it had as
evidence. Auditors read the replica (``--ledger REPLICA/ledger.duckdb
--public-key KEY``) and never hold the live ledger's file, so they never block
a release.

A replica directory is also a backup directory (`backup.load_snapshot`,
``privpipe ledger restore``): its ``manifest.json`` is the snapshot's, plus a
``replica`` object (source path, the head of the round before, rounds so far).
Each round is a full copy: its cost grows with the ledger (incremental rounds
are future work, docs/ledger.md).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import duckdb

from ledger import backup, heads, storage
from ledger.errors import LedgerIntegrityError
from ledger.keyring import Keyring
from ledger.paths import check_private
from schemas.errors import ParameterError

ROUND_PREFIX = ".round-"


def _check_dir(replica: Path) -> None:
    """Create the replica directory (0700) or refuse one that is not a replica."""
    if replica.is_symlink() or (replica.exists() and not replica.is_dir()):
        raise ParameterError(f"--to {str(replica)!r} is not a directory")
    try:
        replica.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise ParameterError(f"--to {str(replica)!r}: cannot create it: {err.strerror}"
                             ) from None
    check_private(replica, "the replica directory")
    others = [p.name for p in replica.iterdir() if not p.name.startswith(ROUND_PREFIX)]
    if others and not (replica / backup.MANIFEST_NAME).exists():
        raise ParameterError(
            f"--to {str(replica)!r} holds files but no replica ({', '.join(sorted(others)[:3])}"
            "…); give an empty directory or one an earlier `ledger replicate` made")


def _held(replica: Path) -> dict[str, Any] | None:
    """The manifest of the replica's current round (None: no round yet)."""
    if not (replica / backup.MANIFEST_NAME).exists():
        return None
    snap = backup.load_snapshot(replica)
    if not isinstance(snap.manifest.get("replica"), dict):
        raise ParameterError(f"--to {str(replica)!r} holds a backup, not a replica; give an "
                             "empty directory")
    return snap.manifest


def _extends(snapshot: Path, entries: int, held: dict[str, Any], ledger_id: str) -> None:
    """Refuse a snapshot whose chain does not contain the replica's head (LedgerIntegrityError)."""
    h = held["head"]
    if held.get("ledger_id") != ledger_id:
        raise LedgerIntegrityError(
            f"the replica holds ledger {held.get('ledger_id')}, not this one ({ledger_id}); "
            "replicate it into another directory")
    con = duckdb.connect(str(snapshot), read_only=True)
    try:
        problem = heads.contains(con, entries, f"the replica's head (seq {h['seq']})",
                                 int(h["seq"]), str(h["hash"]))
    finally:
        con.close()
    if problem:
        raise LedgerIntegrityError(
            f"not replicated: {problem}. The replica keeps seq {h['seq']} hash {h['hash']} "
            "as evidence of what the ledger held")


def _install(work: Path, replica: Path, manifest: dict[str, Any]) -> None:
    """Write the round's manifest and move the round's snapshot, then manifest, into place."""
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    tmp = work / f"{backup.MANIFEST_NAME}.new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(work / backup.SNAPSHOT_NAME, replica / backup.SNAPSHOT_NAME)
    os.replace(tmp, replica / backup.MANIFEST_NAME)
    fd = os.open(replica, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replicate(path: Path, key: Keyring, replica: Path, *, lock_timeout: float,
              created_at: str) -> dict[str, Any]:
    """One round: snapshot the ledger at `path`, check it extends the replica, put it in place.

    Returns:
        The replica's new manifest (``head``, ``entries``, ``replica``: source,
        previous head, rounds).

    Raises:
        ParameterError: `replica` is not a directory for a replica.
        LedgerIntegrityError: the snapshot does not verify, or its chain does
            not contain the replica's head (the ledger was rolled back or
            rewritten); the replica is left as it was.
        LedgerBusyError: the ledger, or another round on this replica, stayed
            busy past `lock_timeout`.
    """
    _check_dir(replica)
    with storage.init_lock(replica, time.monotonic() + lock_timeout):
        for stale in replica.glob(f"{ROUND_PREFIX}*"):  # rounds that crashed (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        held = _held(replica)
        work = replica / f"{ROUND_PREFIX}{os.getpid()}"
        try:
            manifest = backup.backup(path, key, work, lock_timeout=lock_timeout,
                                     created_at=created_at, with_published=False)
            if held is not None:
                _extends(work / backup.SNAPSHOT_NAME, int(manifest["entries"]), held,
                         key.ledger_id)
            rounds = 1 if held is None else int(held["replica"].get("rounds", 0)) + 1
            manifest["replica"] = {"source": str(path.resolve()), "rounds": rounds,
                                   "previous_head": None if held is None else held["head"]}
            _install(work, replica, manifest)
            return manifest
        finally:
            shutil.rmtree(work, ignore_errors=True)
