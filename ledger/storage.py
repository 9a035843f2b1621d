"""Storage and transactions: the DuckDB file, its locks, and the rows operations read.

Every ledger operation runs as one short transaction through `Store.transact`:
it opens a connection, runs the operation, commits and closes. A process that
finds the file locked (``IOException: Could not set lock``) or whose
transaction conflicts (``TransactionException``) rolls back and retries with
jittered exponential backoff (5 ms doubling to 250 ms) until ``lock_timeout``
has passed, then raises `LedgerBusyError`. Threads of one process queue on a
per-file lock, and every writing transaction updates the single ``chain_head``
row, so concurrent writers are serialised (`paths.file_lock` says why no
thread may even read the file while another holds a connection). The
functions below read and write rows inside such a transaction (accounts,
domains, step runs, releases).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from ledger import counter, keys, schema, signing
from ledger.accounting import KIND_SIGN, Run
from ledger.amounts import UNITS_PER_EPSILON
from ledger.chain import GENESIS_HASH, format_ts
from ledger.errors import (
    LedgerBusyError,
    LedgerIntegrityError,
    LedgerOpenError,
    LedgerStorageError,
)
from ledger.keyring import Keyring
from ledger.paths import file_lock
from ledger.schema import first_row

log = logging.getLogger("privpipe.ledger")

T = TypeVar("T")
AccountKey = tuple[str, str, str]
"""(user_id, domain, stream_id)."""



def now() -> str:
    """The current UTC time as an entry timestamp."""
    return format_ts(datetime.now(UTC).replace(tzinfo=None))


def _sleep_backoff(attempt: int, deadline: float) -> None:
    delay = min(0.25, 0.005 * 2 ** min(attempt, 6))
    time.sleep(min(random.uniform(0, delay) + 0.001, max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def init_lock(directory: Path, deadline: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` on `directory` (polling until `deadline`).

    Raises:
        LedgerBusyError: another process held the lock until the deadline.
    """
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # an unreadable directory: creating in it fails with a clear error anyway
        yield
        return
    try:
        attempt = 0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LedgerBusyError(
                        f"gave up waiting for another process creating a ledger in "
                        f"{str(directory)!r}") from None
                _sleep_backoff(attempt, deadline)
                attempt += 1
        yield
    finally:
        os.close(fd)  # releases the lock


def _is_lock_error(err: Exception) -> bool:
    text = str(err)
    return "Could not set lock" in text or "Conflicting lock" in text


def _is_conflict(err: Exception) -> bool:
    """A transaction that lost a race with another one (retried)."""
    return "conflict" in str(err).lower()


def _is_write_failure(err: Exception) -> bool:
    """The file system refused a write (full disk, size limit, I/O error)."""
    text = str(err)
    return any(s in text for s in ("Could not write", "No space left", "File too large",
                                   "Input/output error", "Disk quota", "Failed to commit"))


def _first_failure(err: duckdb.TransactionException) -> BaseException:
    """The error that aborted a transaction: the failed statement's, not DuckDB's "aborted".

    After a statement fails inside a transaction, DuckDB answers every later
    one with "Current transaction is aborted"; that is no conflict to retry,
    and the statement's own error (an overflow, say) is what the caller must see.
    """
    cause: BaseException | None = err.__context__
    while cause is not None and isinstance(cause, duckdb.TransactionException):
        cause = cause.__context__
    return cause if isinstance(cause, duckdb.Error) else err


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


