"""Backup and restore: a verified, consistent snapshot of a ledger, and putting one back.

**Backup.** The snapshot is a logical copy taken inside one read transaction
on a read-only connection (``ATTACH`` a new file, ``COPY FROM DATABASE``):
DuckDB reads every table of one transaction from the same MVCC snapshot, and
the read-only connection holds the file's shared lock for the copy, so no
writer process commits in the middle (writers retry on the lock, as readers
do: `storage.Store.transact`). A byte copy of the file would not be safe: a
writer's commit can sit in the WAL until its checkpoint. The copy is then
verified with the ledger's keys (chain, balances, seal, MACs, signed head)
before a manifest is written; nothing is declared a backup before that.

A backup directory holds ``ledger.duckdb`` (mode 0600), ``manifest.json`` (the
format, time, ledger id, the snapshot's signed head with its counter, the
SHA-256 and size of the snapshot, the noise key's HMAC fingerprint and the
signing key's fingerprint) and, only with ``include_keys``, the secret key
files, public key and pin (0600). The head counter file is never copied: it
records the live ledger's latest head, which a snapshot is behind by design.
It also holds ``published/``: the files of the ledger's store of published
files that the snapshot's settled releases name, each hashed against its
digest while copied (an edited one is refused, named), listed in the
manifest's ``published`` (`ledger.backup_published`).

**Served.** `ledger serve` takes the same backup of the database it holds
(`_snapshot` on a cursor of its instance: one MVCC snapshot, writes are not
stopped) and streams it (`flows.ledger_server_backup`).

**Restore.** The snapshot is copied beside the target (a new temporary file,
hashed against the manifest while copying), verified with the keys beside the
target, compared with the heads that would be lost (the target's current
head, the head its counter file records, each ``--expect-head``), given a
head counter above every counter the target ever recorded (a new seal and
signature over the same seq and hash), fsynced and renamed over the target
in one step. A snapshot whose chain does not contain one of those heads is
refused unless `accept_loss` names exactly the newest head lost. The
backup's published files are hashed against the snapshot's settled manifests
before anything is replaced and kept in the target's store
(``<ledger dir>/published/``, 0700) just before the rename.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from ledger import backup_published, counter, heads, keys, published, signing, storage
from ledger.errors import LedgerBusyError, LedgerIntegrityError, LedgerOpenError
from ledger.keyring import Keyring
from ledger.paths import check_private, file_lock
from ledger.records import SignedHead
from ledger.verify import verify_tx
from schemas.errors import ParameterError

BACKUP_FORMAT = "privpipe-ledger-backup-v1"
SNAPSHOT_NAME = "ledger.duckdb"
MANIFEST_NAME = "manifest.json"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _write_new(path: Path, data: bytes) -> None:
    """A new private file (0600), never through a symlink, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _out_dir(out: Path) -> None:
    """Create `out` (0700), or accept an existing empty private directory (ParameterError)."""
    if out.is_symlink():
        raise ParameterError(f"--out {str(out)!r} is a symbolic link; give a new directory")
    if out.exists():
        if not out.is_dir() or any(out.iterdir()):
            raise ParameterError(f"--out {str(out)!r} exists and is not an empty directory; "
                                 "a backup never overwrites anything")
        check_private(out, "the backup directory")
        return
    try:
        os.mkdir(out, 0o700)
    except OSError as err:
        raise ParameterError(f"--out {str(out)!r}: cannot create it: {err.strerror}") from None


def q(ident: str) -> str:
    """`ident` as one quoted SQL identifier (its ``"`` doubled)."""
    return '"' + ident.replace('"', '""') + '"'


