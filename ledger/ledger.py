"""The privacy ledger's facade: `Ledger`, a DuckDB file plus its noise key.

Every operation checks its input (`ledger.checks`), then runs one short
transaction (`ledger.storage.Store`) with the module that implements it:
`reserve` (pricing, replays, the pure `admission.admit`), `settle` (settle
and close), `verify`, `policy`, `releases`, `queries`. See ``ledger/README.md``
for the guarantees (no overspend, serialised writers, idempotency, audit).
"""

from __future__ import annotations

import copy
import hashlib
import os
import pwd
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import duckdb
import numpy as np
import pyarrow as pa

from ledger import backup as backup_
from ledger import (
    binding,
    checks,
    counter,
    definitions,
    heads,
    history,
    keys,
    policy,
    published,
    queries,
    releases,
    signing,
    storage,
    summaries,
    watermark,
)
from ledger import replica as replica_
from ledger.checks import check_id
from ledger.entries import canonical_json
from ledger.errors import LedgerIntegrityError, LedgerOpenError
from ledger.filters import Filter
from ledger.keyring import EMBEDDED, Keyring
from ledger.migrate import migrate_tx
from ledger.paths import check_existing_ledger, check_new_ledger_path
from ledger.pricing import unknown_domain
from ledger.records import (
    RELEASE_STATES,
    Decision,
    Request,
    ReserveResult,
    Settlement,
    SignedHead,
    VerifyReport,
)
from ledger.reserve import ReserveCall, reserve_tx
from ledger.schema import SCHEMA_VERSION
from ledger.settle import close_tx, settle_tx
from ledger.verify import verify_tx
from schemas.errors import ParameterError
from schemas.policy import Domain, Policy

__all__ = ["Decision", "Ledger", "Request", "ReserveResult", "Settlement", "SignedHead",
           "VerifyReport", "default_actor", "default_ledger_path"]

T = TypeVar("T")


def default_ledger_path() -> Path:
    """The default ledger: ``$PRIVPIPE_HOME/ledger.duckdb``, else ``./.privpipe/ledger.duckdb``."""
    home = os.environ.get("PRIVPIPE_HOME")
    base = Path(home) if home else Path.cwd() / ".privpipe"
    return base / "ledger.duckdb"


def default_actor() -> str:
    """``user@host`` of the current process (recorded on every entry).

    The user is the OS account of the effective uid (the password database),
    never ``$LOGNAME`` or ``$USER``, which anyone can set; ``uidN`` when the
    uid has no account.
    """
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except (KeyError, OSError):
        user = f"uid{os.geteuid()}"
    return f"{user}@{socket.gethostname()}"


def parameters_digest(parameters: dict[str, Any]) -> str:
    """SHA-256 of a release's canonical parameter JSON (what a release id is bound to)."""
    return hashlib.sha256(canonical_json(parameters, "parameters").encode("utf-8")).hexdigest()