@dataclass
class Store:
    """A ledger database file and the transactions run on it.

    A writing transaction is followed by a DuckDB ``CHECKPOINT`` before it
    returns, so what a caller was told is committed lives in the database file
    itself, not only in the write-ahead log (which a crash can leave behind and
    an attacker can truncate). `read_only` opens the file read-only (auditors).
    """

    path: Path
    lock_timeout: float
    read_only: bool = False
    _held: duckdb.DuckDBPyConnection | None = field(default=None, init=False, repr=False)
    _writing: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _cursors: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pending: bool = field(default=False, init=False, repr=False)

    def _connect(self, deadline: float, attempt: int) -> duckdb.DuckDBPyConnection:
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=self.read_only)
            except duckdb.IOException as err:
                if not _is_lock_error(err):
                    raise LedgerOpenError(
                        f"cannot open the ledger {str(self.path)!r}: not a readable DuckDB "
                        f"database ({str(err).splitlines()[0]})"
                    ) from None
            except duckdb.Error as err:
                raise LedgerOpenError(
                    f"cannot open the ledger {str(self.path)!r}: {str(err).splitlines()[0]}"
                ) from None
            attempt = self._backoff(deadline, attempt, "another process holds the ledger file")

    def _backoff(self, deadline: float, attempt: int, why: str) -> int:
        if time.monotonic() >= deadline:
            raise LedgerBusyError(
                f"gave up after {self.lock_timeout:g} s: {why} ({str(self.path)!r}); "
                "retry when the other release has finished"
            )
        _sleep_backoff(attempt, deadline)
        return attempt + 1

    def _checkpoint(self, con: duckdb.DuckDBPyConnection, defer: bool = False) -> None:
        """Fold the write-ahead log into the file.

        `defer` (a held instance): DuckDB refuses while a read older than the last
        write is open (it still needs the rows the write replaced); then the fold
        is left pending, tried again after the next read or write (`_fold_pending`).
        """
        try:
            con.execute("CHECKPOINT")
            self._pending = False
        except duckdb.Error as err:
            if defer and "Cannot CHECKPOINT" in str(err):
                self._pending = True
                return
            cause = str(err).splitlines()[0]
            raise LedgerStorageError(
                f"the ledger {str(self.path)!r} committed, but its write-ahead log could not be "
                f"folded into the file ({cause}); free space and run the same command again "
                "(it is idempotent)") from None

    def _storage_error(self, err: Exception) -> LedgerStorageError:
        cause = str(err).splitlines()[0]
        cause = cause.removeprefix("TransactionContext Error: ")
        return LedgerStorageError(
            f"cannot write the ledger {str(self.path)!r}: {cause}; nothing was committed. "
            "Free space on its file system (or fix the I/O error) and run the command again")

    def hold(self) -> None:
        """Keep one DuckDB database instance open until `unhold` (the ledger service).

        The process then owns the file: other processes wait for it (``lock_timeout``,
        then `LedgerBusyError`). Writes are serialised by a lock of this store, each
        on its own cursor; each read runs on its own cursor in a transaction, so it
        sees one consistent snapshot (DuckDB MVCC) and neither waits for a write in
        progress nor makes one wait. Nothing else of this process may open the file
        while it is held (`paths.file_lock` says why): share this store instead.

        Raises:
            LedgerOpenError, LedgerBusyError: as `transact`.
        """
        with file_lock(self.path):
            if self._held is None:
                deadline = time.monotonic() + self.lock_timeout
                self._held = self._connect(deadline, 0)

    def unhold(self) -> None:
        """Fold the write-ahead log into the file and close the held instance (if any)."""
        with self._writing:
            held, self._held = self._held, None
            if held is not None:
                try:
                    if not self.read_only:
                        self._checkpoint(held)
                finally:
                    held.close()

    def _cursor(self) -> duckdb.DuckDBPyConnection | None:
        with self._cursors:
            return None if self._held is None else self._held.cursor()

    def _attempt(self, con: duckdb.DuckDBPyConnection,
                 fn: Callable[[duckdb.DuckDBPyConnection], T], write: bool
                 ) -> tuple[bool, T | None]:
        """One try of `fn` in a transaction on `con`.

        (True, result), or (False, None) on a conflict to retry; other failures are
        raised as `transact` documents.
        """
        try:
            con.execute("BEGIN TRANSACTION")
            result = fn(con)
            con.execute("COMMIT")
            if write and not self.read_only:
                self._checkpoint(con, defer=self._held is not None)
            return True, result
        except duckdb.TransactionException as err:
            _rollback(con)
            if _is_conflict(err):
                return False, None
            if _is_write_failure(err):
                raise self._storage_error(err) from None
            raise _first_failure(err) from None
        except (duckdb.IOException, duckdb.SerializationException) as err:
            _rollback(con)
            if _is_write_failure(err):
                raise self._storage_error(err) from None
            raise LedgerOpenError(
                f"cannot read the ledger {str(self.path)!r}: "
                f"{str(err).splitlines()[0]} (truncated or corrupted file? restore it "
                "from backup)"
            ) from None
        except BaseException:
            _rollback(con)
            raise

    def _transact_held(self, fn: Callable[[duckdb.DuckDBPyConnection], T], write: bool,
                       exclusive: bool) -> T:
        """`transact` on the held instance (`hold`); `exclusive`: no write commits meanwhile.

        Raises:
            LedgerOpenError: the instance was closed (the service is stopping).
        """
        deadline = time.monotonic() + self.lock_timeout
        attempt = 0
        with self._writing if write or exclusive else contextlib.nullcontext():
            while True:
                con = self._cursor()
                if con is None:
                    raise LedgerOpenError(f"the ledger {str(self.path)!r} was closed (the "
                                          "ledger service is stopping); retry")
                try:
                    done, result = self._attempt(con, fn, write)
                finally:
                    con.close()
                if done:
                    break
                attempt = self._backoff(deadline, attempt, "conflicting ledger transactions")
        if not write:
            self._fold_pending()
        return result  # type: ignore[return-value]

    def _fold_pending(self) -> None:
        """After a read on a held instance: a checkpoint a read held off, if no write runs."""
        if not self._pending or self.read_only or not self._writing.acquire(blocking=False):
            return
        try:
            con = self._cursor()
            if con is not None:
                try:
                    self._checkpoint(con, defer=True)
                finally:
                    con.close()
        except LedgerStorageError as err:  # the write it follows was committed and answered
            log.warning("%s", err)
        finally:
            self._writing.release()

    def transact(self, fn: Callable[[duckdb.DuckDBPyConnection], T], *, write: bool = True,
                 exclusive: bool = False) -> T:
        """Run `fn(con)` in one transaction, retrying on file locks and conflicts.

        On a held instance (`hold`) it runs on a cursor of that instance; otherwise
        it opens the file, runs and closes, under this process's file lock.
        `exclusive` (a read that also reads files a write changes after its commit,
        such as `verify` and the head counter file): on a held instance no write
        commits while it runs.

        Raises:
            LedgerStorageError: the file system refused a write (nothing committed),
                or the committed transaction could not be checkpointed.
            LedgerBusyError: the file stayed locked or conflicting past `lock_timeout`.
        """
        if self._held is not None:
            return self._transact_held(fn, write, exclusive)
        deadline = time.monotonic() + self.lock_timeout
        attempt = 0
        with file_lock(self.path):
            while True:
                con = self._connect(deadline, attempt)
                try:
                    done, result = self._attempt(con, fn, write)
                finally:
                    con.close()
                if done:
                    return result  # type: ignore[return-value]
                attempt = self._backoff(deadline, attempt, "conflicting ledger transactions")