def open_backup_dir(d: Path) -> list[tuple[str, Any, int]]:
    """(name, open file, size) of a backup directory's files, in the order a stream sends them.

    The snapshot and key files, then ``published/...``, then the manifest last;
    opened without following a link (the caller closes them).
    """
    top = sorted(n for n in os.listdir(d) if n != MANIFEST_NAME)
    store = d / backup_published.STORE_DIR
    names = [n for n in top if n != backup_published.STORE_DIR]
    if store.is_dir():
        names += [f"{backup_published.STORE_DIR}/{n}" for n in sorted(os.listdir(store))]
    opened: list[tuple[str, Any, int]] = []
    try:
        for name in [*names, MANIFEST_NAME]:
            f = os.fdopen(os.open(d / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")
            opened.append((name, f, os.fstat(f.fileno()).st_size))
    except BaseException:
        for _, f, _ in opened:
            f.close()
        raise
    return opened


def _copy_tx(tmp: Path, alias: str) -> Any:
    def tx(con: duckdb.DuckDBPyConnection) -> tuple[int, str, int]:
        head = (*storage.head(con), storage.head_counter(con))  # fixes the read snapshot
        db = con.execute("SELECT current_database()").fetchall()[0][0]
        quoted = str(tmp).replace("'", "''")  # a path with a quote stays one literal
        con.execute(f"ATTACH '{quoted}' AS {q(alias)} (READ_WRITE)")
        con.execute(f'COPY FROM DATABASE "{db.replace(chr(34), chr(34) * 2)}" TO {q(alias)}')
        return head
    return tx


def _snapshot(path: Path, tmp: Path, lock_timeout: float, store: storage.Store | None
              ) -> tuple[int, str, int]:
    """Copy the ledger into the new file `tmp` in one read transaction; the head it copied.

    `store`: the held store of the ledger service (`storage.Store.hold`): the
    copy runs on a cursor of its instance (one MVCC snapshot; writes go on and
    are not waited for) into a file of its own, checkpointed (under the store's
    write lock, held only for that: DuckDB refuses while a write runs) and detached;
    DuckDB may keep that file's handle open until the transactions that began
    meanwhile end, so its bytes (complete after the checkpoint) are copied to
    `tmp`, which no instance has open.
    """
    if store is None:
        return storage.Store(path, lock_timeout, read_only=True).transact(
            _copy_tx(tmp, "pp_snapshot"), write=False)
    alias = f"pp_snapshot_{uuid.uuid4().hex}"
    attached = tmp.with_name(f"{tmp.name}.{alias}")
    try:
        head = store.transact(_copy_tx(attached, alias), write=False)
        with store._writing:  # DuckDB checkpoints no file while a write transaction runs
            con = store._cursor()
            if con is None:
                raise LedgerOpenError(f"the ledger {str(path)!r} was closed (the ledger "
                                      "service is stopping); retry")
            try:
                con.execute(f"CHECKPOINT {q(alias)}")
            finally:
                con.close()
    finally:
        store.transact(lambda con: con.execute(f"DETACH DATABASE IF EXISTS {q(alias)}"),
                       write=False)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(attached, "rb") as src, os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        attached.unlink(missing_ok=True)
        Path(f"{attached}.wal").unlink(missing_ok=True)
    return head


def _snapshot_keyring(key: Keyring, con: duckdb.DuckDBPyConnection, where: Path) -> Keyring:
    """The ledger's keys for a copy of it (no counter file: a copy is behind it by design).

    Raises:
        LedgerIntegrityError: the copy is not this ledger or not under these keys.
    """
    meta = storage.open_tx(con, where)
    if (meta.ledger_id != key.ledger_id
            or meta.key_fingerprint != keys.key_fingerprint(key.noise_key)
            or (key.public is not None and meta.public_key != key.public.hex())):
        raise LedgerIntegrityError(
            f"the snapshot {str(where)!r} is not ledger {key.ledger_id} under these keys "
            "(another ledger, or its keys were replaced)")
    return dataclasses.replace(key, version=meta.version, counter_file=None)


def _verify_copy(path: Path, key: Keyring) -> tuple[SignedHead, int]:
    """Verify a snapshot file with `key`; its signed head and entry count (LedgerIntegrityError)."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as err:
        raise LedgerIntegrityError(f"the snapshot {str(path)!r} is not a readable DuckDB "
                                   f"database ({str(err).splitlines()[0]})") from None
    try:
        kr = _snapshot_keyring(key, con, path)
        rep = verify_tx(con, kr)
        if not rep.ok:
            raise LedgerIntegrityError(f"the snapshot {str(path)!r} does not verify: "
                                       f"{rep.message}", seq=rep.first_bad_seq,
                                       entry_id=rep.first_bad_entry_id)
        return heads.read_head(con, kr), rep.entries_checked
    finally:
        con.close()


def _key_files(ledger_path: Path) -> list[Path]:
    return [keys.key_path_for(ledger_path), signing.signing_key_path(ledger_path),
            signing.public_key_path(ledger_path), signing.pin_path(ledger_path)]


def _read_key_file(path: Path, *, secret: bool) -> bytes:
    """A key file's bytes: a secret key with the key-file checks, a public one without a symlink."""
    if secret:
        return keys.read_private_file(path, "key file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _manifest(path: Path, key: Keyring, head: SignedHead, n: int, tmp: Path,
              created_at: str, include_keys: bool, listed: list[dict[str, Any]]
              ) -> dict[str, Any]:
    return {"format": BACKUP_FORMAT, "created_at": created_at,
            "ledger": str(path.resolve()), "ledger_id": key.ledger_id,
            "schema_version": head.schema_version, "entries": n,
            "head": head.to_dict(), "snapshot": SNAPSHOT_NAME,
            "sha256": _sha256_file(tmp), "size": tmp.stat().st_size,
            "key_fingerprint": keys.key_fingerprint(key.noise_key),
            "signing_key_fingerprint": head.key_fingerprint,
            "includes_keys": bool(include_keys), "published": listed}


def _named_in(tmp: Path) -> dict[str, dict[str, str]]:
    """The published files the settled releases of the (verified) copy `tmp` name."""
    con = duckdb.connect(str(tmp), read_only=True)
    try:
        return backup_published.named_files(con)
    finally:
        con.close()


def backup(path: Path, key: Keyring, out: Path, *, lock_timeout: float, created_at: str,
           include_keys: bool = False, store: storage.Store | None = None,
           with_published: bool = True) -> dict[str, Any]:
    """Snapshot the ledger at `path` into the new directory `out`, verify it, write its manifest.

    The files of the ledger's store that the snapshot's settled releases name
    are copied into ``out/published/``, each checked against its digest
    (`ledger.backup_published`). `store`: the ledger service's held store
    (`_snapshot`); by default the file is opened read-only. `with_published`
    False (the auditors' replica, `ledger.replica`): the store is not copied
    and the manifest lists no published file.

    Returns:
        The manifest.

    Raises:
        ParameterError: `out` exists and is not empty, or cannot be created.
        LedgerIntegrityError: the snapshot does not verify, or a stored published
            file does not match its digest (nothing is left in `out`).
        LedgerBusyError: the ledger stayed locked past `lock_timeout`.
    """
    _out_dir(out)
    tmp, final = out / f".{SNAPSHOT_NAME}.tmp", out / SNAPSHOT_NAME
    made = [tmp, Path(f"{tmp}.wal")]
    try:
        seq, last_hash, count = _snapshot(path, tmp, lock_timeout, store)
        con = duckdb.connect(str(tmp))
        con.execute("CHECKPOINT")
        con.close()
        os.chmod(tmp, 0o600)
        head, n = _verify_copy(tmp, key)
        if (head.seq, head.hash, head.counter) != (seq, last_hash, count):
            raise LedgerIntegrityError("the snapshot's head is not the head read while copying; "
                                       "this is a bug")
        listed = backup_published.back_up_store(published.store_dir(path), _named_in(tmp),
                                                out) if with_published else []
        manifest = _manifest(path, key, head, n, tmp, created_at, include_keys, listed)
        os.rename(tmp, final)
        made.append(final)
        if include_keys:
            for f in _key_files(path):
                if f.exists():
                    made.append(out / f.name.replace(path.name, SNAPSHOT_NAME, 1))
                    _write_new(made[-1], _read_key_file(f, secret=f in _key_files(path)[:2]))
        made.append(out / MANIFEST_NAME)
        _write_new(made[-1], (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
        _fsync_dir(out)
        return manifest
    except BaseException:
        for f in made:
            f.unlink(missing_ok=True)
        shutil.rmtree(out / backup_published.STORE_DIR, ignore_errors=True)
        raise


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A backup directory's snapshot file and manifest."""

    path: Path
    manifest: dict[str, Any]


def load_snapshot(directory: Path) -> Snapshot:
    """Read a backup directory's manifest (ParameterError: not a backup directory)."""
    mf = directory / MANIFEST_NAME
    try:
        data = json.loads(mf.read_text(encoding="utf-8"))
    except OSError as err:
        raise ParameterError(f"SNAPSHOT_DIR {str(directory)!r}: cannot read {MANIFEST_NAME} "
                             f"({err.strerror}); not a `privpipe ledger backup` directory"
                             ) from None
    except (ValueError, UnicodeDecodeError):
        raise ParameterError(f"SNAPSHOT_DIR {str(directory)!r}: {MANIFEST_NAME} is not JSON"
                             ) from None
    if (not isinstance(data, dict) or data.get("format") != BACKUP_FORMAT
            or not isinstance(data.get("sha256"), str)):
        raise ParameterError(f"SNAPSHOT_DIR {str(directory)!r}: {MANIFEST_NAME} is not a "
                             f"privpipe ledger backup manifest ({BACKUP_FORMAT})")
    snap = directory / SNAPSHOT_NAME
    if not snap.is_file() or snap.is_symlink():
        raise ParameterError(f"SNAPSHOT_DIR {str(directory)!r}: {SNAPSHOT_NAME} is missing or "
                             "not a regular file")
    return Snapshot(snap, data)


def parse_accept_loss(text: str | None) -> tuple[int, str] | None:
    """``SEQ:HASH`` of ``--accept-loss`` (ParameterError)."""
    if text is None:
        return None
    m = re.fullmatch(r"(\d+):([0-9a-fA-F]{64})", text.strip())
    if not m:
        raise ParameterError(f"--accept-loss {text!r}: expected SEQ:HASH (the seq and 64-hex "
                             "hash of the newest head that will be lost)")
    return int(m.group(1)), m.group(2).lower()


def _target_keys(target: Path) -> tuple[bytes, Any]:
    """The noise and signing keys beside `target` (LedgerOpenError: missing or unsafe)."""
    return keys.load_key(keys.key_path_for(target)), signing.load_signing_key(target)


def _target_keyring(target: Path, noise: bytes, signer: Any, ledger_id: str) -> Keyring:
    """The keys beside `target` and what the files there say (pin, oldest format), as on open."""
    pin = signing.load_pin(target)
    has_counter = counter.counter_path(target).exists()
    pins = () if pin is None else ((str(signing.pin_path(target)), pin),)
    public = signing.public_bytes(signer)
    if pin is not None and signing.fingerprint(public) != pin:
        raise LedgerIntegrityError(f"the signing key beside {str(target)!r} is not the one "
                                   f"pinned in {str(signing.pin_path(target))!r}")
    return Keyring(noise, signer, public, ledger_id, 0, 4 if has_counter else 3,
                   "the head counter file beside --ledger" if has_counter else
                   "the signing key beside --ledger", pins,
                   f"the signing key {str(signing.signing_key_path(target))!r}")


def _copy_in(snap: Snapshot, tmp: Path) -> None:
    """Copy the snapshot to the new file `tmp` (0600), hashing it against the manifest."""
    h = hashlib.sha256()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with open(snap.path, "rb") as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    if h.hexdigest() != snap.manifest["sha256"]:
        raise LedgerIntegrityError(
            f"the snapshot {str(snap.path)!r} does not match the SHA-256 in its manifest "
            "(changed or damaged since the backup); nothing was restored")


def _hold(target: Path, lock_timeout: float) -> duckdb.DuckDBPyConnection | None:
    """A read-only connection to the target, holding its shared lock (None: not readable).

    While it is open no writer can commit, so the head read through it is the
    one replaced (writers retry on the lock and then open the restored file).
    """
    if not target.is_file():
        return None
    store = storage.Store(target, lock_timeout, read_only=True)
    try:
        return store._connect(time.monotonic() + lock_timeout, 0)
    except LedgerBusyError:
        # a writer holds it: restoring now would replace a file whose newest commits were
        # never compared with the snapshot (a held lock must not pass for a damaged file)
        raise
    except LedgerOpenError:
        return None  # a damaged ledger: its counter file still says what it held


def _current_heads(hold: duckdb.DuckDBPyConnection | None, target: Path, ledger_id: str
                   ) -> list[tuple[str, int, str]]:
    """The heads the target holds now: its chain head (if readable) and its counter file's."""
    out = []
    if hold is not None:
        try:
            seq, h = storage.head(hold)
            out.append((f"the ledger {str(target)!r} (its current head)", seq, h))
        except (LedgerIntegrityError, duckdb.Error):
            pass
    rec = counter.read(counter.counter_path(target), private=True)
    if rec is not None and rec.ledger_id == ledger_id:
        out.append((f"the head counter file {str(counter.counter_path(target))!r}", rec.seq,
                    rec.hash))
    return out


def _lost(con: duckdb.DuckDBPyConnection, kr: Keyring, n: int,
          current: list[tuple[str, int, str]],
          expect: Sequence[tuple[str, SignedHead | heads.PlainHead]]
          ) -> list[tuple[str, int, str]]:
    """The heads the snapshot's chain does not contain (LedgerIntegrityError: a forged head)."""
    lost = [(w, s, h) for w, s, h in current if heads.contains(con, n, w, s, h) is not None]
    for where, head in expect:
        if isinstance(head, SignedHead):
            fault = heads.expected_faults(con, kr, n, [(where, head)])
            if fault is not None and fault != heads.contains(con, n, where, head.seq, head.hash):
                raise LedgerIntegrityError(f"--expect-head {fault}")  # forged, or not ours
        if heads.contains(con, n, where, head.seq, head.hash) is not None:
            lost.append((where, head.seq, head.hash))
    return lost


def _check_loss(lost: list[tuple[str, int, str]], n: int, accept: tuple[int, str] | None
                ) -> None:
    """Refuse a loss `accept` does not name as its newest head (exit 4).

    An `accept` with nothing to lose is bad input (exit 2).
    """
    if not lost:
        if accept is not None:
            raise ParameterError(f"--accept-loss {accept[0]}:{accept[1]}: nothing would be lost "
                                 f"(the snapshot contains every head known; it ends at seq {n})")
        return
    where, seq, h = max(lost, key=lambda x: (x[1], x[0]))
    if accept != (seq, h):
        given = "" if accept is None else f" (--accept-loss {accept[0]}:{accept[1]} is not it)"
        raise LedgerIntegrityError(
            f"the snapshot ends at seq {n}; {where} at seq {seq} would be lost"
            f"{' (its history differs from the snapshot)' if seq <= n else ''}{given}; "
            f"nothing was restored. To accept the loss, pass --accept-loss {seq}:{h}")


def _above_counter(con: duckdb.DuckDBPyConnection, kr: Keyring, target: Path,
                   hold: duckdb.DuckDBPyConnection | None) -> int:
    """Give the snapshot's head a counter above every one the target recorded (re-sealed).

    Without this the restored (older) head would count as rolled back against
    the counter file, and a copy of the replaced ledger, whose counter is
    higher, would later pass as "ahead after a crash". The floor is the larger
    of the counter file's and the replaced ledger's own head counter: a writer
    advances the file only after its commit, so the file can lag one commit.
    """
    rec = counter.read(counter.counter_path(target), private=True)
    floor = -1 if rec is None else rec.counter
    if hold is not None:
        try:
            floor = max(floor, storage.head_counter(hold))
        except (LedgerIntegrityError, duckdb.Error):
            pass
    now = storage.head_counter(con)
    if kr.version < 4 or floor < now:
        return now
    seq, h = storage.head(con)
    c = floor + 1
    con.execute("UPDATE chain_head SET counter = ?, seal = ?, signature = ? WHERE id = 1",
                [c, kr.seal(seq, h, c), kr.sign(seq, h, c)])
    return c


def restore(snap: Snapshot, target: Path, *, lock_timeout: float,
            expect: Sequence[tuple[str, SignedHead | heads.PlainHead]] = (),
            accept_loss: tuple[int, str] | None = None) -> SignedHead:
    """Put a verified snapshot in place of the ledger at `target` (see the module docstring).

    Raises:
        ParameterError / LedgerOpenError: bad input (no keys beside `target`, ...).
        LedgerIntegrityError: the snapshot does not verify, or a head would be
            lost that `accept_loss` does not name; `target` is left untouched.
    """
    check_private(target.resolve().parent, "the ledger's directory")
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise ParameterError(f"--ledger {str(target)!r} is not a regular file")
    noise, signer = _target_keys(target)
    kr = _target_keyring(target, noise, signer, str(snap.manifest.get("ledger_id")))
    tmp = target.with_name(f".{target.name}.restore.{os.getpid()}.tmp")
    hold = None
    with file_lock(target):  # no other thread of ours may drop the held lock (paths.file_lock)
        try:
            _copy_in(snap, tmp)
            _verify_copy(tmp, kr)
            entries, named = snap.manifest.get("published", []), _named_in(tmp)
            backup_published.check_backup_store(snap.path.parent, entries, named)
            hold = _hold(target, lock_timeout)
            head, c = _prepare(tmp, kr, target, hold, expect, accept_loss)
            backup_published.restore_store(snap.path.parent, entries, named,
                                           published.store_dir(target))
            _fsync_file(tmp)
            wal = Path(f"{target}.wal")
            if wal.exists():  # a crashed writer's log must not be replayed into the snapshot
                os.rename(wal, Path(f"{wal}.replaced-{os.getpid()}"))
            if target.exists():  # the replaced ledger is kept (same inode, 0600), never lost
                os.link(target, target.with_name(f"{target.name}.replaced-{_stamp()}"))
            os.replace(tmp, target)
            _fsync_dir(target.resolve().parent)
            counter.advance(counter.counter_path(target),
                            counter.Recorded(head.ledger_id, c, head.seq, head.hash))
            return head
        finally:
            if hold is not None:
                hold.close()
            tmp.unlink(missing_ok=True)
            Path(f"{tmp}.wal").unlink(missing_ok=True)


def _prepare(tmp: Path, kr: Keyring, target: Path, hold: duckdb.DuckDBPyConnection | None,
             expect: Sequence[tuple[str, SignedHead | heads.PlainHead]],
             accept_loss: tuple[int, str] | None) -> tuple[SignedHead, int]:
    """Check the loss, lift the counter and re-verify the copy `tmp`; its head and counter."""
    con = duckdb.connect(str(tmp))
    try:
        kr = _snapshot_keyring(kr, con, tmp)
        n = int(con.execute("SELECT count(*) FROM entries").fetchall()[0][0])
        current = _current_heads(hold, target, kr.ledger_id)
        _check_loss(_lost(con, kr, n, current, expect), n, accept_loss)
        con.execute("BEGIN TRANSACTION")
        c = _above_counter(con, kr, target, hold)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    head, _ = _verify_copy(tmp, kr)
    return head, c


def _stamp() -> str:
    """UTC time of a restore, for the name the replaced ledger is kept under."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