class Ledger:
    """An audited privacy-budget ledger: one DuckDB file, its noise key and its signing key.

    Open an existing ledger with ``Ledger(path)`` or `Ledger.open`; create one
    with `Ledger.init`; an auditor without the secret keys uses
    `Ledger.open_auditor` (read-only, public key only). The object holds no
    open connection, so it can be shared by threads and kept for a flow's life.
    """

    def __init__(self, path: str | os.PathLike[str], *, actor: str | None = None,
                 lock_timeout: float = 60.0, auditor: bool = False,
                 public_key: str | os.PathLike[str] | None = None,
                 expect_fingerprint: str | None = None):
        """Open an existing ledger.

        Args:
            path: the DuckDB file.
            actor: who is writing (recorded on each entry); default ``user@host``.
            lock_timeout: seconds to keep retrying when another process holds the file.
            auditor: open read-only without the noise and signing keys.
            public_key: (auditor) the public key file to check signatures with;
                default ``<ledger>.pub``.
            expect_fingerprint: the SHA-256 fingerprint (hex) the signing key
                must have (what `init` printed); checked like the ``.pin`` file.

        Raises:
            LedgerOpenError: the file is missing, unreadable, not a privpipe ledger,
                of a newer schema, or (not auditor) its noise or signing key is
                missing, malformed or unsafe (symlink, other owner, mode > 0600).
            ParameterError: `expect_fingerprint` is not 64 hex digits.
        """
        self.path = Path(path)
        self.key_path = keys.key_path_for(self.path)
        self.actor = check_id(actor, "actor") if actor is not None else default_actor()
        if lock_timeout <= 0:
            raise ParameterError("lock_timeout must be > 0 seconds")
        self.lock_timeout = float(lock_timeout)
        self.auditor = bool(auditor)
        check_existing_ledger(self.path)  # a directory or a CSV is not "a ledger without key"
        expected_fp = (None if expect_fingerprint is None else
                       signing.parse_fingerprint(expect_fingerprint, "--expect-fingerprint"))
        noise = None if self.auditor else keys.load_key(self.key_path)
        self._store = storage.Store(self.path, self.lock_timeout, read_only=self.auditor)
        meta = self._read(lambda con: storage.open_tx(con, self.path))
        self._key_ok = noise is not None and meta.key_fingerprint == keys.key_fingerprint(noise)
        self._public_key, self._expected_fp = public_key, expected_fp
        self._keys = self._keyring(meta, noise)

    def _keyring(self, meta: storage.Meta, noise: bytes | None) -> Keyring:
        """The keys, and what the files outside the database say (see `Keyring`)."""
        public_key, expected_fp = self._public_key, self._expected_fp
        pin = signing.load_pin(self.path)
        pins = tuple(p for p in ((str(signing.pin_path(self.path)), pin),
                                 ("--expect-fingerprint", expected_fp)) if p[1] is not None)
        outside = [(4, counter.counter_path(self.path).exists(),
                    f"the head counter file {str(counter.counter_path(self.path))!r}"),
                   (3, signing.signing_key_path(self.path).exists(),
                    f"the signing key file {str(signing.signing_key_path(self.path))!r}"),
                   (3, signing.public_key_path(self.path).exists(),
                    f"the public key file {str(signing.public_key_path(self.path))!r}"),
                   (3, pin is not None, f"the pin file {str(signing.pin_path(self.path))!r}"),
                   (3, public_key is not None, f"the public key {str(public_key)!r} given"),
                   (3, expected_fp is not None, "the fingerprint given")]
        floor, why = max(((v, w) for v, present, w in outside if present), default=(0, ""),
                         key=lambda x: x[0])
        signer, public, source = None, None, ""
        if meta.version >= 3 and noise is not None:
            signer = signing.load_signing_key(self.path)
            public = signing.public_bytes(signer)
            source = f"the signing key {str(signing.signing_key_path(self.path))!r}"
            self._key_ok = self._key_ok and public.hex() == meta.public_key
            pub = signing.public_key_path(self.path)
            if pub.exists():  # what auditors are given must be this key's public half
                pins += ((str(pub), signing.fingerprint(signing.load_public_key(pub))),)
        elif meta.version >= 3 or public_key is not None:
            pub = Path(public_key) if public_key else signing.public_key_path(self.path)
            if public_key or pub.exists():
                public, source = signing.load_public_key(pub), f"the public key file {str(pub)!r}"
            elif meta.public_key and pins:
                public = signing.parse_public_key(meta.public_key, "the ledger's key")
                source = f"the ledger's key matching the pinned fingerprint ({pins[0][0]})"
            elif meta.public_key:
                public = signing.parse_public_key(meta.public_key, "the ledger's key")
                source = EMBEDDED
        return Keyring(noise, signer, public, meta.ledger_id, meta.version, floor, why, pins,
                       source, counter.counter_path(self.path))

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, actor: str | None = None,
             lock_timeout: float = 60.0) -> Ledger:
        """Open an existing ledger (same as the constructor)."""
        return cls(path, actor=actor, lock_timeout=lock_timeout)

    @classmethod
    def open_auditor(cls, path: str | os.PathLike[str], *,
                     public_key: str | os.PathLike[str] | None = None,
                     expect_fingerprint: str | None = None,
                     lock_timeout: float = 60.0) -> Ledger:
        """Open a ledger read-only with no secret key, as an auditor.

        Verify checks the chain, balances, policy history and the signed head
        with `public_key` (default ``<ledger>.pub``; keep your own copy: a file
        beside the ledger is the operator's), or with the ledger's own key only
        when its fingerprint is pinned (the ``.pin`` file written at init, or
        `expect_fingerprint`); a key from the database alone is never trusted
        ("NOT independently verified"). MACs and the seal need the noise key and
        are reported as not checked. Queries work as usual.
        """
        return cls(path, auditor=True, public_key=public_key,
                   expect_fingerprint=expect_fingerprint, lock_timeout=lock_timeout)

    @classmethod
    def init(cls, path: str | os.PathLike[str], *, actor: str | None = None,
             lock_timeout: float = 60.0) -> Ledger:
        """Create a ledger, its noise key and its signing key, or open them (idempotent).

        Creating is check-then-create on several files, serialised between
        processes with an exclusive lock on the directory held until the new
        database is committed, so a concurrent init sees nothing or everything.

        Raises:
            LedgerOpenError: only one of the ledger and its noise key exists (a lost
                key is never regenerated; a stray key is never adopted), or a file
                cannot be created.
        """
        p = check_new_ledger_path(path)
        if lock_timeout <= 0:
            raise ParameterError("lock_timeout must be > 0 seconds")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LedgerOpenError(
                f"cannot create directory {str(p.parent)!r}: {err.strerror}") from None
        with storage.init_lock(p.parent, time.monotonic() + float(lock_timeout)):
            storage.create(p, keys.key_path_for(p))
        return cls(p, actor=actor, lock_timeout=lock_timeout)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def hold(self) -> None:
        """Keep the ledger's DuckDB instance open until `close` (the ledger service).

        This process then owns the file; every read sees one consistent snapshot
        and never waits for a write (`storage.Store.hold`) until `unhold`. Give other actors
        `with_actor` of this object: opening the file again would drop its lock.
        """
        self._store.hold()

    def unhold(self) -> None:
        """Checkpoint and close a held instance (`hold`); nothing to do otherwise."""
        self._store.unhold()

    def with_actor(self, actor: str) -> Ledger:
        """This ledger, writing as `actor`: the same keys and the same (held) store.

        Raises:
            ParameterError: `actor` is not a valid id.
        """
        twin = copy.copy(self)
        twin.actor = check_id(actor, "actor")
        return twin

    @property
    def schema_version(self) -> int:
        """The schema version of the ledger file."""
        return self._keys.version

    def _transact(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run a writing operation (the ledger must be current and its keys genuine).

        The head counter file must exist and not be ahead of the database (a
        head restored from an older state admits nothing); after the commit it
        records the new head (`ledger.counter`).
        """
        self._require_current()
        path = counter.counter_path(self.path)
        kept = counter.read(path, private=True)
        if kept is None:
            raise LedgerIntegrityError(
                f"the head counter file {str(path)!r} is missing; restore it with the keys "
                "from backup (`privpipe ledger verify` says more)")
        after: list[counter.Recorded] = []

        def tx(con: duckdb.DuckDBPyConnection) -> T:
            if storage.head_counter(con) < kept.counter:
                raise LedgerIntegrityError(
                    f"the chain head's counter is behind {str(path)!r} (counter "
                    f"{kept.counter}): the head was restored from an older state; nothing "
                    "was written (`privpipe ledger verify` names what is wrong)")
            out = fn(con)
            after[:] = [counter.Recorded(self._keys.ledger_id, storage.head_counter(con),
                                         *storage.head(con))]
            return out

        result = self._store.transact(tx)
        counter.advance(path, after[0])
        return result

    def _require_current(self) -> None:
        self._require_key()
        if self._keys.version < SCHEMA_VERSION:
            raise LedgerOpenError(
                f"the ledger {str(self.path)!r} has schema version {self._keys.version}; this "
                f"privpipe writes version {SCHEMA_VERSION}. Run `privpipe ledger migrate` "
                "(after it verifies); reading and verifying work as they are")

    def _read(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        return self._store.transact(fn, write=False)

    def _require_key(self) -> None:
        if self.auditor:
            raise LedgerIntegrityError(
                "an auditor's ledger (opened with the public key only) cannot write or seed "
                "noise")
        if not self._key_ok:
            raise LedgerIntegrityError(
                f"the noise key {str(self.key_path)!r} or the signing key does not match the "
                "fingerprints stored in the ledger (replaced or edited key); restore the "
                "original keys")

    def migrate(self, policy_: Policy | None = None) -> list[str]:
        """Upgrade an older ledger to this schema, only after it verifies (`ledger.migrate`).

        `policy_`, when given, must describe the ledger's domains as they are;
        their whole definitions are then recorded. Returns one line per step.
        """
        self._require_key()
        made = [f for f in (signing.signing_key_path(self.path),
                            signing.public_key_path(self.path)) if not f.exists()]
        after: list[counter.Recorded] = []

        def tx(con: duckdb.DuckDBPyConnection) -> list[str]:
            lines = migrate_tx(con, self.path, self._keys, self.actor, policy_)
            after[:] = [counter.Recorded(self._keys.ledger_id, storage.head_counter(con),
                                         *storage.head(con))]
            return lines

        try:
            lines = self._store.transact(tx)
        except BaseException:
            for f in made:  # a key created by a migration that did not commit
                f.unlink(missing_ok=True)
            raise
        if self._keys.version < SCHEMA_VERSION:  # migrated now: the files outside the database
            counter.advance(counter.counter_path(self.path), after[0])
            if signing.load_pin(self.path) is None:
                signing.write_pin(self.path, signing.public_bytes(
                    signing.load_signing_key(self.path)))
        meta = self._read(lambda con: storage.open_tx(con, self.path))
        self._keys = self._keyring(meta, self._keys.noise)
        return lines

    def head(self) -> SignedHead:
        """The current chain head, signed with the ledger's Ed25519 key (schema 3)."""
        return self._read(lambda con: heads.read_head(con, self._keys))

    def kept_head_problem(self, where: str, kept: SignedHead | heads.PlainHead) -> str | None:
        """Why a kept signed head is not one this ledger's key signed (None: it is, or plain).

        Whether the chain contains it is `verify`'s question (``expect``).
        """
        if isinstance(kept, heads.PlainHead):
            return None
        return heads.signature_problem(where, kept, self._keys)

    def checkpoint(self, path: str | os.PathLike[str]) -> SignedHead:
        """Write the signed head to a new file an auditor keeps (`verify(expect=...)`)."""
        h = self.head()
        heads.write_checkpoint(path, h, storage.now())
        return h

    def backup(self, out: str | os.PathLike[str], *, include_keys: bool = False
               ) -> dict[str, Any]:
        """Write a consistent, verified snapshot to the new directory `out` (`ledger.backup`).

        Returns the manifest written beside the snapshot.
        """
        self._require_key()
        return backup_.backup(self.path, self._keys, Path(out), lock_timeout=self.lock_timeout,
                              created_at=storage.now(), include_keys=include_keys)

    def replicate(self, replica: str | os.PathLike[str]) -> dict[str, Any]:
        """One round of the read-only replica in the directory `replica` (`ledger.replica`).

        Verifies a snapshot, checks that its chain contains the replica's head,
        then puts it in place. Returns the replica's manifest.
        """
        self._require_key()
        return replica_.replicate(self.path, self._keys, Path(replica),
                                  lock_timeout=self.lock_timeout, created_at=storage.now())

    # ------------------------------------------------------------------ policy

    def apply_policy(self, policy_: Policy, reason: str = "") -> list[str]:
        """Create or update the ledger's domains from a validated policy (idempotent).

        Cap changes apply to future requests (accounts take the new cap); changing
        a charged domain's notion, w, kind or units is refused (`PolicyChangeError`);
        domains absent from the policy are kept. Returns one line per change.
        `reason` (why, for auditors) is recorded in each change's hash-chained
        ``policy`` entry (``detail.reason``) with the actor.
        """
        check_id(reason, "--reason", allow_empty=True)
        return self._transact(lambda con: policy.apply_tx(con, self._keys, self.actor, policy_,
                                                          storage.now(), reason))

    def domains(self) -> list[dict[str, Any]]:
        """The ledger's domains: name, kind, notion, cap (exact Fraction), w, units, definition.

        ``definition`` is the whole `schemas.policy.Domain` (None for a domain
        migrated without a policy, until one is applied).
        """
        return self._read(policy.list_tx)

    def domain(self, name: str) -> Domain:
        """The complete definition of one domain, from its MAC-checked row.

        Raises:
            ParameterError: unknown domain, or one without a recorded definition.
            LedgerIntegrityError: the row was changed outside privpipe.
        """
        check_id(name, "domain")

        def tx(con: duckdb.DuckDBPyConnection) -> Domain:
            storage.check_domain_macs(con, self._keys, [name])
            rows = storage.load_domains(con)
            if name not in rows:
                raise unknown_domain(name, rows)
            if not rows[name].get("definition"):
                raise ParameterError(
                    f"domain {name!r} has no complete definition in the ledger (migrated from "
                    "an older schema without a policy); run `privpipe ledger policy apply "
                    "FILE` to record it")
            return definitions.decode(rows[name]["definition"], name)

        self._require_key()
        return self._read(tx)

    def policy_history(self, domain: str | None = None, *, where: Filter | None = None
                       ) -> list[dict[str, Any]]:
        """Every policy change recorded in the chain, in order (see `history.policy_history`)."""
        if domain is not None:
            check_id(domain, "domain")
        flt = where or Filter()
        if domain is not None:
            flt = replace(flt, domain=domain)
        return self._read(lambda con: history.policy_history(con, flt))

    # ------------------------------------------------------------------ reserve / settle

    def reserve(self, release_id: str, requests: Sequence[Request], *, mechanism: str,
                parameters: dict[str, Any], flow_run_id: str | None = None,
                input_fingerprint: str | None = None) -> ReserveResult:
        """Reserve budget for a release, all-or-nothing per user, in one transaction.

        Privacy guarantee: a user is admitted iff after *all* of the user's
        requests in this call every cap still holds (GP/CGP totals; every window
        of w steps of every stream, earlier releases included); a denied user is
        charged nothing. A replay of a (release_id, user_id, step, stream_id)
        returns the recorded decision and writes nothing. Cost: one transaction,
        O(n log n) in the number of requests.

        Raises:
            ParameterError: bad ids, amounts or runs, unknown domain, duplicate
                keys, a closed release.
            NotionMismatchError: e.g. a CGP request on a GP domain.
            ReplayConflictError: a key was recorded earlier with a different request,
                or the release id was reserved for another input or other parameters.
            LedgerIntegrityError: the noise key does not match the ledger.
        """
        call = self._call(release_id, mechanism, parameters, flow_run_id, input_fingerprint)
        cols = checks.request_columns(list(requests))

        def tx(con: duckdb.DuckDBPyConnection) -> ReserveResult:
            # in the reserve's own transaction: two racing runs are serialised
            binding.check_binding(con, call.release_id, call.input_fingerprint,
                                  call.parameters)
            binding.check_metric(storage.load_domains(con), cols.domains, call.mechanism)
            return reserve_tx(con, self._keys, self.actor, call, cols)

        return self._transact(tx)

    def plan(self, release_id: str, requests: Sequence[Request], *, mechanism: str = "plan",
             parameters: dict[str, Any] | None = None,
             input_fingerprint: str | None = None) -> ReserveResult:
        """The decisions `reserve` would make now, writing nothing and drawing nothing.

        The same checks, pricing, replay answers and admission function as
        `reserve` (a request recorded earlier in the release is answered from its
        entry, ``replayed=True``); a fresh decision has ``entry_seq`` 0. With
        `parameters` (a release's dry run), the release binding and the
        mechanism's metric are checked as `reserve` checks them. It is a
        forecast, not a reservation: a reserve that runs later decides against
        the balances of its own transaction. Cost: one read-only transaction.

        Raises:
            The errors of `reserve`, for the same requests.
        """
        self._require_current()
        call = self._call(release_id, mechanism, parameters or {}, None, input_fingerprint)
        cols = checks.request_columns(list(requests))

        def tx(con: duckdb.DuckDBPyConnection) -> ReserveResult:
            if parameters is not None:
                binding.check_binding(con, call.release_id, call.input_fingerprint,
                                      call.parameters)
            binding.check_metric(storage.load_domains(con), cols.domains, call.mechanism)
            return reserve_tx(con, self._keys, self.actor, call, cols, write=False)

        return self._read(tx)

    @staticmethod
    def _call(release_id: str, mechanism: str, parameters: dict[str, Any],
              flow_run_id: str | None, input_fingerprint: str | None) -> ReserveCall:
        check_id(release_id, "release_id")
        check_id(mechanism, "mechanism")
        if flow_run_id is not None:
            check_id(flow_run_id, "flow_run_id")
        if input_fingerprint is not None:
            check_id(input_fingerprint, "input_fingerprint")
        if not isinstance(parameters, dict):
            raise ParameterError("parameters must be a dict")
        return ReserveCall(release_id, mechanism, canonical_json(parameters, "parameters"),
                           flow_run_id, input_fingerprint)

    def check_binding(self, release_id: str, input_fingerprint: str | None,
                      parameters: dict[str, Any]) -> None:
        """Refuse (read-only) a release id bound to another input or other parameters.

        `reserve` and `settle` check the same binding inside their own
        transactions; this is the early, read-only form a flow runs before it
        does any work.

        Raises:
            ReplayConflictError: the release was reserved for another input or parameters.
        """
        check_id(release_id, "release_id")
        bound = canonical_json(parameters, "parameters")
        self._read(lambda con: binding.check_binding(con, release_id, input_fingerprint, bound))

    def settle(self, release_id: str, settlements: Sequence[Settlement], *,
               input_fingerprint: str | None = None,
               parameters: dict[str, Any] | None = None) -> None:
        """Record the actual cost of admitted requests and refund the unused part.

        With `parameters` (and `input_fingerprint`), the release's binding is
        checked first: a settlement for another input or other parameters than
        the release was reserved for raises `ReplayConflictError`.

        Each settlement writes a ``settle`` entry with the per-sub-step breakdown
        and, if the actual cost is below the reservation, a ``refund`` entry with
        the difference (per step for w-event). Settling a key again with the same
        cost writes nothing.

        Raises:
            ParameterError: no admitted reservation for a key (unknown, denied or
                closed), or a domain/notion/w that does not match it.
            ReplayConflictError: the key was settled earlier with a different cost.
            LedgerInternalError: the actual cost exceeds the reservation (a bug).
        """
        check_id(release_id, "release_id")
        cols = checks.settlement_columns(list(settlements))
        bound = None if parameters is None else canonical_json(parameters, "parameters")

        def tx(con: duckdb.DuckDBPyConnection) -> None:
            if bound is not None:
                binding.check_binding(con, release_id, input_fingerprint, bound)
            settle_tx(con, self._keys, self.actor, release_id, cols)

        self._transact(tx)

    def close(self, release_id: str, reason: str) -> None:
        """Close a release: refund its unsettled reservations with audited ``close`` entries.

        Only close a release if no output of its unsettled users can have left
        the system. A closed release accepts no new reservations. Idempotent.

        Raises:
            ParameterError: unknown release or empty reason.
        """
        check_id(release_id, "release_id")
        check_id(reason, "reason")
        self._transact(lambda con: close_tx(con, self._keys, self.actor, release_id, reason))

    # ------------------------------------------------------------------ releases

    def record_release(self, release_id: str, manifest: dict[str, Any], state: str) -> None:
        """Store a release's manifest (JSON) and state (reserved | settled | closed | failed).

        Raises:
            ParameterError: unknown state, non-JSON manifest, or reopening a closed release.
        """
        self._require_key()
        check_id(release_id, "release_id")
        if state not in RELEASE_STATES:
            raise ParameterError(f"release state must be one of {', '.join(RELEASE_STATES)}")
        if not isinstance(manifest, dict):
            raise ParameterError("a release manifest must be a dict")
        text = canonical_json(manifest, "manifest")
        self._transact(lambda con: releases.record(con, self._keys.noise_key, release_id, text,
                                                   state,
                                                   storage.now()))

    def put_published(self, release_id: str, name: str,
                      data: bytes | str | os.PathLike[str] | BinaryIO) -> dict[str, Any]:
        """Keep a settled release's published file `name` in the ledger's store.

        The store is ``published/`` beside the ledger (`ledger.published`).

        `data` is the file's bytes, its path or an open binary stream. Accepted
        only when the release's manifest in the ledger names `name` with exactly
        the SHA-256 of `data`; storing the same bytes again changes nothing.

        Returns:
            ``sha256``, ``size`` and ``stored`` (False: already kept).

        Raises:
            PublishedFileError: no settled release names that file with that digest,
                or the store directory is unsafe (a symlink, another user's).
            LedgerIntegrityError: an auditor's ledger (read-only).
        """
        self._require_key()
        check_id(release_id, "release_id")
        return published.put(published.store_dir(self.path), self.release(release_id),
                             release_id, name, published.blocks_of(data))

    def published(self, release_id: str, name: str, to: str | os.PathLike[str]) -> Path:
        """Copy a release's published file from the ledger's store to the new file `to`.

        The bytes are checked against the SHA-256 the release's manifest records
        while they are copied; nothing is left at `to` when they differ.

        Raises:
            PublishedFileError: no settled release names that file, or the store
                keeps no copy of it.
            OutputIntegrityError: the stored copy was edited or replaced (not used).
        """
        check_id(release_id, "release_id")
        return published.copy_out(published.store_dir(self.path), self.release(release_id),
                                  release_id, name, Path(to))

    def release(self, release_id: str) -> dict[str, Any] | None:
        """A release's record (state, manifest as a dict, timestamps) or None if unknown."""
        check_id(release_id, "release_id", allow_empty=True)
        return self._read(lambda con: releases.lookup(con, release_id))

    def release_owner(self, release_id: str) -> str | None:
        """The actor of the release's first reserve or deny entry (None: not reserved)."""
        return self._read(lambda con: storage.release_owner(con, release_id))

    def all_admitted(self, release_id: str, users: Sequence[str]) -> bool:
        """Whether each of `users` was admitted (has a reserve entry) in the release."""
        return self._read(lambda con: storage.all_admitted(con, release_id, users))

    def entry_range(self, release_id: str) -> tuple[int, int] | None:
        """(first_seq, last_seq) of a release's entries, or None if it has none."""
        check_id(release_id, "release_id", allow_empty=True)
        return self._read(lambda con: releases.entry_range(con, release_id))

    def input_tag(self, content_fingerprint: str) -> str:
        """The fingerprint a release records and publishes for an input (`keys.input_tag`).

        A keyed HMAC of the input's content hash: it links a validated file to its
        release for whoever holds the noise key (`privpipe validate --ledger`), and
        is no test of a guessed input for anyone else (the content hash itself
        never leaves the process).

        Raises:
            LedgerIntegrityError: auditor mode, or the key file does not match the
                ledger's fingerprint.
        """
        self._require_key()
        return keys.input_tag(self._keys.noise_key, content_fingerprint)

    def noise_seeds(self, release_id: str, users: Sequence[str], fingerprints: Sequence[str],
                    parameters: dict[str, Any]) -> dict[str, int]:
        """256-bit noise seeds of `users` (HMAC-SHA256 of the key, `keys.noise_seed`).

        Each seed covers (release id, user id, the user's data fingerprint, the
        release's parameter digest).

        The same release, user, data fingerprint and parameters always give the same
        seed, so a rerun reproduces its noise instead of drawing (and leaking) a fresh
        sample; other data or other parameters never get the same noise.

        Args:
            release_id: the release.
            users: user ids.
            fingerprints: each user's own data fingerprint (aligned with `users`): for
                a release of whole inputs the user's fingerprint from ingestion; for an
                incremental stream release the keyed fingerprint(s) of the ranges it
                charges (as recorded in the chain), so that a later release can redraw
                an earlier range with exactly the seed it was drawn with.
            parameters: the release's parameters (as passed to `reserve`).

        Raises:
            LedgerIntegrityError: the key file does not match the ledger's fingerprint.
        """
        self._require_key()
        check_id(release_id, "release_id")
        digest = parameters_digest(parameters)
        out = {}
        for user_id, fp in zip(users, fingerprints, strict=True):
            check_id(user_id, "user_id")
            out[user_id] = keys.noise_seed(self._keys.noise_key, release_id, user_id, fp, digest)
        return out

    def recheck_keys(self, release_id: str, chunks: Sequence[int]) -> list[str]:
        """The keys (hex) choosing the re-executed users of each of a release's `chunks`.

        `keys.recheck_sample_key`: one-way keys derived from the noise key for this
        release and chunk only, so a flow whose ledger is served (it has no noise
        key) checks its remote workers on the same secret sample as an embedded one.
        The service gives them only to the release's owner.

        Raises:
            LedgerIntegrityError: the key file does not match the ledger's fingerprint.
        """
        self._require_key()
        check_id(release_id, "release_id")
        return [keys.recheck_sample_key(self._keys.noise_key, release_id, int(c)).hex()
                for c in chunks]

    def stream_ranges(self, domain: str, keys_: Iterable[tuple[str, str]]
                      ) -> dict[tuple[str, str], list[watermark.StreamRange]]:
        """The active released ranges of each (user_id, stream_id) of `domain`, in entry order.

        The largest last step is the stream's watermark (`ledger.watermark`).
        """
        check_id(domain, "domain")
        wanted = list(keys_)
        for u, s in wanted:
            check_id(u, "user_id")
            check_id(s, "stream_id", allow_empty=True)
        return self._transact(lambda con: watermark.load_ranges(con, domain, wanted))

    def range_fingerprint(self, user_id: str, domain: str, stream_id: str, steps: Any,
                          values: Any) -> str:
        """Keyed fingerprint (HMAC-SHA256, noise key) of one stream's (step, value) pairs.

        Raises:
            LedgerIntegrityError: the key file does not match the ledger's fingerprint.
        """
        self._require_key()
        return watermark.range_fingerprint(self._keys.noise_key, user_id, domain, stream_id,
                                           np.asarray(steps), np.asarray(values))

    def range_fingerprints(self, domain: str, user_ids: Sequence[str], stream_ids: Sequence[str],
                           steps: Any, values: Any, offsets: Sequence[int]) -> list[str]:
        """`range_fingerprint` of many ranges at once (one call for a chunk's stream plans).

        Range k is rows offsets[k]:offsets[k + 1] of `steps` and `values`, of
        stream `stream_ids[k]` of user `user_ids[k]`.

        Raises:
            ParameterError: the arguments do not describe one range per user.
            LedgerIntegrityError: the key file does not match the ledger's fingerprint.
        """
        check_id(domain, "domain")
        self._require_key()
        return watermark.range_fingerprints(self._keys.noise_key, domain, list(user_ids),
                                            list(stream_ids), np.asarray(steps),
                                            np.asarray(values), list(offsets))

    # ------------------------------------------------------------------ queries

    def balances(self, domain: str | None = None, *, where: Filter | None = None
                 ) -> list[dict[str, Any]]:
        """Per account: user_id, domain, stream_id, notion, cap, spent, remaining, unit, units.

        cap, spent and remaining are exact Fractions in the cap's ``unit``; for
        w-event accounts ``spent`` is the largest window sum of the history.
        `where` narrows the accounts (`queries.balances`; ``until`` gives the
        balances as they stood then).
        """
        if domain is not None:
            check_id(domain, "domain", allow_empty=True)
        flt = where or Filter()
        if domain is not None:
            flt = replace(flt, domain=domain)
        return self._read(lambda con: queries.balances(con, flt))

    def near_cap_users(self, release_id: str, domain: str) -> int:
        """Users charged by the release whose account of `domain` is now near its cap (>= 90%)."""
        return self._read(lambda con: queries.near_cap_users(con, release_id, domain))

    def history(self, user_id: str | None = None, domain: str | None = None, *,
                where: Filter | None = None) -> list[dict[str, Any]]:
        """Account entries in seq order (of one user, or as `where` selects), exact amounts.

        For w-event entries ``amount`` is the charge per window (`queries.history`).
        """
        if user_id is not None:
            check_id(user_id, "user_id", allow_empty=True)
        if domain is not None:
            check_id(domain, "domain", allow_empty=True)
        flt = where or Filter()
        flt = replace(flt, user=user_id if user_id is not None else flt.user,
                      domain=domain if domain is not None else flt.domain)
        return self._read(lambda con: queries.history(con, flt))

    def releases(self, where: Filter | None = None) -> list[dict[str, Any]]:
        """One row per release and domain: state, users, spent per account and cap, with unit."""
        return self._read(lambda con: queries.releases(con, where))

    def denials(self, where: Filter | None = None) -> list[dict[str, Any]]:
        """Every denial (`where` narrows them): who, when, requested, spent, cap, unit, reason."""
        return self._read(lambda con: queries.denials(con, where))

    def charge_summary(self, release_id: str) -> summaries.Spread | None:
        """The spread of one release's net charge per user, exact (`summaries.user_charges`)."""
        check_id(release_id, "release_id", allow_empty=True)
        return self._read(lambda con: summaries.user_charges(con, release_id))

    def window_charge_summary(self, release_id: str) -> tuple[summaries.Spread | None, bool]:
        """A w-event release's per-user window charges, spread (`summaries.window_charges`)."""
        check_id(release_id, "release_id", allow_empty=True)
        return self._read(lambda con: summaries.window_charges(con, release_id))

    def balance_summary(self, domain: str) -> summaries.DomainBudget | None:
        """The spread of a domain's balances, exact (`summaries.balance_summary`)."""
        check_id(domain, "domain", allow_empty=True)
        return self._read(lambda con: summaries.balance_summary(con, domain))

    def release_charges(self, release_id: str) -> list[dict[str, Any]]:
        """What one release charged each account, net of refunds (`queries.release_charges`)."""
        check_id(release_id, "release_id", allow_empty=True)
        return self._read(lambda con: queries.release_charges(con, release_id))

    def export(self, path: str | os.PathLike[str], fmt: str = "csv", what: str = "entries") -> int:
        """Write a table for auditors to `path` as csv, parquet or json; returns the row count.

        Exact amounts are exported as integer quanta in text columns (``*_quanta``)
        next to readable DOUBLE columns (``releases``: ``*_exact`` fractions,
        per account in the cap's unit). The noise key is never exported.
        Parquet is plain Parquet 1.0 types with data pages v1
        (`queries.PARQUET_OPTIONS`), which any DuckDB, pandas or Spark reads.

        Args:
            path: output file (``what="all"``: a directory, created if missing,
                holding ``<table>.<fmt>`` for every table, read in one snapshot).
            fmt: ``csv``, ``parquet`` or ``json`` (a JSON array of objects).
            what: ``entries`` (the full audit log with step runs), ``balances``,
                ``releases``, ``denials``, or ``all``.
        """
        queries.check_export(fmt, what)
        return queries.write_export(self.export_tables(what), path, fmt, what)

    def export_tables(self, what: str) -> dict[str, pa.Table]:
        """The export tables `export` writes (``all``: every table, read in one snapshot).

        Raises:
            ParameterError: an unknown table.
        """
        queries.check_export("csv", what)
        names = list(queries.EXPORTS) if what == "all" else [what]
        return self._read(lambda con: {name: queries.export_table(con, name) for name in names})

    # ------------------------------------------------------------------ verify

    def verify(self, expect: Sequence[tuple[str, SignedHead | heads.PlainHead]] = ()
               ) -> VerifyReport:
        """Recompute the hash chain, every balance, the seal, the signature and every MAC.

        Args:
            expect: signed heads kept earlier (`heads.load_checkpoint`,
                `heads.manifest_heads`), each with where it came from: a ledger
                rolled back, truncated or re-keyed since does not verify.

        Returns:
            A report; ``ok`` is False and ``first_bad_seq``/``first_bad_entry_id``
            name the first bad entry when anything does not verify. In auditor
            mode ``not_checked`` lists what needs the noise key.
        """
        if not self.auditor and not self._key_ok:
            return VerifyReport(False, 0, None, (
                f"ledger integrity check failed: the noise key {str(self.key_path)!r} or the "
                "signing key does not match the fingerprints stored in the ledger (replaced "
                "or edited key)"))
        # it compares the database with the head counter file, which a write advances after
        # its commit: no write may commit meanwhile (`storage.Store.transact`)
        return self._store.transact(lambda con: verify_tx(con, self._keys, expect),
                                    write=False, exclusive=True)

    def verify_or_raise(self, expect: Sequence[tuple[str, SignedHead | heads.PlainHead]] = ()
                        ) -> VerifyReport:
        """Like `verify`, but raise `LedgerIntegrityError` (exit 4) when it fails."""
        rep = self.verify(expect)
        if not rep.ok:
            raise LedgerIntegrityError(rep.message, seq=rep.first_bad_seq,
                                       entry_id=rep.first_bad_entry_id)
        return rep