def create(p: Path, kp: Path) -> None:
    """Create the database, its noise key, signing key, pin and head counter unless they exist.

    The caller holds `init_lock`. A ledger and noise key that both exist are
    left as they are (`Ledger.init` then opens them).

    Raises:
        LedgerOpenError: only one of the ledger and its noise key exists, or a
            file cannot be created.
    """
    if p.exists() and kp.exists():
        return
    if p.exists():
        raise LedgerOpenError(
            f"the ledger {str(p)!r} exists but its noise key {str(kp)!r} is missing; "
            "restore the key from backup (privpipe never regenerates it)"
        )
    if kp.exists():
        raise LedgerOpenError(
            f"a noise key {str(kp)!r} exists without its ledger {str(p)!r}; restore the "
            "ledger or move the key away before creating a new ledger"
        )
    for f in (signing.signing_key_path(p), signing.public_key_path(p), signing.pin_path(p),
              counter.counter_path(p)):
        if f.exists() or f.is_symlink():
            raise LedgerOpenError(
                f"{str(f)!r} exists without its ledger {str(p)!r}; move it away before "
                "creating a new ledger")
    key = keys.create_key(kp)
    made = [kp]
    try:
        signer = signing.create_signing_key(p)
        made += [signing.signing_key_path(p), signing.public_key_path(p), p,
                 Path(str(p) + ".wal"), signing.pin_path(p), counter.counter_path(p)]
        first = _create_tables(p, key, signer)
        signing.write_pin(p, signing.public_bytes(signer))
        counter.advance(counter.counter_path(p), first, locked=True)
    except BaseException:
        for f in made:
            f.unlink(missing_ok=True)
        raise


def _create_tables(p: Path, key: bytes, signer: Any) -> counter.Recorded:
    try:
        con = duckdb.connect(str(p))
    except duckdb.Error as err:
        raise LedgerOpenError(f"cannot create the ledger {str(p)!r}: {err}") from None
    try:
        created, ledger_id = now(), os.urandom(16).hex()
        public = signing.public_bytes(signer)
        con.execute("BEGIN TRANSACTION")
        schema.create(con, created)
        con.executemany("INSERT INTO meta VALUES (?, ?)", [
            ["ledger_id", ledger_id],
            ["units_per_epsilon", str(UNITS_PER_EPSILON)],
            ["key_fingerprint", keys.key_fingerprint(key)],
            ["signing_public_key", public.hex()],
            ["signing_key_fingerprint", signing.fingerprint(public)],
            ["created_at", created],
        ])
        v = schema.SCHEMA_VERSION
        con.execute("INSERT INTO chain_head VALUES (1, 0, ?, ?, ?, 1)",
                    [GENESIS_HASH, keys.chain_seal_v3(key, v, 0, GENESIS_HASH, 1),
                     signing.sign_head(signer, ledger_id, v, 0, GENESIS_HASH, 1)])
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return counter.Recorded(ledger_id, 1, 0, GENESIS_HASH)


@dataclass(frozen=True)
class Meta:
    """What a ledger file says about itself (table ``meta`` and ``schema_version``)."""

    version: int
    key_fingerprint: str
    ledger_id: str
    public_key: str | None  # hex; None before schema 3


def open_tx(con: duckdb.DuckDBPyConnection, path: Path) -> Meta:
    """Check that `con` holds a privpipe ledger this privpipe can read; return its metadata.

    An older schema is read as it is (`Ledger.migrate` upgrades it, never this).

    Raises:
        LedgerOpenError: not a privpipe ledger, a newer schema, missing metadata
            or another amount quantum.
    """
    try:
        version = schema.stored_version(con)
    except duckdb.Error as err:
        raise LedgerOpenError(f"cannot read {str(path)!r}: {err}") from None
    if version is None:
        raise LedgerOpenError(
            f"{str(path)!r} is a DuckDB file but not a privpipe ledger "
            "(no privpipe-ledger schema_version)"
        )
    if version > schema.SCHEMA_VERSION:
        raise LedgerOpenError(
            f"the ledger {str(path)!r} has schema version {version}, newer than this "
            f"privpipe supports ({schema.SCHEMA_VERSION}); upgrade privpipe"
        )
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    if "key_fingerprint" not in meta or "units_per_epsilon" not in meta:
        raise LedgerOpenError(f"the ledger {str(path)!r} lacks its metadata")
    if int(meta["units_per_epsilon"]) != UNITS_PER_EPSILON:
        raise LedgerOpenError(
            f"the ledger {str(path)!r} uses a different amount quantum; "
            "it was written by an incompatible privpipe"
        )
    return Meta(version, str(meta["key_fingerprint"]), str(meta.get("ledger_id", "")),
                meta.get("signing_public_key"))


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> Iterator[None]:
    """Make an Arrow table visible to SQL as `name` for the duration of the block."""
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)


def head(con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
    """(last_seq, last_hash) of the chain head.

    Raises:
        LedgerIntegrityError: the ``chain_head`` row is missing.
    """
    row = first_row(con.execute("SELECT last_seq, last_hash FROM chain_head WHERE id = 1"))
    if row is None:
        raise LedgerIntegrityError("the ledger's chain_head row is missing")
    return int(row[0]), str(row[1])


def head_counter(con: duckdb.DuckDBPyConnection) -> int:
    """The head counter (schema 4; 0 when the column or value is missing)."""
    if not has_column(con, "chain_head", "counter"):
        return 0
    row = first_row(con.execute("SELECT counter FROM chain_head WHERE id = 1"))
    return int(row[0]) if row and row[0] is not None else 0


def has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    """Whether `table` of the main schema has `column`."""
    return bool(first_row(con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_name = ? AND column_name = ?", [table, column]))[0])


def load_domains(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Every domain row by name, all columns (cap in quanta, as stored; any schema)."""
    cur = con.execute("SELECT * FROM domains")
    names = [d[0] for d in cur.description]
    return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def check_domain_macs(con: duckdb.DuckDBPyConnection, key: Keyring, names: Iterable[str]
                      ) -> None:
    """Refuse to charge against a domain row (cap, notion, w) edited outside privpipe.

    Raises:
        LedgerIntegrityError: a named domain's keyed MAC does not match; nothing is charged.
    """
    wanted = set(names)
    cols = ", ".join(schema.domain_mac_columns(key.version))
    for *row, mac in con.execute(f"SELECT {cols}, mac FROM domains").fetchall():  # noqa: S608
        if row[0] in wanted and mac != schema.domain_mac(key.noise_key, tuple(row), key.version):
            raise LedgerIntegrityError(
                f"domain {row[0]!r} was changed outside privpipe (its keyed MAC does not "
                "match); nothing was charged. Run `privpipe ledger verify` and restore the "
                "ledger from backup."
            )


def _keys_table(users: Sequence[str], domains: Sequence[str], streams: Sequence[str]
                ) -> pa.Table:
    return pa.table({
        "i": pa.array(range(len(users)), pa.int64()),
        "user_id": pa.array(users, pa.string()),
        "domain": pa.array(domains, pa.string()),
        "stream_id": pa.array(streams, pa.string()),
    })


def account_spent(con: duckdb.DuckDBPyConnection, users: Sequence[str], domains: Sequence[str],
                  streams: Sequence[str]) -> list[int | None]:
    """Stored spent (quanta) of each (user, domain, stream), None for a new account."""
    with registered(con, "_pp_keys", _keys_table(users, domains, streams)):
        found = con.sql(
            "SELECT k.i, CAST(a.spent AS VARCHAR) AS spent FROM _pp_keys k JOIN accounts a "
            "ON a.user_id = k.user_id AND a.domain = k.domain AND a.stream_id = k.stream_id"
        ).to_arrow_table()
    out: list[int | None] = [None] * len(users)
    texts = found.column("spent").to_pylist()
    memo = {t: int(t) for t in set(texts)}
    for i, t in zip(found.column("i").to_pylist(), texts, strict=True):
        out[i] = memo[t]
    return out


def account_runs(con: duckdb.DuckDBPyConnection, accounts: Sequence[AccountKey],
                 per_user: frozenset[str] = frozenset()) -> dict[AccountKey, list[Run]]:
    """The signed step runs (reserve +, refund and close -) of w-event accounts.

    The account of a domain in `per_user` is (user, domain, ''): its runs are
    those of every stream of the user in the domain (`ledger.wevent_budget`).
    """
    out: dict[AccountKey, list[Run]] = {k: [] for k in accounts}
    own = [k for k in accounts if k[1] not in per_user]
    mine = [k for k in accounts if k[1] in per_user]
    for group, per_user_group in ((own, False), (mine, True)):
        if not group:
            continue
        users, domains, streams = (list(c) for c in zip(*group, strict=True))
        with registered(con, "_pp_keys", _keys_table(users, domains, streams)):
            if per_user_group:  # every stream of the user in the domain
                rows = con.execute(
                    "SELECT k.user_id, k.domain, k.stream_id, r.kind, r.run_start, r.run_stop, "
                    "r.amount FROM step_runs r JOIN _pp_keys k ON r.user_id = k.user_id "
                    "AND r.domain = k.domain WHERE r.kind IN ('reserve', 'refund', 'close')"
                ).fetchall()
            else:
                rows = con.execute(
                    "SELECT k.user_id, k.domain, k.stream_id, r.kind, r.run_start, r.run_stop, "
                    "r.amount FROM step_runs r JOIN _pp_keys k ON r.user_id = k.user_id "
                    "AND r.domain = k.domain AND r.stream_id = k.stream_id "
                    "WHERE r.kind IN ('reserve', 'refund', 'close')"
                ).fetchall()
        for u, d, s, kind, a, b, q in rows:
            out[(u, d, s)].append((int(a), int(b), KIND_SIGN[kind] * int(q)))
    return out


@dataclass
class AccountWrites:
    """Accounts to insert or update, as columns (cap and spent in quanta)."""

    users: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    caps: list[int] = field(default_factory=list)
    spents: list[int] = field(default_factory=list)

    def add(self, user: str, domain: str, stream: str, cap: int, spent: int) -> None:
        """Queue one account row."""
        self.users.append(user)
        self.domains.append(domain)
        self.streams.append(stream)
        self.caps.append(cap)
        self.spents.append(spent)


def save_accounts(con: duckdb.DuckDBPyConnection, accounts: AccountWrites) -> None:
    """Insert or update accounts (one bulk upsert; an existing row keeps its cap)."""
    if not accounts.users:
        return
    memo = {v: str(v) for v in {*accounts.caps, *accounts.spents}}
    tbl = pa.table({
        "user_id": pa.array(accounts.users, pa.string()),
        "domain": pa.array(accounts.domains, pa.string()),
        "stream_id": pa.array(accounts.streams, pa.string()),
        "cap": pa.array(list(map(memo.__getitem__, accounts.caps)), pa.string()),
        "spent": pa.array(list(map(memo.__getitem__, accounts.spents)), pa.string()),
    })
    with registered(con, "_pp_acc", tbl):
        con.execute(
            "INSERT INTO accounts SELECT user_id, domain, stream_id, CAST(cap AS HUGEINT), "
            "CAST(spent AS HUGEINT) FROM _pp_acc ON CONFLICT (user_id, domain, stream_id) "
            "DO UPDATE SET spent = excluded.spent"
        )


def runs_of(con: duckdb.DuckDBPyConnection, seqs: Sequence[int]) -> dict[int, list[Run]]:
    """The step runs of the given entries, by seq (sorted by start, stop, amount)."""
    tbl = pa.table({"seq": pa.array(seqs, pa.int64())})
    with registered(con, "_pp_seqs", tbl):
        rows = con.execute(
            "SELECT r.seq, r.run_start, r.run_stop, r.amount FROM step_runs r SEMI JOIN "
            "_pp_seqs s ON s.seq = r.seq ORDER BY r.seq, r.run_start, r.run_stop, r.amount"
        ).fetchall()
    out: dict[int, list[Run]] = {int(s): [] for s in seqs}
    for seq, a, b, q in rows:
        out[int(seq)].append((int(a), int(b), int(q)))
    return out


def release_owner(con: duckdb.DuckDBPyConnection, release_id: str) -> str | None:
    """The actor of a release's first reserve or deny entry, None if it has none."""
    row = first_row(con.execute(
        "SELECT actor FROM entries WHERE release_id = ? AND kind IN ('reserve', 'deny') "
        "ORDER BY seq LIMIT 1", [release_id]))
    return None if row is None else str(row[0])


def all_admitted(con: duckdb.DuckDBPyConnection, release_id: str, users: Sequence[str]
                 ) -> bool:
    """Whether every one of `users` has a reserve entry (was admitted) in the release."""
    wanted = pa.table({"user_id": pa.array(sorted(set(users)), pa.string())})
    with registered(con, "_pp_users", wanted):
        row = first_row(con.execute(
            "SELECT count(DISTINCT e.user_id) FROM entries e SEMI JOIN _pp_users u "
            "ON u.user_id = e.user_id WHERE e.release_id = ? AND e.kind = 'reserve'",
            [release_id]))
    return row is not None and int(row[0]) == wanted.num_rows
