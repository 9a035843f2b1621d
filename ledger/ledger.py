"""The privacy ledger: reserve, settle and close privacy budget on a DuckDB file.

A `Ledger` is a path to a DuckDB file plus its noise key (``<path>.key``). Every
operation opens a connection, runs one short transaction and closes the
connection again, so several processes can share one ledger file.

Guarantees (see also ``ledger/README.md``):

* **No overspend.** `reserve` admits a user only if, after all of that user's
  requests in the call, every cap still holds (GP/CGP totals, every w-event
  window, history of earlier releases included). All checks and all writes of a
  call are one DuckDB transaction: admitted or denied, nothing is half-written,
  also under SIGKILL (DuckDB commits through its write-ahead log).
* **Serialised writers.** DuckDB lets one process open a file for writing at a
  time; a second process gets ``IOException: Could not set lock``. Threads of
  one process share one database instance; every writing transaction updates
  the single ``chain_head`` row, so two concurrent transactions of one process
  conflict (``TransactionException``) instead of both committing, and threads of
  one process additionally queue on a per-file lock. Either way the loser rolls
  back and retries with jittered exponential backoff (5 ms doubling to 250 ms)
  until `lock_timeout` seconds (default 60) have passed, then raises
  `LedgerBusyError`. A retried transaction re-reads every balance, so a waiting
  writer sees what the winner committed: no lost entry, no double spend.
* **Idempotency.** Decisions are keyed by (release_id, user_id, step,
  stream_id). A replay returns the recorded decision and writes nothing; a
  replay with a different request is refused (`ReplayConflictError`). `settle`
  and `close` are idempotent the same way.
* **Audit.** Entries are append-only and hash-chained (`ledger.chain`);
  `verify` recomputes the chain, the keyed seal over its head, the noise-key
  fingerprint and every balance, and names the first bad entry. It checks
  set-based in DuckDB first and replays entry by entry only to name a problem.
* **Speed.** Per entry only the SHA-256 link (and the admission arithmetic) runs in
  Python; canonical bytes, lookups and inserts are column-wise (Arrow, DuckDB).
* **Init.** `Ledger.init` serialises check-and-create with a directory ``flock``,
  so concurrent inits of a new path create one ledger and key and all open it.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from json.encoder import encode_basestring as _estr  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from ledger import accounting, keys, schema
from ledger.accounting import Run
from ledger.amounts import (
    UNITS_PER_EPSILON,
    cap_units,
    charge_units,
    format_units,
    from_units,
)
from ledger.chain import (
    GENESIS_HASH,
    HASHED_COLUMNS,
    canonical,
    chain_hashes,
    encode_batch,
    entry_hash,
    format_ts,
    runs_text,
)
from ledger.errors import (
    BudgetExceededError,
    LedgerBusyError,
    LedgerIntegrityError,
    LedgerInternalError,
    LedgerOpenError,
    NotionMismatchError,
    PolicyChangeError,
    ReplayConflictError,
)
from ledger.paths import check_existing_ledger, check_new_ledger_path
from ledger.schema import first_row
from mechanisms.cost import Cost, StepRun, WEventCost, exact
from schemas.errors import ParameterError
from schemas.policy import Policy

T = TypeVar("T")

RELEASE_STATES = ("reserved", "settled", "closed", "failed")
_MAX_ID_CHARS = 65536
_Key = tuple[str, str, str]
_SIGN = {"reserve": 1, "refund": -1, "close": -1}


def default_ledger_path() -> Path:
    """The default ledger: ``$PRIVPIPE_HOME/ledger.duckdb``, else ``./.privpipe/ledger.duckdb``."""
    home = os.environ.get("PRIVPIPE_HOME")
    base = Path(home) if home else Path.cwd() / ".privpipe"
    return base / "ledger.duckdb"


def default_actor() -> str:
    """``user@host`` of the current process (recorded on every entry)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Request:
    """One budget request of a release for one user.

    Attributes:
        user_id: the user whose budget is charged.
        domain: the policy domain (its notion and cap apply).
        step: name of the mechanism step (idempotency key part), e.g. ``"release"``.
        notion: the mechanism's guarantee: ``gp`` (amount is ε), ``cgp`` (ρ) or
            ``wevent`` (use `runs`).
        amount: ε or ρ for gp/cgp requests (Fraction, int, float or string).
        stream_id: the stream of a w-event request (``""`` for curves).
        runs: w-event per-step costs at absolute time steps of the stream.
    """

    user_id: str
    domain: str
    step: str = "release"
    notion: str = "gp"
    amount: Fraction | None = None
    stream_id: str = ""
    runs: tuple[StepRun, ...] = ()


@dataclass(frozen=True)
class Decision:
    """The ledger's answer to one request.

    ``requested`` is the request's cost in the domain's own notion (ε²/2 for an
    ε-GP request on a CGP domain; for w-event the request's sum in its worst
    window). ``remaining`` is the headroom *after* the charge when admitted and
    *before* it when denied (for w-event: in that worst window), so a denial
    shows ``requested - remaining > 0``.
    """

    user_id: str
    domain: str
    step: str
    stream_id: str
    admitted: bool
    reason: str
    requested: Fraction
    remaining: Fraction
    entry_seq: int
    replayed: bool = False
    notion: str = ""
    units: str = ""

    def raise_if_denied(self, release_id: str | None = None) -> None:
        """Raise `BudgetExceededError` (exit 3) when this decision is a denial."""
        if not self.admitted:
            raise BudgetExceededError(
                user_id=self.user_id, domain=self.domain, requested=self.requested,
                remaining=self.remaining, units=self.units, release_id=release_id,
                reason=self.reason,
            )


@dataclass(frozen=True)
class ReserveResult:
    """Decisions of one `Ledger.reserve` call, in request order within each list."""

    admitted: list[Decision] = field(default_factory=list)
    denied: list[Decision] = field(default_factory=list)

    @property
    def admitted_users(self) -> set[str]:
        """Users whose requests were all admitted."""
        return {d.user_id for d in self.admitted}


@dataclass(frozen=True)
class Settlement:
    """The actual cost of an admitted request, reported after the mechanism ran.

    ``cost`` is a `mechanisms.cost.Cost` (gp/cgp, with its sub-step breakdown) or
    a `WEventCost` whose runs use the same absolute steps as the reservation.
    """

    user_id: str
    domain: str
    step: str
    cost: Cost | WEventCost
    stream_id: str = ""


@dataclass(frozen=True)
class VerifyReport:
    """Result of `Ledger.verify`."""

    ok: bool
    entries_checked: int
    first_bad_seq: int | None
    message: str
    first_bad_entry_id: str | None = None


@dataclass
class _Prepared:
    index: int
    req: Request
    key: tuple[str, str, str]  # (user_id, step, stream_id)
    account: tuple[str, str, str]  # (user_id, domain, stream_id)
    notion: str = ""  # the account's notion
    units: int = 0  # gp/cgp charge in quanta; w-event: total over steps
    runs: list[Run] = field(default_factory=list)
    signature: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Columns:
    """The requests of one reserve call as columns."""

    users: list[str]
    domains: list[str]
    steps: list[str]
    streams: list[str]
    notions: list[str]
    amounts: list[Any]
    runs: list[tuple[StepRun, ...]]


@dataclass
class _AccountWrites:
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


@dataclass
class _Account:
    cap: int
    spent: int
    notion: str
    w: int | None
    runs: list[Run] = field(default_factory=list)
    exists: bool = True
    dirty: bool = False


# --------------------------------------------------------------------------- helpers

_process_locks: dict[str, threading.RLock] = {}
_process_locks_guard = threading.Lock()


def _process_lock(path: Path) -> threading.RLock:
    k = str(path.resolve())
    with _process_locks_guard:
        lock = _process_locks.get(k)
        if lock is None:
            lock = _process_locks[k] = threading.RLock()
        return lock


@contextlib.contextmanager
def _init_lock(directory: Path, deadline: float) -> Iterator[None]:
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
                now = time.monotonic()
                if now >= deadline:
                    raise LedgerBusyError(
                        f"gave up waiting for another process creating a ledger in "
                        f"{str(directory)!r}") from None
                delay = min(0.25, 0.005 * 2 ** min(attempt, 6))
                time.sleep(min(random.uniform(0, delay) + 0.001, max(0.0, deadline - now)))
                attempt += 1
        yield
    finally:
        os.close(fd)  # releases the lock


def _check_id(value: Any, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ParameterError(f"{what} must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise ParameterError(f"{what} must not be empty")
    if len(value) > _MAX_ID_CHARS:
        raise ParameterError(f"{what} is longer than {_MAX_ID_CHARS} characters")
    if "\x00" in value:
        raise ParameterError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ParameterError(f"{what} is not valid Unicode text (lone surrogate)") from None
    return value


def _ids_ok(values: list[Any], allow_empty: bool = False) -> bool:
    """True if every value would pass `_check_id` (an all-at-once pre-check)."""
    try:
        joined = "".join(values)  # TypeError unless every value is a str
    except TypeError:
        return False
    if "\x00" in joined:
        return False
    try:
        joined.encode("utf-8")  # lone surrogates
    except UnicodeEncodeError:
        return False
    if not values:
        return True
    lengths = list(map(len, values))
    return max(lengths) <= _MAX_ID_CHARS and (allow_empty or min(lengths) > 0)


def _distinct_ids_ok(values: list[Any], allow_empty: bool = False) -> bool:
    """`_ids_ok` for a column with few distinct values (domains, steps, streams)."""
    try:
        distinct = list(set(values))
    except TypeError:
        return False
    return _ids_ok(distinct, allow_empty)


def _distinct_ok(values: list[Any], allowed: set[str]) -> bool:
    try:
        return set(values) <= allowed
    except TypeError:
        return False


def _check_unique(
    users: list[str], steps: list[str], streams: list[str], what: str, where: str
) -> None:
    """Refuse two entries of one call for the same (user_id, step, stream_id)."""
    n = len(users)
    if len(set(steps)) <= 1 and len(set(streams)) <= 1:
        if len(set(users)) == n:
            return
    elif len(set(zip(users, steps, streams, strict=True))) == n:
        return
    seen: set[tuple[str, str, str]] = set()
    for k in zip(users, steps, streams, strict=True):
        if k in seen:
            if what == "request":
                raise ParameterError(
                    f"duplicate request for user {k[0]!r}, step {k[1]!r}, stream "
                    f"{k[2]!r} in one {where}"
                )
            raise ParameterError(f"duplicate settlement for user {k[0]!r}, step {k[1]!r}")
        seen.add(k)


def _row_columns(rows: list[dict[str, Any]], shared: dict[str, Any]) -> dict[str, list[Any]]:
    """Entry rows (dicts) as the columns `Ledger._append` takes."""
    return {c: [r.get(c) for r in rows] for c in _ENTRY_COLUMNS
            if c not in shared and c not in ("seq", "entry_id", "prev_hash", "hash")}


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Fraction):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _canonical_json(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                          default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"{what} must be JSON-serialisable: {err}") from None


def _now() -> str:
    return format_ts(datetime.now(UTC).replace(tzinfo=None))


def _is_lock_error(err: Exception) -> bool:
    text = str(err)
    return "Could not set lock" in text or "Conflicting lock" in text


def _units_text(dom: dict[str, Any]) -> str:
    symbol = {"gp": "ε", "cgp": "ρ", "wevent": "ε per window"}[dom["notion"]]
    return f"{symbol} ({dom['units_label']})"


def _arrow(columns: dict[str, list[Any]], hugeint: Iterable[str] = ()) -> pa.Table:
    big = set(hugeint)
    arrays = {}
    for name, values in columns.items():
        if name in big:
            arrays[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)


_ENTRY_COLUMNS = (
    "seq", "entry_id", "prev_hash", "hash", "created_at", "actor", "release_id", "user_id",
    "domain", "step", "stream_id", "kind", "amount", "notion", "cap", "balance_after",
    "mechanism", "parameters", "detail", "reason", "flow_run_id", "input_fingerprint",
)
_ENTRY_HUGE = ("amount", "cap", "balance_after")
_ENTRY_TYPES = {"seq": "BIGINT", "created_at": "TIMESTAMP", "amount": "HUGEINT",
                "cap": "HUGEINT", "balance_after": "HUGEINT"}


def _json_sql(c: str, escape: bool) -> str:
    text = f"CAST(e.{c} AS VARCHAR)"
    if escape:  # as JSON does: backslash and double quote (control characters: in Python)
        text = f"replace(replace({text}, '\\', '\\\\'), '\"', '\\\"')"
    return f"CASE WHEN e.{c} IS NULL THEN 'null' ELSE concat('\"', {text}, '\"') END"


def _verify_sql() -> dict[str, str]:  # noqa: S608 - SQL from constants only, no input
    """The set-based checks of `Ledger._verify_fast` (constant SQL, no input)."""
    numbers = ("seq", "amount", "cap", "balance_after")
    parts = []
    for c in HASHED_COLUMNS:
        if c == "created_at":
            parts.append("concat('\"', strftime(e.created_at, '%Y-%m-%d %H:%M:%S.%f'), '\"')")
        else:
            parts.append(_json_sql(c, escape=c not in numbers))
    canon = ", ',', ".join(parts)  # one concat() per entry: no quadratic copying
    # Control characters can only come from text columns, which `canon` holds verbatim.
    special = ("regexp_matches(canon, '[\\x00-\\x1f]') OR NOT isfinite(created_at) "
               "OR year(created_at) NOT BETWEEN 1000 AND 9999")
    sign = ("CASE e.kind WHEN 'reserve' THEN e.amount WHEN 'refund' THEN -e.amount "
            "WHEN 'close' THEN -e.amount ELSE 0 END")
    return {
        # n, bad seqs, bad prev links, bad hashes, seqs to hash in Python, last hash, bad runs
        "chain": (
            "WITH r AS (SELECT seq, "  # noqa: S608 - constant SQL
            "'[' || string_agg('[\"' || CAST(run_start AS VARCHAR) || "
            "'\",\"' || CAST(run_stop AS VARCHAR) || '\",\"' || CAST(amount AS VARCHAR) || "
            "'\"]', ',' ORDER BY run_start, run_stop, amount) || ']' AS runs FROM step_runs "
            "GROUP BY seq), "
            "t AS (SELECT e.seq, e.hash, e.created_at, "
            "e.prev_hash IS DISTINCT FROM CASE WHEN e.seq = 1 THEN ? ELSE p.hash END AS bad_prev, "
            f"concat('[', {canon}, ',', coalesce(r.runs, '[]'), ']') AS canon, e.prev_hash "
            "FROM entries e LEFT JOIN r ON r.seq = e.seq "
            "LEFT JOIN (SELECT seq + 1 AS seq, hash FROM entries) p ON p.seq = e.seq), "
            f"c AS (SELECT *, ({special}) AS special FROM t) "
            # contiguous 1..n without duplicates <=> count = max = distinct count, min = 1
            "SELECT count(*), NOT (count(*) = 0 OR (min(seq) = 1 AND max(seq) = count(*) "
            "AND count(DISTINCT seq) = count(*))), "
            "count(*) FILTER (WHERE bad_prev), "
            "count(*) FILTER (WHERE NOT special AND "
            "sha256(prev_hash || '|' || canon) IS DISTINCT FROM hash), "
            "list(seq ORDER BY seq) FILTER (WHERE special), arg_max(hash, seq), "
            "(SELECT count(*) FROM step_runs s LEFT JOIN entries e ON e.seq = s.seq "
            "WHERE e.seq IS NULL OR s.kind IS DISTINCT FROM e.kind OR s.user_id IS DISTINCT "
            "FROM e.user_id OR s.domain IS DISTINCT FROM e.domain OR s.stream_id IS DISTINCT "
            "FROM e.stream_id) FROM c"
        ),
        # per-entry checks of `_check_balance`, gp/cgp balances as running sums
        "balances": (
            "WITH e AS ("  # noqa: S608 - constant SQL
            "SELECT e.*, d.notion AS dnotion, r.n_runs FROM entries e "
            "LEFT JOIN domains d ON d.domain = e.domain "
            "LEFT JOIN (SELECT seq, count(*) AS n_runs FROM step_runs GROUP BY seq) r "
            "ON r.seq = e.seq), "
            "g AS (SELECT e.*, sum(" + sign + ") OVER (PARTITION BY e.user_id, e.domain, "
            "e.stream_id ORDER BY e.seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
            "AS after FROM e WHERE e.user_id <> '' AND e.dnotion IS NOT NULL "
            "AND e.dnotion <> 'wevent') "
            "SELECT (SELECT count(*) FROM e WHERE e.kind NOT IN "
            "('reserve', 'settle', 'refund', 'deny', 'close') "
            "OR (e.user_id = '' AND NOT (e.kind = 'close' AND e.amount = 0)) "
            "OR (e.user_id <> '' AND (e.dnotion IS NULL OR e.notion IS DISTINCT FROM e.dnotion "
            "OR e.amount < 0))), "
            "(SELECT count(*) FROM g WHERE g.n_runs IS NOT NULL OR g.after < 0 "
            "OR g.balance_after IS NULL OR g.balance_after <> g.after "
            "OR (g.kind = 'reserve' AND (g.cap IS NULL OR g.after > g.cap)))"
        ),
        # accounts: every key with entries present with the replayed spent (gp/cgp here),
        # no spent without entries, known domain, cap equal to the domain's; then the count
        "accounts": (
            "WITH k AS ("  # noqa: S608 - constant SQL
            "SELECT e.user_id, e.domain, e.stream_id, "
            "sum(" + sign + ") AS final FROM entries e WHERE e.user_id <> '' "
            "GROUP BY ALL) "
            "SELECT (SELECT count(*) FROM k LEFT JOIN accounts a ON a.user_id = k.user_id "
            "AND a.domain = k.domain AND a.stream_id = k.stream_id "
            "LEFT JOIN domains d ON d.domain = k.domain WHERE a.user_id IS NULL "
            "OR (d.notion <> 'wevent' AND a.spent <> k.final)), "
            "(SELECT count(*) FROM accounts a LEFT JOIN k ON a.user_id = k.user_id "
            "AND a.domain = k.domain AND a.stream_id = k.stream_id "
            "LEFT JOIN domains d ON d.domain = a.domain WHERE (k.user_id IS NULL AND "
            "a.spent <> 0) OR d.domain IS NULL OR a.cap <> d.cap), "
            "(SELECT count(*) FROM accounts)"
        ),
    }


_VERIFY_SQL = _verify_sql()


# --------------------------------------------------------------------------- the ledger


class Ledger:
    """An audited privacy-budget ledger stored in one DuckDB file plus a noise key.

    Open an existing ledger with ``Ledger(path)`` or `Ledger.open`; create one
    with `Ledger.init`. The object holds no open connection, so it can be shared
    by threads and kept for the life of a flow.
    """

    _column_wise = True  # the usual cases of reserve/settle column by column (tests compare)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        actor: str | None = None,
        lock_timeout: float = 60.0,
    ):
        """Open an existing ledger.

        Args:
            path: the DuckDB file.
            actor: who is writing (recorded on each entry); default ``user@host``.
            lock_timeout: seconds to keep retrying when another process holds the file.

        Raises:
            LedgerOpenError: the file is missing, unreadable, not a privpipe ledger,
                of a newer schema, or its noise key is missing, malformed or has
                permissions wider than 0600.
        """
        self.path = Path(path)
        self.key_path = keys.key_path_for(self.path)
        self.actor = _check_id(actor, "actor") if actor is not None else default_actor()
        if lock_timeout <= 0:
            raise ParameterError("lock_timeout must be > 0 seconds")
        self.lock_timeout = float(lock_timeout)
        check_existing_ledger(self.path)  # a directory or a CSV is not "a ledger without key"
        self._key = keys.load_key(self.key_path)
        stored_fp = self._transact(self._open_tx)
        self._key_ok = stored_fp == keys.key_fingerprint(self._key)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, actor: str | None = None, lock_timeout: float = 60.0
    ) -> Ledger:
        """Open an existing ledger (same as the constructor)."""
        return cls(path, actor=actor, lock_timeout=lock_timeout)

    @classmethod
    def init(
        cls, path: str | os.PathLike[str], *, actor: str | None = None, lock_timeout: float = 60.0
    ) -> Ledger:
        """Create a ledger and its noise key, or open it if both exist (idempotent).

        Raises:
            LedgerOpenError: only one of the two files exists (a lost key is never
                regenerated; a stray key is never adopted), or a file cannot be created.
        """
        p = check_new_ledger_path(path)
        kp = keys.key_path_for(p)
        if lock_timeout <= 0:
            raise ParameterError("lock_timeout must be > 0 seconds")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LedgerOpenError(
                f"cannot create directory {str(p.parent)!r}: {err.strerror}") from None
        # Creating is check-then-create on two files: serialise it between processes (and
        # threads) with an exclusive lock on the directory, held until the new database is
        # committed and closed, so a concurrent init sees either nothing (and creates) or
        # both files complete (and opens them).
        with _init_lock(p.parent, time.monotonic() + float(lock_timeout)):
            cls._create(p, kp)
        return cls(p, actor=actor, lock_timeout=lock_timeout)

    @staticmethod
    def _create(p: Path, kp: Path) -> None:
        """Create the database and its key unless both exist (caller holds the init lock)."""
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
        key = keys.create_key(kp)
        try:
            con = duckdb.connect(str(p))
        except duckdb.Error as err:
            kp.unlink(missing_ok=True)
            raise LedgerOpenError(f"cannot create the ledger {str(p)!r}: {err}") from None
        try:
            now = _now()
            con.execute("BEGIN TRANSACTION")
            schema.create(con, now)
            con.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [
                    ["ledger_id", os.urandom(16).hex()],
                    ["units_per_epsilon", str(UNITS_PER_EPSILON)],
                    ["key_fingerprint", keys.key_fingerprint(key)],
                    ["created_at", now],
                ],
            )
            con.execute(
                "INSERT INTO chain_head VALUES (1, 0, ?, ?)",
                [GENESIS_HASH, keys.chain_seal(key, 0, GENESIS_HASH)],
            )
            con.execute("COMMIT")
        except BaseException:
            con.close()
            p.unlink(missing_ok=True)
            Path(str(p) + ".wal").unlink(missing_ok=True)
            kp.unlink(missing_ok=True)
            raise
        con.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # ------------------------------------------------------------------ plumbing

    def _connect(self, deadline: float, attempt: int) -> duckdb.DuckDBPyConnection:
        while True:
            try:
                return duckdb.connect(str(self.path))
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
        now = time.monotonic()
        if now >= deadline:
            raise LedgerBusyError(
                f"gave up after {self.lock_timeout:g} s: {why} ({str(self.path)!r}); "
                "retry when the other release has finished"
            )
        delay = min(0.25, 0.005 * 2**min(attempt, 6))
        time.sleep(min(random.uniform(0, delay) + 0.001, max(0.0, deadline - now)))
        return attempt + 1

    def _transact(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run `fn(con)` in one transaction, retrying on file locks and conflicts."""
        deadline = time.monotonic() + self.lock_timeout
        attempt = 0
        with _process_lock(self.path):
            while True:
                con = self._connect(deadline, attempt)
                try:
                    con.execute("BEGIN TRANSACTION")
                    result = fn(con)
                    con.execute("COMMIT")
                    return result
                except duckdb.TransactionException:
                    _rollback(con)
                    attempt = self._backoff(deadline, attempt, "conflicting ledger transactions")
                except (duckdb.IOException, duckdb.SerializationException) as err:
                    _rollback(con)
                    raise LedgerOpenError(
                        f"cannot read the ledger {str(self.path)!r}: "
                        f"{str(err).splitlines()[0]} (truncated or corrupted file? restore it "
                        "from backup)"
                    ) from None
                except BaseException:
                    _rollback(con)
                    raise
                finally:
                    con.close()

    def _open_tx(self, con: duckdb.DuckDBPyConnection) -> str:
        try:
            version = schema.stored_version(con)
        except duckdb.Error as err:
            raise LedgerOpenError(f"cannot read {str(self.path)!r}: {err}") from None
        if version is None:
            raise LedgerOpenError(
                f"{str(self.path)!r} is a DuckDB file but not a privpipe ledger "
                "(no privpipe-ledger schema_version)"
            )
        if version > schema.SCHEMA_VERSION:
            raise LedgerOpenError(
                f"the ledger {str(self.path)!r} has schema version {version}, newer than this "
                f"privpipe supports ({schema.SCHEMA_VERSION}); upgrade privpipe"
            )
        if version < schema.SCHEMA_VERSION:
            try:
                schema.migrate(con, version, _now(), self._key)
            except LookupError as err:
                raise LedgerOpenError(f"cannot upgrade {str(self.path)!r}: {err}") from None
        row = first_row(con.execute("SELECT value FROM meta WHERE key = 'key_fingerprint'"))
        units = first_row(con.execute("SELECT value FROM meta WHERE key = 'units_per_epsilon'"))
        if not row or not units:
            raise LedgerOpenError(f"the ledger {str(self.path)!r} lacks its metadata")
        if int(units[0]) != UNITS_PER_EPSILON:
            raise LedgerOpenError(
                f"the ledger {str(self.path)!r} uses a different amount quantum; "
                "it was written by an incompatible privpipe"
            )
        return str(row[0])

    def _require_key(self) -> None:
        if not self._key_ok:
            raise LedgerIntegrityError(
                f"the noise key {str(self.key_path)!r} does not match the fingerprint stored in "
                "the ledger (replaced or edited key); restore the original key"
            )

    def _head(self, con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
        row = first_row(con.execute("SELECT last_seq, last_hash FROM chain_head WHERE id = 1"))
        if row is None:
            raise LedgerIntegrityError("the ledger's chain_head row is missing")
        return int(row[0]), str(row[1])

    def _domains(self, con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
        rows = con.execute(
            "SELECT domain, kind, notion, cap, cap_exact, w, time_unit, value_unit, units_label "
            "FROM domains"
        ).fetchall()
        names = ("domain", "kind", "notion", "cap", "cap_exact", "w", "time_unit", "value_unit",
                 "units_label")
        return {r[0]: dict(zip(names, r, strict=True)) for r in rows}

    def _check_domain_macs(self, con: duckdb.DuckDBPyConnection, names: set[str]) -> None:
        """Refuse to charge against a domain row (cap, notion, w) edited outside privpipe."""
        cols = ", ".join(schema.DOMAIN_MAC_COLUMNS)
        for *row, mac in con.execute(f"SELECT {cols}, mac FROM domains").fetchall():  # noqa: S608
            if row[0] in names and mac != schema.domain_mac(self._key, tuple(row)):
                raise LedgerIntegrityError(
                    f"domain {row[0]!r} was changed outside privpipe (its keyed MAC does not "
                    "match); nothing was charged. Run `privpipe ledger verify` and restore the "
                    "ledger from backup."
                )

    def _append(
        self,
        con: duckdb.DuckDBPyConnection,
        cols: dict[str, list[Any]],
        runs: list[list[Run]] | None,
        shared: dict[str, Any],
        texts: dict[str, list[str]] | None = None,
    ) -> range:
        """Hash-chain and bulk-insert entries; returns their seqs. Updates chain_head.

        `cols` holds the varying columns as lists of n Python values (a column whose
        values are all equal is moved to `shared`), `shared` the columns with one
        value for every entry, `runs` each entry's w-event step runs (None: none),
        `texts` the canonical JSON text of some columns of `cols` if the caller has it.
        The canonical bytes are built column by column (`chain.encode_batch`); only
        the SHA-256 link is computed per entry.
        """
        n = len(next(iter(cols.values()))) if cols else 0
        if n == 0:
            return range(0)
        shared = dict(shared)
        cols = dict(cols)
        for c, values in list(cols.items()):
            if values.count(values[0]) == n:  # one value for all: encoded and bound once
                shared[c] = values[0]
                del cols[c]
        pre = {c: pa.array(t, pa.string()) for c, t in (texts or {}).items() if c in cols}
        last_seq, last_hash = self._head(con)
        seqs = range(last_seq + 1, last_seq + 1 + n)
        ids = os.urandom(16 * n).hex()
        arrays: dict[str, pa.Array] = {
            "seq": pa.array(seqs, pa.int64()),
            "entry_id": pa.array([ids[i: i + 32] for i in range(0, 32 * n, 32)], pa.string()),
        }
        for c, values in cols.items():
            if c in _ENTRY_HUGE:
                memo = {v: None if v is None else str(int(v)) for v in set(values)}
                arrays[c] = pa.array(list(map(memo.__getitem__, values)), pa.string())
            else:
                arrays[c] = pa.array(values, pa.string())
        with_runs = runs is not None and any(runs)
        runs_texts = pa.array([runs_text(r) for r in runs], pa.string()) if with_runs else None
        hashes = chain_hashes(last_hash, encode_batch(arrays, shared, runs_texts, pre))
        arrays["prev_hash"] = pa.array([last_hash, *hashes[:-1]], pa.string())
        arrays["hash"] = pa.array(hashes, pa.string())
        tbl = pa.table(arrays)  # noqa: F841 - scanned by DuckDB below
        exprs, params = [], []
        for c in _ENTRY_COLUMNS:  # shared columns are bound once as parameters
            typ = _ENTRY_TYPES.get(c)
            if c in shared:
                value = shared[c]
                exprs.append(f"CAST(? AS {typ or 'VARCHAR'})")
                params.append(None if value is None else str(value) if typ != "BIGINT" else value)
            elif typ:
                exprs.append(f"CAST({c} AS {typ})")
            else:
                exprs.append(c)
        select = ", ".join(exprs)
        con.register("_pp_new_entries", tbl)
        try:
            con.execute(f"INSERT INTO entries SELECT {select} "  # noqa: S608
                        "FROM _pp_new_entries", params)
        finally:
            con.unregister("_pp_new_entries")
        if with_runs:
            self._append_runs(con, seqs, cols, shared, runs or [])
        new_seq = last_seq + n
        prev = hashes[-1]
        con.execute(
            "UPDATE chain_head SET last_seq = ?, last_hash = ?, seal = ? WHERE id = 1",
            [new_seq, prev, keys.chain_seal(self._key, new_seq, prev)],
        )
        return seqs

    @staticmethod
    def _append_runs(
        con: duckdb.DuckDBPyConnection,
        seqs: range,
        cols: dict[str, list[Any]],
        shared: dict[str, Any],
        runs: list[list[Run]],
    ) -> None:
        names = ("kind", "user_id", "domain", "stream_id")
        run_cols: dict[str, list[Any]] = {
            c: [] for c in ("seq", *names, "run_start", "run_stop", "amount")
        }
        for i, rr in enumerate(runs):
            for a, b, q in rr:
                run_cols["seq"].append(seqs[i])
                for c in names:
                    run_cols[c].append(shared[c] if c in shared else cols[c][i])
                run_cols["run_start"].append(a)
                run_cols["run_stop"].append(b)
                run_cols["amount"].append(q)
        rtbl = _arrow(run_cols, ("amount",))  # noqa: F841 - scanned by DuckDB below
        con.register("_pp_new_runs", rtbl)
        try:
            con.execute(
                "INSERT INTO step_runs SELECT seq, kind, user_id, domain, stream_id, "
                "run_start, run_stop, CAST(amount AS HUGEINT) FROM _pp_new_runs"
            )
        finally:
            con.unregister("_pp_new_runs")

    def _load_accounts(
        self,
        con: duckdb.DuckDBPyConnection,
        wanted: Iterable[tuple[str, str, str]],
        domains: dict[str, dict[str, Any]],
    ) -> dict[tuple[str, str, str], _Account]:
        wanted = list(dict.fromkeys(wanted))
        out: dict[tuple[str, str, str], _Account] = {}
        if not wanted:
            return out
        keys_tbl = pa.table({  # noqa: F841 - scanned by DuckDB below
            "user_id": [k[0] for k in wanted],
            "domain": [k[1] for k in wanted],
            "stream_id": [k[2] for k in wanted],
        })
        con.register("_pp_keys", keys_tbl)
        try:
            rows = con.execute(
                "SELECT a.user_id, a.domain, a.stream_id, a.cap, a.spent FROM accounts a "
                "JOIN _pp_keys k ON a.user_id = k.user_id AND a.domain = k.domain "
                "AND a.stream_id = k.stream_id"
            ).fetchall()
            has_wevent = any(domains[k[1]]["notion"] == "wevent" for k in wanted)
            run_rows = []
            if has_wevent:
                run_rows = con.execute(
                    "SELECT r.user_id, r.domain, r.stream_id, r.kind, r.run_start, r.run_stop, "
                    "r.amount FROM step_runs r JOIN _pp_keys k ON r.user_id = k.user_id "
                    "AND r.domain = k.domain AND r.stream_id = k.stream_id "
                    "WHERE r.kind IN ('reserve', 'refund', 'close')"
                ).fetchall()
        finally:
            con.unregister("_pp_keys")
        for u, d, s, _cap, spent in rows:
            dom = domains[d]
            # Admission uses the domain's (MAC-checked) cap; accounts.cap mirrors it for views.
            out[(u, d, s)] = _Account(int(dom["cap"]), int(spent), dom["notion"], dom["w"])
        for k in wanted:
            if k not in out:
                dom = domains[k[1]]
                out[k] = _Account(int(dom["cap"]), 0, dom["notion"], dom["w"], exists=False)
        for u, d, s, kind, a, b, q in run_rows:
            out[(u, d, s)].runs.append((int(a), int(b), _SIGN[kind] * int(q)))
        for acc in out.values():
            if acc.runs:
                acc.runs = accounting.profile(acc.runs)
        return out

    def _account_spent(
        self, con: duckdb.DuckDBPyConnection, users: list[str], domains: list[str],
        streams: list[str],
    ) -> list[int | None]:
        """Stored spent (quanta) of each (user, domain, stream), None for a new account."""
        keys_tbl = pa.table({  # noqa: F841 - scanned by DuckDB below
            "i": pa.array(range(len(users)), pa.int64()),
            "user_id": pa.array(users, pa.string()),
            "domain": pa.array(domains, pa.string()),
            "stream_id": pa.array(streams, pa.string()),
        })
        con.register("_pp_keys", keys_tbl)
        try:
            found = con.sql(
                "SELECT k.i, CAST(a.spent AS VARCHAR) AS spent FROM _pp_keys k JOIN accounts a "
                "ON a.user_id = k.user_id AND a.domain = k.domain AND a.stream_id = k.stream_id"
            ).to_arrow_table()
        finally:
            con.unregister("_pp_keys")
        out: list[int | None] = [None] * len(users)
        texts = found.column("spent").to_pylist()
        memo = {t: int(t) for t in set(texts)}
        for i, t in zip(found.column("i").to_pylist(), texts, strict=True):
            out[i] = memo[t]
        return out

    def _save_accounts(self, con: duckdb.DuckDBPyConnection, accounts: _AccountWrites) -> None:
        """Insert or update accounts (one bulk upsert)."""
        if not accounts.users:
            return
        memo = {v: str(v) for v in {*accounts.caps, *accounts.spents}}
        tbl = pa.table({  # noqa: F841 - scanned by DuckDB below
            "user_id": pa.array(accounts.users, pa.string()),
            "domain": pa.array(accounts.domains, pa.string()),
            "stream_id": pa.array(accounts.streams, pa.string()),
            "cap": pa.array(list(map(memo.__getitem__, accounts.caps)), pa.string()),
            "spent": pa.array(list(map(memo.__getitem__, accounts.spents)), pa.string()),
        })
        con.register("_pp_acc", tbl)
        try:
            con.execute(
                "INSERT INTO accounts SELECT user_id, domain, stream_id, CAST(cap AS HUGEINT), "
                "CAST(spent AS HUGEINT) FROM _pp_acc ON CONFLICT (user_id, domain, stream_id) "
                "DO UPDATE SET spent = excluded.spent"
            )
        finally:
            con.unregister("_pp_acc")

    @staticmethod
    def _writes(accounts: dict[tuple[str, str, str], _Account]) -> _AccountWrites:
        """The changed or new accounts of `accounts`."""
        out = _AccountWrites()
        for (u, d, s), acc in accounts.items():
            if acc.dirty or not acc.exists:
                out.add(u, d, s, acc.cap, acc.spent)
        return out

    def _touch_release(
        self, con: duckdb.DuckDBPyConnection, release_id: str, now: str
    ) -> str | None:
        row = first_row(
            con.execute("SELECT state FROM releases WHERE release_id = ?", [release_id]))
        if row is None:
            con.execute(
                "INSERT INTO releases VALUES (?, 'reserved', NULL, CAST(? AS TIMESTAMP), "
                "CAST(? AS TIMESTAMP), NULL)",
                [release_id, now, now],
            )
            schema.seal_release(con, self._key, release_id)
            return None
        return str(row[0])

    # ------------------------------------------------------------------ policy

    def apply_policy(self, policy: Policy) -> list[str]:
        """Create or update the ledger's domains from a validated policy (idempotent).

        Cap changes are allowed (they apply to future requests; accounts take the
        new cap). Changing a domain's notion, window w, kind or units once it has
        entries is refused: it would change the meaning of budget already spent.
        Domains absent from the policy are kept (their history stays auditable).

        Returns:
            One line per change (empty when the ledger already matches the policy).

        Raises:
            PolicyChangeError: a charged domain's notion, w, kind or units would change.
        """
        self._require_key()

        def tx(con: duckdb.DuckDBPyConnection) -> list[str]:
            now = _now()
            current = self._domains(con)
            changes: list[str] = []
            for name, d in sorted(policy.domains.items()):
                _check_id(name, "domain name")
                cap_q = cap_units(d.cap)
                units_label = d.units_label()
                new = {"kind": d.kind, "notion": d.notion, "w": d.w, "time_unit": d.time_unit,
                       "value_unit": d.value_unit}
                old = current.get(name)
                symbol = {"gp": "ε", "cgp": "ρ", "wevent": "ε per window"}[d.notion]
                if old is None:
                    con.execute(
                        "INSERT INTO domains VALUES (?, ?, ?, CAST(? AS HUGEINT), ?, ?, ?, ?, ?, "
                        "CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP), NULL)",
                        [name, d.kind, d.notion, str(cap_q), str(d.cap), d.w, d.time_unit,
                         d.value_unit, units_label, now, now],
                    )
                    changes.append(
                        f"added domain {name!r}: {d.notion}, cap {format_units(cap_q)} {symbol} "
                        f"({units_label})"
                    )
                    schema.seal_domain(con, self._key, name)
                    continue
                diffs = [k for k, v in new.items() if old[k] != v]
                if diffs:
                    used = first_row(con.execute(
                        "SELECT count(*) FROM entries WHERE domain = ?", [name]
                    ))
                    if used and used[0]:
                        raise PolicyChangeError(
                            f"policy {policy.source!r} changes {', '.join(diffs)} of domain "
                            f"{name!r}, which already has {used[0]} ledger entries; the meaning of "
                            "its spent budget would change. Define a new domain instead."
                        )
                    con.execute(
                        "UPDATE domains SET kind = ?, notion = ?, w = ?, time_unit = ?, "
                        "value_unit = ?, units_label = ?, updated_at = CAST(? AS TIMESTAMP) "
                        "WHERE domain = ?",
                        [d.kind, d.notion, d.w, d.time_unit, d.value_unit, units_label, now, name],
                    )
                    changes.append(f"domain {name!r}: changed {', '.join(diffs)} (no charges yet)")
                if int(old["cap"]) != cap_q or old["cap_exact"] != str(d.cap):
                    con.execute(
                        "UPDATE domains SET cap = CAST(? AS HUGEINT), cap_exact = ?, "
                        "updated_at = CAST(? AS TIMESTAMP) WHERE domain = ?",
                        [str(cap_q), str(d.cap), now, name],
                    )
                    con.execute(
                        "UPDATE accounts SET cap = CAST(? AS HUGEINT) WHERE domain = ?",
                        [str(cap_q), name],
                    )
                    changes.append(
                        f"domain {name!r}: cap {format_units(int(old['cap']))} -> "
                        f"{format_units(cap_q)} {symbol}"
                    )
                elif old["units_label"] != units_label and not diffs:
                    con.execute(
                        "UPDATE domains SET units_label = ? WHERE domain = ?", [units_label, name]
                    )
                schema.seal_domain(con, self._key, name)
            return changes

        return self._transact(tx)

    def domains(self) -> list[dict[str, Any]]:
        """The ledger's domains: name, kind, notion, cap (exact Fraction), w and units."""
        def tx(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
            return [
                {**d, "cap": from_units(int(d["cap"]))}
                for _, d in sorted(self._domains(con).items())
            ]
        return self._transact(tx)

    # ------------------------------------------------------------------ reserve

    def _prepare(self, i: int, r: Request, seen: set[tuple[str, str, str]]) -> _Prepared:
        if not isinstance(r, Request):
            raise ParameterError(f"request {i} is not a ledger.Request")
        _check_id(r.user_id, "user_id")
        shared = (r.domain, r.step, r.stream_id)  # usually the same for the whole call
        if shared not in seen:
            _check_id(r.domain, "domain")
            _check_id(r.step, "step")
            _check_id(r.stream_id, "stream_id", allow_empty=True)
            seen.add(shared)
        if r.notion not in ("gp", "cgp", "wevent"):
            raise ParameterError(f"request notion must be gp, cgp or wevent, got {r.notion!r}")
        return _Prepared(i, r, (r.user_id, r.step, r.stream_id), (r.user_id, r.domain, r.stream_id))

    def _charge(self, p: _Prepared, dom: dict[str, Any], cache: dict[Any, Any]) -> None:
        r = p.req
        p.notion = dom["notion"]
        if p.notion == "wevent" or r.notion == "wevent":
            if p.notion != r.notion:
                accounting.charged_amount(p.notion, r.notion, Fraction(0))  # raises
            if r.amount is not None:
                raise ParameterError(
                    "a w-event request gives per-step costs in `runs`, not `amount`")
            if not r.runs:
                raise ParameterError(f"w-event request for user {r.user_id!r} has no runs")
            raw = []
            for run in r.runs:
                if not isinstance(run, StepRun):
                    raise ParameterError("w-event runs must be mechanisms.cost.StepRun")
                raw.append((run.start, run.stop, charge_units(run.epsilon)))
            p.runs = accounting.profile(raw)
            p.units = accounting.total(p.runs)
            p.signature = json.dumps(["wevent", r.domain, [[a, b, str(q)] for a, b, q in p.runs]])
            p.detail = {"request_notion": "wevent",
                        "runs": [[run.start, run.stop, str(exact(run.epsilon))] for run in r.runs]}
            return
        if r.runs:
            raise ParameterError("runs are only for w-event requests")
        if r.amount is None:
            raise ParameterError(f"request for user {r.user_id!r} needs an amount (ε or ρ)")
        # Keyed by identity (the requests list keeps every amount alive during the call):
        # hashing 100,000 equal Fractions is slow. Equal amounts of distinct objects
        # simply miss the cache.
        ck = (p.notion, r.notion, r.domain, id(r.amount))
        hit = cache.get(ck)
        if hit is None:
            try:
                amount = exact(r.amount)
            except ValueError as err:
                raise ParameterError(f"invalid amount: {err}") from None
            if amount <= 0:
                raise ParameterError(f"a requested amount must be > 0, got {amount}")
            charged = accounting.charged_amount(p.notion, r.notion, amount)
            q = charge_units(charged)
            detail = {"request_notion": r.notion, "request_amount": str(amount)}
            if r.notion != p.notion:
                detail["converted"] = "rho = epsilon^2 / 2"
            hit = cache[ck] = (q, json.dumps([r.notion, r.domain, str(amount)]), detail)
        p.units, p.signature, p.detail = hit[0], hit[1], hit[2]

    def _request_columns(self, reqs: list[Request]) -> _Columns:
        """Validate the requests and return them as columns (fast path: per column)."""
        ok = all(isinstance(r, Request) for r in reqs)
        if ok:
            cols = _Columns(
                [r.user_id for r in reqs], [r.domain for r in reqs], [r.step for r in reqs],
                [r.stream_id for r in reqs], [r.notion for r in reqs],
                [r.amount for r in reqs], [r.runs for r in reqs],
            )
            ok = (_ids_ok(cols.users) and _distinct_ids_ok(cols.domains)
                  and _distinct_ids_ok(cols.steps)
                  and _distinct_ids_ok(cols.streams, allow_empty=True)
                  and _distinct_ok(cols.notions, {"gp", "cgp", "wevent"}))
        if not ok:  # find and raise the first problem, in request order
            checked: set[tuple[str, str, str]] = set()
            for i, r in enumerate(reqs):
                self._prepare(i, r, checked)
            cols = _Columns(
                [r.user_id for r in reqs], [r.domain for r in reqs], [r.step for r in reqs],
                [r.stream_id for r in reqs], [r.notion for r in reqs],
                [r.amount for r in reqs], [r.runs for r in reqs],
            )
        _check_unique(cols.users, cols.steps, cols.streams, "request", "reserve call")
        return cols

    def reserve(
        self,
        release_id: str,
        requests: Sequence[Request],
        *,
        mechanism: str,
        parameters: dict[str, Any],
        flow_run_id: str | None = None,
        input_fingerprint: str | None = None,
    ) -> ReserveResult:
        """Reserve budget for a release, all-or-nothing per user, in one transaction.

        A user is admitted iff after *all* of the user's requests in this call
        every cap still holds (the GP/CGP total; every window of w steps of every
        stream, earlier releases included). Denied users get a ``deny`` entry
        with the reason and nothing is charged. A replay of a (release_id,
        user_id, step, stream_id) returns the recorded decision and writes nothing.

        Args:
            release_id: id of the release (a rerun uses the same id).
            requests: the requests; at most one per (user_id, step, stream_id).
            mechanism: mechanism name, recorded on every entry.
            parameters: mechanism parameters (JSON-serialisable), recorded.
            flow_run_id: the orchestrator's run id, recorded.
            input_fingerprint: fingerprint of the input data, recorded.

        Returns:
            The admitted and denied decisions.

        Raises:
            ParameterError: bad ids, amounts or runs, unknown domain, duplicate
                keys, a closed release.
            NotionMismatchError: e.g. a CGP request on a GP domain.
            ReplayConflictError: a key was recorded earlier with a different request.
            LedgerIntegrityError: the noise key does not match the ledger.
        """
        self._require_key()
        _check_id(release_id, "release_id")
        _check_id(mechanism, "mechanism")
        if flow_run_id is not None:
            _check_id(flow_run_id, "flow_run_id")
        if input_fingerprint is not None:
            _check_id(input_fingerprint, "input_fingerprint")
        if not isinstance(parameters, dict):
            raise ParameterError("parameters must be a dict")
        params_json = _canonical_json(parameters, "parameters")
        reqs = list(requests)
        cols = self._request_columns(reqs)

        def tx(con: duckdb.DuckDBPyConnection) -> ReserveResult:
            return self._reserve_tx(con, release_id, reqs, cols, mechanism, params_json,
                                    flow_run_id, input_fingerprint)

        return self._transact(tx)

    def _reserve_tx(  # noqa: C901 - one pass per phase, kept together on purpose
        self,
        con: duckdb.DuckDBPyConnection,
        release_id: str,
        reqs: list[Request],
        q: _Columns,
        mechanism: str,
        params_json: str,
        flow_run_id: str | None,
        input_fingerprint: str | None,
    ) -> ReserveResult:
        now = _now()
        domains = self._domains(con)
        n = len(reqs)
        users, dnames, steps, streams = q.users, q.domains, q.steps, q.streams
        # Per request: the account's notion, the charge in quanta, the replay signature,
        # the detail dict and (w-event) the runs. gp/cgp charges are computed once per
        # (domain, notion, amount object); w-event charges per request.
        acc_notion: list[str] = [""] * n
        units: list[int] = [0] * n
        sigs: list[str] = [""] * n
        details: list[dict[str, Any]] = [{}] * n
        pruns: list[list[Run]] = [[]] * n
        wevent: dict[int, _Prepared] = {}
        cache: dict[Any, Any] = {}
        charges: dict[tuple[str, str, int], tuple[str, int, str, dict[str, Any]]] = {}
        notions = q.notions
        amount_ids = list(map(id, q.amounts))
        if len(set(dnames)) == 1 and len(set(notions)) == 1 and len(set(amount_ids)) == 1:
            keys = None  # one (domain, notion, amount) for all: no key tuple per request
            distinct = {(dnames[0], notions[0], amount_ids[0]): None} if n else {}
        else:
            keys = list(zip(dnames, notions, amount_ids, strict=True))
            distinct = dict.fromkeys(keys)
        plain = (not any(q.runs) and id(None) not in {k[2] for k in distinct}
                 and "wevent" not in {k[1] for k in distinct}
                 and all(domains.get(k[0], {}).get("notion", "wevent") != "wevent"
                         for k in distinct))
        if plain:
            # gp/cgp only: one charge per (domain, notion, amount object), computed in
            # request order, so the first bad request raises as in the loop below.
            first = dict.fromkeys(distinct, 0)
            if keys is not None:
                first = {}
                for i, k in enumerate(keys):
                    if k not in first:
                        first[k] = i
                        if len(first) == len(distinct):
                            break
            for k, i in first.items():
                dom = domains.get(k[0])
                if dom is None:
                    known = (", ".join(sorted(domains))
                             or "(none: run `privpipe ledger policy apply`)")
                    raise ParameterError(f"unknown domain {k[0]!r}; the ledger knows: {known}")
                p = _Prepared(i, reqs[i], (users[i], steps[i], streams[i]),
                              (users[i], k[0], streams[i]))
                self._charge(p, dom, cache)
                charges[k] = (p.notion, p.units, p.signature, p.detail)
            if len(charges) == 1:
                hit = next(iter(charges.values()))
                acc_notion, units, sigs = [hit[0]] * n, [hit[1]] * n, [hit[2]] * n
                details = [hit[3]] * n
            else:
                hits = list(map(charges.__getitem__, keys or ()))
                acc_notion = [h[0] for h in hits]
                units = [h[1] for h in hits]
                sigs = [h[2] for h in hits]
                details = [h[3] for h in hits]
        for i in range(n if plain else 0, n):  # the general case: request by request
            dname = dnames[i]
            dom = domains.get(dname)
            if dom is None:
                known = ", ".join(sorted(domains)) or "(none: run `privpipe ledger policy apply`)"
                raise ParameterError(f"unknown domain {dname!r}; the ledger knows: {known}")
            notion, amount = notions[i], q.amounts[i]
            if dom["notion"] == "wevent" or notion == "wevent" or q.runs[i] or amount is None:
                p = _Prepared(i, reqs[i], (users[i], steps[i], streams[i]),
                              (users[i], dname, streams[i]))
                self._charge(p, dom, cache)  # raises for a gp request without an amount, ...
                wevent[i] = p
                acc_notion[i], units[i], sigs[i] = p.notion, p.units, p.signature
                details[i], pruns[i] = p.detail, p.runs
                continue
            ck = (dname, notion, amount_ids[i])
            hit = charges.get(ck)
            if hit is None:
                p = _Prepared(i, reqs[i], (users[i], steps[i], streams[i]),
                              (users[i], dname, streams[i]))
                self._charge(p, dom, cache)
                hit = charges[ck] = (p.notion, p.units, p.signature, p.detail)
            acc_notion[i], units[i], sigs[i], details[i] = hit
        self._check_domain_macs(con, set(dnames))
        state = self._touch_release(con, release_id, now)
        decisions: list[Decision | None] = [None] * n
        denied_users: set[str] = set()
        fresh: list[int] = list(range(n))
        if state is not None:
            fresh = self._replays(con, release_id, q, acc_notion, sigs, domains, decisions,
                                  denied_users)
        if fresh and state == "closed":
            raise ParameterError(
                f"release {release_id!r} is closed; a new charge needs a new release id"
            )
        all_fresh = len(fresh) == n
        fu = users if all_fresh else [users[i] for i in fresh]
        fd = dnames if all_fresh else [dnames[i] for i in fresh]
        fs = streams if all_fresh else [streams[i] for i in fresh]
        caps = {name: int(dom["cap"]) for name, dom in domains.items()}
        symbols = {name: _units_text(dom) for name, dom in domains.items()}
        # Outputs, one per new entry, in entry order.
        out_idx: list[int] = []
        kinds: list[str] = []
        reasons: list[str] = []
        req_q: list[int] = []
        rem_q: list[int] = []
        bals: list[int] = []
        out_caps: list[int] = []
        writes = _AccountWrites()
        simple = (self._column_wise and not wevent and len(set(fu)) == len(fu)
                  and denied_users.isdisjoint(fu))
        if simple:
            # Every user has one gp/cgp request in this call: admit iff spent + charge <= cap.
            spent = self._account_spent(con, fu, fd, fs) if fresh else []
            out_idx = todo = fresh
            if fresh and len(set(fd)) == 1:
                cap = caps[fd[0]]
                fun = units if all_fresh else [units[i] for i in fresh]
                tots = [u if sp is None else sp + u for sp, u in zip(spent, fun, strict=True)]
                if max(tots) <= cap:  # all admitted (the usual case)
                    m = len(fresh)
                    kinds, reasons = ["reserve"] * m, ["admitted"] * m
                    req_q, bals, out_caps = fun, tots, [cap] * m
                    rem_q = [cap - t for t in tots]
                    writes = _AccountWrites(fu, fd, fs, out_caps, tots)
                    todo = []  # done
            for j, i in enumerate(todo):
                dname = dnames[i]
                cap = caps[dname]
                sp = spent[j]
                new = sp is None
                if new:
                    sp = 0
                u = units[i]
                tot = sp + u
                out_caps.append(cap)
                req_q.append(u)
                if tot <= cap:
                    kinds.append("reserve")
                    reasons.append("admitted")
                    rem_q.append(cap - tot)
                    bals.append(tot)
                    writes.add(users[i], dname, streams[i], cap, tot)
                else:
                    kinds.append("deny")
                    reasons.append(f"spent {format_units(sp)} + requested {format_units(u)} > "
                                   f"cap {format_units(cap)} {symbols[dname]}")
                    rem_q.append(cap - sp)
                    bals.append(sp)
                    if new:
                        writes.add(users[i], dname, streams[i], cap, 0)
        else:
            self._evaluate_all(con, fresh, q, reqs, wevent, acc_notion, units, sigs,
                               details, pruns, domains, denied_users, out_idx, kinds, reasons,
                               req_q, rem_q, bals, out_caps, writes)
        # Entry columns.
        if out_idx is fresh and all_fresh:
            c_users, c_domains, c_steps, c_streams = users, dnames, steps, streams
            c_units, c_notions = units, acc_notion
        else:
            c_users = [users[i] for i in out_idx]
            c_domains = [dnames[i] for i in out_idx]
            c_steps = [steps[i] for i in out_idx]
            c_streams = [streams[i] for i in out_idx]
            c_units = [units[i] for i in out_idx]
            c_notions = [acc_notion[i] for i in out_idx]
        detail_cache: dict[str, str] = {}
        dets: list[str] = []
        if not wevent:  # one detail text per signature
            c_sigs = sigs if c_users is users else [sigs[i] for i in out_idx]
            first_of = {sg: i for i, sg in zip(reversed(out_idx), reversed(c_sigs), strict=True)}
            detail_cache = {sg: _canonical_json({**details[i], "signature": sg}, "detail")
                            for sg, i in first_of.items()}
            dets = list(map(detail_cache.__getitem__, c_sigs))
        for k, i in enumerate(out_idx if wevent else ()):
            if acc_notion[i] == "wevent":
                dets.append(_canonical_json({**details[i], "signature": sigs[i],
                                             "requested": str(req_q[k]),
                                             "remaining": str(rem_q[k])}, "detail"))
                continue
            text = detail_cache.get(sigs[i])
            if text is None:
                text = detail_cache[sigs[i]] = _canonical_json(
                    {**details[i], "signature": sigs[i]}, "detail")
            dets.append(text)
        cols = {"user_id": c_users, "domain": c_domains, "step": c_steps, "stream_id": c_streams,
                "kind": kinds, "amount": c_units, "notion": c_notions, "cap": out_caps,
                "balance_after": bals, "detail": dets, "reason": reasons}
        runs = [pruns[i] for i in out_idx] if wevent else None
        shared = {"created_at": now, "actor": self.actor, "release_id": release_id,
                  "mechanism": mechanism, "parameters": params_json, "flow_run_id": flow_run_id,
                  "input_fingerprint": input_fingerprint}
        seqs = self._append(con, cols, runs, shared)
        self._save_accounts(con, writes)
        fractions: dict[int, Fraction] = {}
        for k, i in enumerate(out_idx):
            r = req_q[k]
            req_f = fractions.get(r)
            if req_f is None:
                req_f = fractions[r] = from_units(r)
            r = rem_q[k]
            rem_f = fractions.get(r)
            if rem_f is None:
                rem_f = fractions[r] = from_units(r)
            dname = dnames[i]
            decisions[i] = Decision(users[i], dname, steps[i], streams[i], kinds[k] == "reserve",
                                    reasons[k], req_f, rem_f, seqs[k], False, acc_notion[i],
                                    symbols[dname])
        admitted = [d for d in decisions if d is not None and d.admitted]
        denied = [d for d in decisions if d is not None and not d.admitted]
        return ReserveResult(admitted=admitted, denied=denied)

    def _replays(
        self,
        con: duckdb.DuckDBPyConnection,
        release_id: str,
        q: _Columns,
        acc_notion: list[str],
        sigs: list[str],
        domains: dict[str, dict[str, Any]],
        decisions: list[Decision | None],
        denied_users: set[str],
    ) -> list[int]:
        """Answer requests recorded earlier in this release; return the others' indices."""
        # Only this call's users: a release reserved chunk by chunk stays linear.
        users_tbl = pa.table({"user_id": pa.array(list(set(q.users)), pa.string())})  # noqa: F841
        con.register("_pp_users", users_tbl)
        try:
            rows_earlier = con.execute(
                "SELECT e.user_id, e.step, e.stream_id, e.kind, e.seq, e.domain, "
                "CAST(e.amount AS VARCHAR), CAST(e.cap AS VARCHAR), "
                "CAST(e.balance_after AS VARCHAR), e.reason, e.detail, e.notion FROM entries e "
                "SEMI JOIN _pp_users u ON e.user_id = u.user_id "
                "WHERE e.release_id = ? AND e.kind IN ('reserve', 'deny')",
                [release_id],
            ).fetchall()
        finally:
            con.unregister("_pp_users")
        earlier: dict[tuple[str, str, str], tuple] = {}
        for row in rows_earlier:
            earlier[(row[0], row[1], row[2])] = row
            if row[3] == "deny":
                denied_users.add(row[0])
        if not earlier:
            return list(range(len(q.users)))
        fresh: list[int] = []
        parsed: dict[str, dict[str, Any]] = {}
        fractions: dict[int, Fraction] = {}
        for i, key in enumerate(zip(q.users, q.steps, q.streams, strict=True)):
            row = earlier.get(key)
            if row is None:
                fresh.append(i)
                continue
            det = parsed.get(row[10])
            if det is None:
                det = parsed[row[10]] = json.loads(row[10])
            if row[5] != q.domains[i] or det.get("signature") != sigs[i]:
                raise ReplayConflictError(
                    f"release {release_id!r} already recorded a different request for user "
                    f"{key[0]!r}, step {key[1]!r}, stream {key[2]!r}; a new or changed "
                    "charge needs a new release id"
                )
            dom = domains[row[5]]
            if "requested" in det:  # w-event: the worst window's figures
                req, rem = int(det["requested"]), int(det["remaining"])
            else:
                req, rem = int(row[6]), int(row[7]) - int(row[8])
            for v in (req, rem):
                if v not in fractions:
                    fractions[v] = from_units(v)
            decisions[i] = Decision(
                user_id=key[0], domain=row[5], step=key[1], stream_id=key[2],
                admitted=row[3] == "reserve", reason=row[9] or "",
                requested=fractions[req], remaining=fractions[rem], entry_seq=int(row[4]),
                replayed=True, notion=dom["notion"], units=_units_text(dom),
            )
        return fresh

    def _evaluate_all(
        self,
        con: duckdb.DuckDBPyConnection,
        fresh: list[int],
        q: _Columns,
        reqs: list[Request],
        wevent: dict[int, _Prepared],
        acc_notion: list[str],
        units: list[int],
        sigs: list[str],
        details: list[dict[str, Any]],
        pruns: list[list[Run]],
        domains: dict[str, dict[str, Any]],
        denied_users: set[str],
        out_idx: list[int],
        kinds: list[str],
        reasons: list[str],
        req_q: list[int],
        rem_q: list[int],
        bals: list[int],
        out_caps: list[int],
        writes: _AccountWrites,
    ) -> None:
        """Decide user by user (several requests per user, w-event, earlier denials)."""
        by_user: dict[str, list[int]] = {}
        for i in fresh:
            by_user.setdefault(q.users[i], []).append(i)
        accounts = self._load_accounts(
            con, ((q.users[i], q.domains[i], q.streams[i]) for i in fresh), domains)
        for user, group in by_user.items():
            prepared = []
            for i in group:
                p = wevent.get(i)
                if p is None:
                    p = _Prepared(i, reqs[i], (user, q.steps[i], q.streams[i]),
                                  (user, q.domains[i], q.streams[i]), acc_notion[i], units[i],
                                  pruns[i], sigs[i], details[i])
                prepared.append(p)
            for p, admitted, reason, requested, remaining, balance in self._evaluate(
                    user, prepared, accounts, domains, denied_users):
                out_idx.append(p.index)
                kinds.append("reserve" if admitted else "deny")
                reasons.append(reason)
                req_q.append(requested)
                rem_q.append(remaining)
                bals.append(balance)
                out_caps.append(accounts[p.account].cap)
        w = self._writes(accounts)
        for c in ("users", "domains", "streams", "caps", "spents"):
            getattr(writes, c).extend(getattr(w, c))

    def _evaluate(
        self,
        user: str,
        group: list[_Prepared],
        accounts: dict[tuple[str, str, str], _Account],
        domains: dict[str, dict[str, Any]],
        denied_users: set[str],
    ) -> list[tuple[_Prepared, bool, str, int, int, int]]:
        """Decide one user's new requests together; apply them to `accounts` if admitted.

        Returns per request: (prepared, admitted, reason, requested, remaining, balance_after).
        """
        if len(group) == 1 and group[0].notion != "wevent" and user not in denied_users:
            p = group[0]
            acc = accounts[p.account]
            total = acc.spent + p.units
            if total <= acc.cap:
                acc.spent = total
                acc.dirty = True
                return [(p, True, "admitted", p.units, acc.cap - total, total)]
        per_account: dict[tuple[str, str, str], list[_Prepared]] = {}
        for p in group:
            per_account.setdefault(p.account, []).append(p)
        failure = ""
        fail_account = None
        if user in denied_users:
            failure = "the user was denied earlier in this release"
        new_state: dict[tuple[str, str, str], tuple[int, list[Run]]] = {}
        worst: dict[tuple[str, str, str], tuple[int, int]] = {}  # wevent: (req, remaining)
        for key, ps in per_account.items():
            acc = accounts[key]
            dom = domains[key[1]]
            symbol = _units_text(dom)
            if acc.notion == "wevent":
                w = int(acc.w or 1)
                new_runs = [r for p in ps for r in p.runs]
                combined = accounting.profile([*acc.runs, *new_runs])
                m, s = accounting.max_window(combined, w)
                req_in = accounting.window_sum(accounting.profile(new_runs), s, w)
                old_in = accounting.window_sum(acc.runs, s, w)
                new_state[key] = (m, combined)
                if m > acc.cap:
                    worst[key] = (req_in, acc.cap - old_in)
                    if not failure:
                        failure = (
                            f"window of steps [{s}, {s + w}) of stream {key[2]!r} would cost "
                            f"{format_units(m)} > cap {format_units(acc.cap)} {symbol}"
                        )
                        fail_account = key
                else:  # admitted: the request's own worst window, headroom left after it
                    worst[key] = (accounting.max_window(new_runs, w)[0], acc.cap - m)
            else:
                add = sum(p.units for p in ps)
                total = acc.spent + add
                new_state[key] = (total, [])
                if total > acc.cap and not failure:
                    failure = (
                        f"spent {format_units(acc.spent)} + requested {format_units(add)} > cap "
                        f"{format_units(acc.cap)} {symbol}"
                    )
                    fail_account = key
        out = []
        if failure:
            for p in group:
                acc = accounts[p.account]
                reason = failure
                if fail_account is not None and p.account != fail_account:
                    reason = f"denied together with the user's other requests: {failure}"
                if acc.notion == "wevent":
                    req, rem = worst[p.account]
                    balance = accounting.max_window(acc.runs, int(acc.w or 1))[0]
                else:
                    req, rem, balance = p.units, acc.cap - acc.spent, acc.spent
                out.append((p, False, reason, req, rem, balance))
            denied_users.add(user)
            return out
        for key, ps in per_account.items():
            acc = accounts[key]
            total, combined = new_state[key]
            if acc.notion == "wevent":
                req, rem = worst[key]
                cur = acc.runs
                for p in ps:  # entry by entry, as `verify` replays them
                    cur = accounting.profile([*cur, *p.runs])
                    bal = accounting.max_window(cur, int(acc.w or 1))[0]
                    out.append((p, True, "admitted", req, rem, bal))
                acc.runs = combined
                acc.spent = total
                acc.dirty = True
            else:
                running = acc.spent
                for p in ps:
                    running += p.units
                    out.append((p, True, "admitted", p.units, acc.cap - running, running))
                acc.spent = running
                acc.dirty = True
        return out

    # ------------------------------------------------------------------ settle / close

    def _reservations(
        self, con: duckdb.DuckDBPyConnection, release_id: str, users: set[str] | None = None
    ) -> tuple[dict[_Key, dict[str, Any]], dict[_Key, dict[str, Any]]]:
        """Reservations of a release (of `users`, or all) and their settle/close entries, by key."""
        res: dict[_Key, dict[str, Any]] = {}
        done: dict[_Key, dict[str, Any]] = {}
        sql = ("SELECT e.seq, e.kind, e.user_id, e.step, e.stream_id, e.domain, e.amount, "
               "e.notion, e.detail FROM entries e {join} WHERE e.release_id = ? "
               "AND e.kind IN ('reserve', 'deny', 'settle', 'close') AND e.user_id <> '' "
               "ORDER BY e.seq")
        if users is None:
            rows = con.execute(sql.format(join=""), [release_id]).fetchall()
        else:
            users_tbl = pa.table({"user_id": sorted(users)})  # noqa: F841 - scanned below
            con.register("_pp_users", users_tbl)
            try:
                rows = con.execute(
                    sql.format(join="SEMI JOIN _pp_users u ON e.user_id = u.user_id"),
                    [release_id],
                ).fetchall()
            finally:
                con.unregister("_pp_users")
        wevent_seqs = []
        for seq, kind, u, st, s, d, amount, notion, detail in rows:
            rec = {"seq": int(seq), "kind": kind, "domain": d, "amount": int(amount),
                   "notion": notion, "detail": detail, "runs": []}
            if kind in ("reserve", "deny"):
                res[(u, st, s)] = rec
                if notion == "wevent" and kind == "reserve":
                    wevent_seqs.append(int(seq))
            else:
                done[(u, st, s)] = rec
        if wevent_seqs:
            by_seq = {res_rec["seq"]: res_rec for res_rec in res.values()}
            for seq, a, b, q in con.execute(
                "SELECT r.seq, r.run_start, r.run_stop, r.amount FROM step_runs r JOIN entries e "
                "ON e.seq = r.seq WHERE e.release_id = ? AND e.kind = 'reserve' "
                "ORDER BY r.seq, r.run_start",
                [release_id],
            ).fetchall():
                rec = by_seq.get(int(seq))
                if rec is not None:  # reservations of users outside `users` are skipped
                    rec["runs"].append((int(a), int(b), int(q)))
        return res, done

    def settle(self, release_id: str, settlements: Sequence[Settlement]) -> None:
        """Record the actual cost of admitted requests and refund the unused part.

        Each settlement writes a ``settle`` entry with the per-sub-step breakdown
        (JSON) and, if the actual cost is below the reservation, a ``refund``
        entry with the difference (per step for w-event). Settling the same key
        again with the same cost writes nothing (idempotent).

        Raises:
            ParameterError: no admitted reservation for a key (unknown, denied or
                closed), or a domain/notion/w that does not match it.
            ReplayConflictError: the key was settled earlier with a different cost.
            LedgerInternalError: the actual cost exceeds the reservation (a bug in
                the mechanism or its caller).
        """
        self._require_key()
        _check_id(release_id, "release_id")
        items = list(settlements)
        ok = all(isinstance(s, Settlement) for s in items)
        if ok:
            users = [s.user_id for s in items]
            doms = [s.domain for s in items]
            steps = [s.step for s in items]
            streams = [s.stream_id for s in items]
            ok = (_ids_ok(users) and _distinct_ids_ok(doms) and _distinct_ids_ok(steps)
                  and _distinct_ids_ok(streams, allow_empty=True)
                  and all(isinstance(c, Cost | WEventCost) for c in {id(s.cost): s.cost
                                                                     for s in items}.values()))
        if ok:
            _check_unique(users, steps, streams, "settlement", "settle call")
        else:  # find and raise the first problem, in settlement order
            seen: set[tuple[str, str, str]] = set()
            for s in items:
                if not isinstance(s, Settlement):
                    raise ParameterError("settlements must be ledger.Settlement objects")
                _check_id(s.user_id, "user_id")
                _check_id(s.domain, "domain")
                _check_id(s.step, "step")
                _check_id(s.stream_id, "stream_id", allow_empty=True)
                if not isinstance(s.cost, Cost | WEventCost):
                    raise ParameterError("a settlement's cost must be a Cost or WEventCost")
                k = (s.user_id, s.step, s.stream_id)
                if k in seen:
                    raise ParameterError(f"duplicate settlement for user {k[0]!r}, step {k[1]!r}")
                seen.add(k)
            users = [s.user_id for s in items]
            doms = [s.domain for s in items]
            steps = [s.step for s in items]
            streams = [s.stream_id for s in items]

        def tx(con: duckdb.DuckDBPyConnection) -> None:
            self._settle_tx(con, release_id, items, users, doms, steps, streams)

        self._transact(tx)

    def _settle_lookup(
        self, con: duckdb.DuckDBPyConnection, release_id: str, users: list[str],
        steps: list[str], streams: list[str],
    ) -> dict[str, list[Any]]:
        """Per settlement (aligned): its reservation, an earlier settle/close, the account.

        Columns ``r_seq, r_kind, r_domain, r_amount`` (the reserve or deny
        entry of the key; the last one if there were several), ``d_kind, d_detail``
        (its settle or close entry) and ``spent`` (the account, None if missing).
        """
        keys_tbl = pa.table({  # noqa: F841 - scanned by DuckDB below
            "i": pa.array(range(len(users)), pa.int64()),
            "user_id": pa.array(users, pa.string()),
            "step": pa.array(steps, pa.string()),
            "stream_id": pa.array(streams, pa.string()),
        })
        # At most one reserve/deny and one settle/close entry per key and release (the
        # ledger writes no more); should there be several, the last one counts.
        sql = (
            "WITH e AS (SELECT e.seq, e.kind, e.user_id, e.step, e.stream_id, e.domain, "
            "e.amount, e.notion, e.detail FROM entries e "
            "SEMI JOIN (SELECT DISTINCT user_id FROM _pp_keys) u ON e.user_id = u.user_id "
            "WHERE e.release_id = ? AND e.user_id <> '' "
            "AND e.kind IN ('reserve', 'deny', 'settle', 'close')), "
            "r AS (SELECT * FROM e WHERE kind IN ('reserve', 'deny') {last}), "
            "d AS (SELECT * FROM e WHERE kind IN ('settle', 'close') {last}) "
            "SELECT r.seq AS r_seq, r.kind AS r_kind, r.domain AS r_domain, "
            "CAST(r.amount AS VARCHAR) AS r_amount, "
            "d.kind AS d_kind, d.detail AS d_detail, CAST(a.spent AS VARCHAR) AS spent "
            "FROM _pp_keys k "
            "LEFT JOIN r ON r.user_id = k.user_id AND r.step = k.step "
            "AND r.stream_id = k.stream_id "
            "LEFT JOIN d ON d.user_id = k.user_id AND d.step = k.step "
            "AND d.stream_id = k.stream_id "
            "LEFT JOIN accounts a ON a.user_id = k.user_id AND a.domain = r.domain "
            "AND a.stream_id = k.stream_id ORDER BY k.i"
        )
        con.register("_pp_keys", keys_tbl)
        try:
            tbl = con.sql(sql.format(last=""), params=[release_id]).to_arrow_table()
            if tbl.num_rows != len(users):  # duplicates: keep the last entry of each key
                tbl = con.sql(sql.format(last="QUALIFY row_number() OVER (PARTITION BY user_id, "
                                              "step, stream_id ORDER BY seq DESC) = 1"),
                              params=[release_id]).to_arrow_table()
        finally:
            con.unregister("_pp_keys")
        out = {name: tbl.column(name).to_pylist() for name in tbl.column_names}
        for c in ("r_amount", "spent"):
            memo = {t: None if t is None else int(t) for t in set(out[c])}
            out[c] = list(map(memo.__getitem__, out[c]))
        return out

    def _settle_tx(  # noqa: C901 - the checks of one settlement, in their documented order
        self,
        con: duckdb.DuckDBPyConnection,
        release_id: str,
        items: list[Settlement],
        users: list[str],
        doms: list[str],
        steps: list[str],
        streams: list[str],
    ) -> None:
        now = _now()
        domains = self._domains(con)
        look = self._settle_lookup(con, release_id, users, steps, streams)
        r_seq, r_kind, r_domain, r_amount = (look["r_seq"], look["r_kind"], look["r_domain"],
                                             look["r_amount"])
        d_kind, d_detail, spent = look["d_kind"], look["d_detail"], look["spent"]
        if self._column_wise and self._settle_uniform(con, release_id, now, items, users, doms,
                                                      steps, streams, look, domains):
            return
        # Entry columns (settle, refund?) per settlement, in settlement order.
        c_idx: list[int] = []
        kinds: list[str] = []
        amounts: list[int] = []
        notions: list[str] = []
        dets: list[str] = []
        reasons: list[str] = []
        caps: list[int] = []
        bals: list[int] = []
        runs: list[list[Run]] = []
        any_runs = False
        det_texts: list[str] = []
        det_parts: dict[tuple[str, int, str], tuple[str, str, str, str]] = {}
        cache: dict[Any, Any] = {}
        prior_sig: dict[str, Any] = {}
        current: dict[tuple[str, str, str], int] = {}  # accounts changed by this call
        wevent_seqs = [r_seq[i] for i in range(len(items)) if r_kind[i] == "reserve"
                       and domains.get(r_domain[i], {}).get("notion") == "wevent"]
        reserved_runs = self._runs_of(con, wevent_seqs) if wevent_seqs else {}
        wevent_acc = self._load_accounts(
            con, [(users[i], doms[i], streams[i]) for i in range(len(items))
                  if r_seq[i] in reserved_runs], domains) if wevent_seqs else {}
        writes = _AccountWrites()
        caps_by_dom = {name: int(dom["cap"]) for name, dom in domains.items()}
        for i, s in enumerate(items):
            if r_seq[i] is None or r_kind[i] != "reserve" or r_domain[i] != doms[i]:
                what = f"user {s.user_id!r}, step {s.step!r}, stream {s.stream_id!r}"
                if r_seq[i] is not None and r_kind[i] == "reserve":
                    raise ParameterError(
                        f"settlement for {what} names domain {s.domain!r} but the reservation "
                        f"is for {r_domain[i]!r}"
                    )
                state = "was denied" if r_seq[i] is not None else "has no reservation"
                raise ParameterError(f"cannot settle release {release_id!r} for {what}: it {state}")
            dom = domains[r_domain[i]]
            cost = s.cost
            hit = cache.get((dom["notion"], id(cost)))
            if hit is None or isinstance(cost, WEventCost):
                hit = self._actual(s, dom, cache)
            actual, actual_runs, breakdown, sig = hit
            reserved = r_amount[i]
            if d_kind[i] is not None:
                what = f"user {s.user_id!r}, step {s.step!r}, stream {s.stream_id!r}"
                if d_kind[i] == "close":
                    raise ParameterError(
                        f"cannot settle {what}: the reservation of release {release_id!r} was "
                        "closed (refunded) by an operator"
                    )
                text = d_detail[i]
                if text not in prior_sig:
                    prior_sig[text] = json.loads(text).get("signature")
                if prior_sig[text] != sig:
                    raise ReplayConflictError(
                        f"release {release_id!r} already settled {what} with a different cost"
                    )
                continue
            notion = dom["notion"]
            if notion == "wevent":
                refund_runs = accounting.difference(reserved_runs.get(r_seq[i], []),
                                                    actual_runs)
                refund = accounting.total(refund_runs)
            else:
                if actual > reserved:
                    what = f"user {s.user_id!r}, step {s.step!r}, stream {s.stream_id!r}"
                    raise LedgerInternalError(
                        f"release {release_id!r}, {what}: actual cost {format_units(actual)} "
                        f"exceeds the reservation {format_units(reserved)}"
                    )
                refund_runs, refund = [], reserved - actual
            # Canonical JSON with sorted keys, built by hand from a head and a tail shared
            # by equal costs; its JSON-string text (for the hash) is built the same way,
            # as escaping commutes with concatenation and digits need none.
            parts = det_parts.get((breakdown, reserved, sig))
            if parts is None:
                head = f'{{"breakdown":{breakdown},"reserve_seq":'
                tail = f',"reserved":"{reserved}","signature":{_estr(sig)}}}'
                parts = det_parts[(breakdown, reserved, sig)] = (
                    head, tail, '"' + _estr(head)[1:-1], _estr(tail)[1:-1] + '"')
            seq_text = str(r_seq[i])
            dets.append(parts[0] + seq_text + parts[1])
            det_texts.append(parts[2] + seq_text + parts[3])
            key = (s.user_id, s.domain, s.stream_id)
            cap = caps_by_dom[s.domain]
            if notion == "wevent":
                acc = wevent_acc[key]
                before = acc.spent
            else:
                before = current.get(key)
                if before is None:
                    before = spent[i] or 0
                    if spent[i] is None:  # no account row (never for a real reservation)
                        current[key] = 0
            c_idx.append(i)
            kinds.append("settle")
            amounts.append(actual)
            notions.append(notion)
            reasons.append("settled")
            caps.append(cap)
            bals.append(before)
            runs.append(actual_runs)
            any_runs = any_runs or bool(actual_runs)
            if refund > 0:
                if notion == "wevent":
                    acc.runs = accounting.profile(
                        [*acc.runs, *((a, b, -q) for a, b, q in refund_runs)])
                    acc.spent = accounting.max_window(acc.runs, int(acc.w or 1))[0]
                    acc.dirty = True
                    after = acc.spent
                else:
                    after = current[key] = before - refund
                c_idx.append(i)
                kinds.append("refund")
                amounts.append(refund)
                notions.append(notion)
                dets.append(f'{{"reserve_seq":{seq_text}}}')
                det_texts.append(f'"{{\\"reserve_seq\\":{seq_text}}}"')
                reasons.append("unused part of the reservation")
                caps.append(cap)
                bals.append(after)
                runs.append(refund_runs)
                any_runs = any_runs or bool(refund_runs)
        if not c_idx:
            return
        for (u, d, st), sp in current.items():
            writes.add(u, d, st, caps_by_dom[d], sp)
        for (u, d, st), acc in wevent_acc.items():
            if acc.dirty or not acc.exists:
                writes.add(u, d, st, acc.cap, acc.spent)
        if len(c_idx) == len(items):
            c_users, c_domains, c_steps, c_streams = users, doms, steps, streams
        else:
            c_users = [users[i] for i in c_idx]
            c_domains = [doms[i] for i in c_idx]
            c_steps = [steps[i] for i in c_idx]
            c_streams = [streams[i] for i in c_idx]
        cols = {"user_id": c_users, "domain": c_domains, "step": c_steps, "stream_id": c_streams,
                "kind": kinds, "amount": amounts, "notion": notions, "cap": caps,
                "balance_after": bals, "detail": dets, "reason": reasons}
        shared = {"created_at": now, "actor": self.actor, "release_id": release_id,
                  "mechanism": None, "parameters": None, "flow_run_id": None,
                  "input_fingerprint": None}
        self._append(con, cols, runs if any_runs else None, shared, {"detail": det_texts})
        self._save_accounts(con, writes)
        self._update_release_state(con, release_id, now)

    def _settle_uniform(
        self,
        con: duckdb.DuckDBPyConnection,
        release_id: str,
        now: str,
        items: list[Settlement],
        users: list[str],
        doms: list[str],
        steps: list[str],
        streams: list[str],
        look: dict[str, list[Any]],
        domains: dict[str, dict[str, Any]],
    ) -> bool:
        """Settle the usual case column-wise; False (nothing written) if it is not that case.

        The usual case: one gp/cgp domain, step and stream, one `Cost` object for
        all, every key reserved with one amount and not yet settled, every account
        present. Then the general loop of `_settle_tx` would raise nothing and write
        exactly these entries: (settle, refund if the cost is below the reservation)
        per settlement, in order, with balances from the stored accounts.
        """
        n = len(items)
        if not n:
            return False
        dname, cost = doms[0], items[0].cost
        dom = domains.get(dname)
        r_seq, r_amount, spent = look["r_seq"], look["r_amount"], look["spent"]
        reserved = r_amount[0]
        if (dom is None or dom["notion"] == "wevent" or isinstance(cost, WEventCost)
                or len(set(doms)) != 1 or len(set(steps)) != 1 or len(set(streams)) != 1
                or len({id(s.cost) for s in items}) != 1
                or look["r_kind"].count("reserve") != n or look["r_domain"].count(dname) != n
                or look["d_kind"].count(None) != n or reserved is None
                or r_amount.count(reserved) != n or None in spent):
            return False
        actual, _runs, breakdown, sig = self._actual(items[0], dom, {})
        if actual > reserved:
            return False  # the general loop raises the error
        refund = reserved - actual
        cap = int(dom["cap"])
        notion = dom["notion"]
        head = f'{{"breakdown":{breakdown},"reserve_seq":'
        tail = f',"reserved":"{reserved}","signature":{_estr(sig)}}}'
        ehead, etail = '"' + _estr(head)[1:-1], _estr(tail)[1:-1] + '"'
        seq_texts = list(map(str, r_seq))
        dets = [head + t + tail for t in seq_texts]
        det_texts = [ehead + t + etail for t in seq_texts]
        cols: dict[str, list[Any]] = {
            "user_id": users, "domain": doms, "step": steps, "stream_id": streams,
            "kind": ["settle"] * n, "amount": [actual] * n, "notion": [notion] * n,
            "cap": [cap] * n, "balance_after": spent, "detail": dets, "reason": ["settled"] * n,
        }
        writes = _AccountWrites()
        if refund > 0:  # (settle, refund) per settlement; one account per user here
            after = [sp - refund for sp in spent]
            refund_cols: dict[str, list[Any]] = {
                "kind": ["refund"] * n, "amount": [refund] * n,
                "balance_after": after, "detail": [f'{{"reserve_seq":{t}}}' for t in seq_texts],
                "reason": ["unused part of the reservation"] * n,
            }
            refund_texts = [f'"{{\\"reserve_seq\\":{t}}}"' for t in seq_texts]
            for c, values in cols.items():
                both = [None] * (2 * n)
                both[0::2] = values
                both[1::2] = refund_cols.get(c, values)
                cols[c] = both
            both = [None] * (2 * n)
            both[0::2], both[1::2] = det_texts, refund_texts
            det_texts = both
            writes = _AccountWrites(users, doms, streams, [cap] * n, after)
        shared = {"created_at": now, "actor": self.actor, "release_id": release_id,
                  "mechanism": None, "parameters": None, "flow_run_id": None,
                  "input_fingerprint": None}
        self._append(con, cols, None, shared, {"detail": det_texts})
        self._save_accounts(con, writes)
        self._update_release_state(con, release_id, now)
        return True

    @staticmethod
    def _runs_of(con: duckdb.DuckDBPyConnection, seqs: list[int]) -> dict[int, list[Run]]:
        """The step runs of the given entries, by seq."""
        seq_tbl = pa.table({"seq": pa.array(seqs, pa.int64())})  # noqa: F841 - scanned below
        con.register("_pp_seqs", seq_tbl)
        try:
            rows = con.execute(
                "SELECT r.seq, r.run_start, r.run_stop, r.amount FROM step_runs r SEMI JOIN "
                "_pp_seqs s ON s.seq = r.seq ORDER BY r.seq, r.run_start, r.run_stop, r.amount"
            ).fetchall()
        finally:
            con.unregister("_pp_seqs")
        out: dict[int, list[Run]] = {int(s): [] for s in seqs}
        for seq, a, b, q in rows:
            out[int(seq)].append((int(a), int(b), int(q)))
        return out

    def _actual(
        self, s: Settlement, dom: dict[str, Any], cache: dict[Any, Any]
    ) -> tuple[int, list[Run], str, str]:
        """Actual cost in quanta, its runs, the breakdown JSON and a signature for replays."""
        cost = s.cost
        if isinstance(cost, WEventCost):
            if dom["notion"] != "wevent":
                raise NotionMismatchError(
                    f"a w-event cost cannot settle a {dom['notion']!r} domain ({dom['domain']!r})"
                )
            if cost.w != dom["w"]:
                raise ParameterError(
                    f"settlement window w={cost.w} differs from domain {dom['domain']!r} "
                    f"w={dom['w']}"
                )
            runs = accounting.profile((r.start, r.stop, charge_units(r.epsilon)) for r in cost.runs)
            breakdown = _canonical_json(
                [{"start": r.start, "stop": r.stop, "epsilon": str(r.epsilon)} for r in cost.runs],
                "breakdown")
            sig = json.dumps([str(accounting.total(runs)), [[a, b, str(q)] for a, b, q in runs]])
            return accounting.total(runs), runs, breakdown, sig
        if dom["notion"] == "wevent":
            raise NotionMismatchError(f"a {cost.notion!r} cost cannot settle a w-event domain")
        # Keyed by identity: the settlements list keeps every cost alive during the call,
        # and hashing 100,000 equal Cost objects (tuples of Fractions) is slow.
        ck = (dom["notion"], id(cost))
        hit = cache.get(ck)
        if hit is None:
            accounting.charged_amount(dom["notion"], cost.notion, Fraction(0))  # notion check
            exact_total = sum(
                (accounting.charged_amount(dom["notion"], i.notion, i.amount) for i in cost.items),
                Fraction(0),
            )
            q = charge_units(exact_total)
            hit = cache[ck] = (q, [], _canonical_json(cost.breakdown(), "breakdown"),
                               json.dumps([str(q), []]))
        return hit

    def _update_release_state(
        self, con: duckdb.DuckDBPyConnection, release_id: str, now: str
    ) -> None:
        row = first_row(con.execute(
            "SELECT count(*) FILTER (WHERE r.kind = 'reserve'), "
            "count(*) FILTER (WHERE r.kind = 'reserve' AND d.seq IS NULL) "
            "FROM entries r LEFT JOIN (SELECT DISTINCT user_id, step, stream_id, 1 AS seq "
            "FROM entries WHERE release_id = ? AND kind IN ('settle', 'close')) d "
            "ON d.user_id = r.user_id AND d.step = r.step AND d.stream_id = r.stream_id "
            "WHERE r.release_id = ?",
            [release_id, release_id],
        ))
        if row and row[0] and row[1] == 0:
            con.execute(
                "UPDATE releases SET state = 'settled', updated_at = CAST(? AS TIMESTAMP) "
                "WHERE release_id = ? AND state = 'reserved'",
                [now, release_id],
            )
            schema.seal_release(con, self._key, release_id)

    def close(self, release_id: str, reason: str) -> None:
        """Close a release: refund its unsettled reservations with audited ``close`` entries.

        Use this for a release that died and will not be resumed. Only do it if
        no output of the unsettled users can have left the system: a refunded
        reservation is budget given back. Settled reservations are untouched. A
        closed release accepts no new reservations. Idempotent: closing again
        writes nothing.

        Raises:
            ParameterError: unknown release or empty reason.
        """
        self._require_key()
        _check_id(release_id, "release_id")
        _check_id(reason, "reason")

        def tx(con: duckdb.DuckDBPyConnection) -> None:
            now = _now()
            row = first_row(con.execute(
                "SELECT state FROM releases WHERE release_id = ?", [release_id]
            ))
            if row is None:
                raise ParameterError(f"unknown release {release_id!r}")
            domains = self._domains(con)
            res, done = self._reservations(con, release_id)
            open_res = [(k, r) for k, r in res.items() if r["kind"] == "reserve" and k not in done]
            if row[0] == "closed" and not open_res:
                return
            rows: list[dict[str, Any]] = []
            runs: list[list[Run]] = []
            accounts = self._load_accounts(
                con, ((k[0], r["domain"], k[2]) for k, r in open_res), domains
            )
            for (u, st, s), r in open_res:
                acc = accounts[(u, r["domain"], s)]
                if acc.notion == "wevent":
                    acc.runs = accounting.profile(
                        [*acc.runs, *((a, b, -q) for a, b, q in r["runs"])])
                    acc.spent = accounting.max_window(acc.runs, int(acc.w or 1))[0]
                else:
                    acc.spent -= r["amount"]
                acc.dirty = True
                rows.append({"user_id": u, "domain": r["domain"], "step": st, "stream_id": s,
                             "kind": "close", "amount": r["amount"], "notion": r["notion"],
                             "cap": acc.cap, "balance_after": acc.spent,
                             "detail": _canonical_json({"reserve_seq": r["seq"]}, "detail")})
                runs.append(r["runs"])
            if not rows:
                rows.append({"user_id": "", "domain": "", "step": "", "stream_id": "",
                             "kind": "close", "amount": 0, "notion": "", "cap": None,
                             "balance_after": None, "detail": None})
                runs.append([])
            shared = {"created_at": now, "actor": self.actor, "release_id": release_id,
                      "mechanism": None, "parameters": None, "flow_run_id": None,
                      "input_fingerprint": None, "reason": reason}
            self._append(con, _row_columns(rows, shared), runs, shared)
            self._save_accounts(con, self._writes(accounts))
            con.execute(
                "UPDATE releases SET state = 'closed', updated_at = CAST(? AS TIMESTAMP) "
                "WHERE release_id = ?",
                [now, release_id],
            )
            schema.seal_release(con, self._key, release_id)

        self._transact(tx)

    # ------------------------------------------------------------------ releases

    def record_release(self, release_id: str, manifest: dict[str, Any], state: str) -> None:
        """Store a release's manifest (JSON) and state (reserved | settled | closed | failed).

        Raises:
            ParameterError: unknown state, non-JSON manifest, or reopening a closed release.
        """
        self._require_key()
        _check_id(release_id, "release_id")
        if state not in RELEASE_STATES:
            raise ParameterError(f"release state must be one of {', '.join(RELEASE_STATES)}")
        if not isinstance(manifest, dict):
            raise ParameterError("a release manifest must be a dict")
        text = _canonical_json(manifest, "manifest")

        def tx(con: duckdb.DuckDBPyConnection) -> None:
            now = _now()
            row = first_row(con.execute(
                "SELECT state FROM releases WHERE release_id = ?", [release_id]
            ))
            if row is None:
                con.execute(
                    "INSERT INTO releases VALUES (?, ?, ?, CAST(? AS TIMESTAMP), "
                    "CAST(? AS TIMESTAMP), NULL)",
                    [release_id, state, text, now, now],
                )
                schema.seal_release(con, self._key, release_id)
                return
            if row[0] == "closed" and state != "closed":
                raise ParameterError(f"release {release_id!r} is closed and cannot be reopened")
            con.execute(
                "UPDATE releases SET state = ?, manifest = ?, updated_at = CAST(? AS TIMESTAMP) "
                "WHERE release_id = ?",
                [state, text, now, release_id],
            )
            schema.seal_release(con, self._key, release_id)

        self._transact(tx)

    def release(self, release_id: str) -> dict[str, Any] | None:
        """A release's record (state, manifest as a dict, timestamps) or None if unknown."""
        _check_id(release_id, "release_id", allow_empty=True)
        def tx(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
            row = first_row(con.execute(
                "SELECT release_id, state, manifest, created_at, updated_at FROM releases "
                "WHERE release_id = ?",
                [release_id],
            ))
            if row is None:
                return None
            return {"release_id": row[0], "state": row[1],
                    "manifest": json.loads(row[2]) if row[2] else None,
                    "created_at": row[3], "updated_at": row[4]}
        return self._transact(tx)

    def entry_range(self, release_id: str) -> tuple[int, int] | None:
        """(first_seq, last_seq) of a release's entries, or None if it has none."""
        _check_id(release_id, "release_id", allow_empty=True)
        def tx(con: duckdb.DuckDBPyConnection) -> tuple[int, int] | None:
            row = first_row(con.execute(
                "SELECT min(seq), max(seq) FROM entries WHERE release_id = ?", [release_id]
            ))
            return None if row is None or row[0] is None else (int(row[0]), int(row[1]))
        return self._transact(tx)

    # ------------------------------------------------------------------ noise key

    def noise_seed(self, release_id: str, user_id: str) -> int:
        """256-bit noise seed: HMAC-SHA256(key, canonical(release_id, user_id)) as an int.

        Feed it to ``np.random.default_rng``. The same (release_id, user_id)
        always gives the same seed, so a rerun
        reproduces its noise instead of drawing (and leaking) a fresh sample.

        Raises:
            LedgerIntegrityError: the key file does not match the ledger's fingerprint.
        """
        self._require_key()
        _check_id(release_id, "release_id")
        _check_id(user_id, "user_id")
        return keys.noise_seed(self._key, release_id, user_id)

    # ------------------------------------------------------------------ queries

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        def tx(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
            cur = con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        return self._transact(tx)

    def balances(self, domain: str | None = None) -> list[dict[str, Any]]:
        """Per account: user_id, domain, stream_id, notion, cap, spent, remaining, units.

        cap, spent and remaining are exact Fractions.

        For w-event accounts ``spent`` is the largest window sum of the history.
        """
        if domain is not None:
            _check_id(domain, "domain", allow_empty=True)
        rows = self._query(
            "SELECT a.user_id, a.domain, a.stream_id, d.notion, a.cap, a.spent, "
            "d.units_label AS units FROM accounts a JOIN domains d ON d.domain = a.domain "
            "WHERE ? IS NULL OR a.domain = ? ORDER BY a.domain, a.user_id, a.stream_id",
            [domain, domain],
        )
        for r in rows:
            cap, spent = int(r["cap"]), int(r["spent"])
            r["cap"], r["spent"], r["remaining"] = (from_units(cap), from_units(spent),
                                                    from_units(cap - spent))
        return [{k: r[k] for k in ("user_id", "domain", "stream_id", "notion", "cap", "spent",
                                   "remaining", "units")} for r in rows]

    def history(self, user_id: str, domain: str | None = None) -> list[dict[str, Any]]:
        """Every entry of one user in seq order, amounts as exact Fractions."""
        _check_id(user_id, "user_id", allow_empty=True)
        if domain is not None:
            _check_id(domain, "domain", allow_empty=True)
        rows = self._query(
            "SELECT seq, entry_id, created_at, release_id, domain, step, stream_id, kind, notion, "
            "amount, balance_after, cap, mechanism, parameters, reason, actor FROM entries "
            "WHERE user_id = ? AND (? IS NULL OR domain = ?) ORDER BY seq",
            [user_id, domain, domain],
        )
        for r in rows:
            for c in ("amount", "balance_after", "cap"):
                r[c] = None if r[c] is None else from_units(int(r[c]))
        return rows

    def releases(self) -> list[dict[str, Any]]:
        """Every release: id, state, admitted/denied user counts, net spent, seq range."""
        rows = self._query(
            "SELECT r.release_id, r.state, r.created_at, r.updated_at, "
            "count(DISTINCT e.user_id) FILTER (WHERE e.kind = 'reserve') AS users_admitted, "
            "count(DISTINCT e.user_id) FILTER (WHERE e.kind = 'deny') AS users_denied, "
            "CAST(coalesce(sum(CASE e.kind WHEN 'reserve' THEN e.amount WHEN 'refund' THEN "
            "-e.amount WHEN 'close' THEN -e.amount ELSE 0 END), 0) AS VARCHAR) AS net_quanta, "
            "min(e.seq) AS first_seq, max(e.seq) AS last_seq "
            "FROM releases r LEFT JOIN entries e ON e.release_id = r.release_id "
            "GROUP BY ALL ORDER BY r.created_at, r.release_id"
        )
        for r in rows:
            r["net_spent"] = from_units(int(r.pop("net_quanta")))
        return rows

    def denials(self) -> list[dict[str, Any]]:
        """Every denial: seq, time, release, user, domain, step, stream, requested, reason."""
        rows = self._query(
            "SELECT seq, created_at, release_id, user_id, domain, step, stream_id, notion, "
            "amount, reason FROM entries WHERE kind = 'deny' ORDER BY seq"
        )
        for r in rows:
            r["requested"] = from_units(int(r.pop("amount")))
        return rows

    def export(self, path: str | os.PathLike[str], fmt: str = "csv", what: str = "entries") -> int:
        """Write a table for auditors to `path` as csv, parquet or json; returns the row count.

        Exact amounts are exported as integer quanta in text columns (``*_quanta``)
        next to readable DOUBLE columns. The noise key is never exported.

        Args:
            path: output file.
            fmt: ``csv``, ``parquet`` or ``json`` (a JSON array of objects).
            what: ``entries`` (the full audit log with step runs), ``balances``,
                ``releases`` or ``denials``.
        """
        if fmt not in ("csv", "parquet", "json"):
            raise ParameterError("export format must be csv, parquet or json")
        queries = {
            "entries": (
                "SELECT e.seq, e.entry_id, e.prev_hash, e.hash, e.created_at, e.actor, "  # noqa: S608
                "e.release_id, e.user_id, e.domain, e.step, e.stream_id, e.kind, e.notion, "
                "CAST(e.amount AS VARCHAR) AS amount_quanta, "
                f"CAST(e.amount AS DOUBLE) / {float(UNITS_PER_EPSILON)!r} AS amount, "
                "CAST(e.cap AS VARCHAR) AS cap_quanta, "
                "CAST(e.balance_after AS VARCHAR) AS balance_after_quanta, "
                "e.mechanism, e.parameters, e.detail, e.reason, e.flow_run_id, "
                "e.input_fingerprint, (SELECT string_agg(r.run_start || ':' || r.run_stop || ':' "
                "|| CAST(r.amount AS VARCHAR), ';' ORDER BY r.run_start) FROM step_runs r "
                "WHERE r.seq = e.seq) AS step_runs FROM entries e ORDER BY e.seq"
            ),
            "balances": (
                "SELECT user_id, domain, stream_id, notion, cap, spent, remaining, units, "
                "CAST(cap_quanta AS VARCHAR) AS cap_quanta, "
                "CAST(spent_quanta AS VARCHAR) AS spent_quanta FROM balances "
                "ORDER BY domain, user_id, stream_id"
            ),
            "releases": "SELECT * FROM release_summary ORDER BY first_seq",
            "denials": "SELECT * FROM denials ORDER BY seq",
        }
        if what not in queries:
            raise ParameterError(f"export table must be one of {', '.join(queries)}")

        def tx(con: duckdb.DuckDBPyConnection) -> pa.Table:
            return con.sql(queries[what]).to_arrow_table()

        tbl = self._transact(tx)
        out = Path(path)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(tbl, out)
        elif fmt == "csv":
            import pyarrow.csv as pcsv

            pcsv.write_csv(tbl, out)
        else:
            out.write_text(json.dumps(tbl.to_pylist(), default=str, ensure_ascii=False) + "\n",
                           encoding="utf-8")
        return tbl.num_rows

    # ------------------------------------------------------------------ verify

    def verify(self) -> VerifyReport:
        """Recompute the hash chain, its keyed seal, the key fingerprint and every balance.

        Returns:
            A report; ``ok`` is False and ``first_bad_seq``/``first_bad_entry_id``
            name the first bad entry when anything does not verify.
        """
        return self._transact(self._verify_tx)

    def verify_or_raise(self) -> VerifyReport:
        """Like `verify`, but raise `LedgerIntegrityError` (exit 4) when it fails."""
        rep = self.verify()
        if not rep.ok:
            raise LedgerIntegrityError(rep.message, seq=rep.first_bad_seq,
                                       entry_id=rep.first_bad_entry_id)
        return rep

    def _verify_tx(self, con: duckdb.DuckDBPyConnection) -> VerifyReport:
        """Verify column-wise in DuckDB; replay entry by entry only to name a problem."""
        if self._key_ok:
            try:
                fast = self._verify_fast(con)
            except duckdb.Error:  # e.g. an edited amount overflowing a sum: look closely
                fast = None
            if fast is not None:
                return fast
        return self._verify_entries(con)

    def _verify_fast(self, con: duckdb.DuckDBPyConnection) -> VerifyReport | None:  # noqa: C901
        """The whole check of `_verify_entries` as a few set-based queries.

        Returns the OK report only if every check `_verify_entries` makes passes
        (contiguous seqs, step runs matching their entries, prev_hash links, entry
        hashes, every balance replayed, head, seal, MACs, accounts); None as soon as
        anything might fail, and `_verify_entries` then names the first bad entry.
        Entries with control characters in a text column (JSON writes them as
        escapes) or an unusual timestamp are hashed by `canonical` itself; w-event
        accounts are replayed in Python (their window sums need the sweep).
        """
        domains = self._domains(con)
        row = first_row(con.execute(_VERIFY_SQL["chain"], [GENESIS_HASH]))
        if row is None:
            return None
        n, bad_seq, bad_prev, bad_hash, special, last_hash, bad_runs = row
        n = int(n)
        if bad_seq or bad_prev or bad_hash or bad_runs:
            return None
        if special:  # hash these entries with the reference encoder
            seq_tbl = pa.table({"seq": pa.array(special, pa.int64())})  # noqa: F841
            con.register("_pp_seqs", seq_tbl)
            try:
                columns = ", ".join(_ENTRY_COLUMNS)
                cur = con.execute(f"SELECT {columns} FROM entries "  # noqa: S608
                                  "WHERE seq IN (SELECT seq FROM _pp_seqs) ORDER BY seq")
                rows = [dict(zip(_ENTRY_COLUMNS, v, strict=True)) for v in cur.fetchall()]
            finally:
                con.unregister("_pp_seqs")
            runs_by_seq = self._runs_of(con, [int(r["seq"]) for r in rows])
            for e in rows:
                runs = runs_by_seq.get(int(e["seq"]), [])
                if entry_hash(e["prev_hash"], canonical(e, runs)) != e["hash"]:
                    return None
        bal = first_row(con.execute(_VERIFY_SQL["balances"]))
        if bal is None or any(bal):
            return None
        # w-event accounts: replay their entries (only theirs) as `_verify_entries` does.
        wevent_domains = [name for name, d in domains.items() if d["notion"] == "wevent"]
        spent: dict[tuple[str, str, str], int] = {}
        if wevent_domains:
            dom_tbl = pa.table({"domain": pa.array(wevent_domains, pa.string())})  # noqa: F841
            con.register("_pp_doms", dom_tbl)
            try:
                columns = ", ".join(_ENTRY_COLUMNS)
                cur = con.execute(f"SELECT {columns} FROM entries "  # noqa: S608
                                  "WHERE domain IN (SELECT domain FROM _pp_doms) "
                                  "AND user_id <> '' ORDER BY seq")
                rows = [dict(zip(_ENTRY_COLUMNS, v, strict=True)) for v in cur.fetchall()]
            finally:
                con.unregister("_pp_doms")
            runs_by_seq = self._runs_of(con, [int(r["seq"]) for r in rows]) if rows else {}
            wruns: dict[tuple[str, str, str], list[Run]] = {}
            for e in rows:
                if self._check_balance(e, runs_by_seq.get(int(e["seq"]), []), domains, spent,
                                       wruns):
                    return None
        acc = first_row(con.execute(_VERIFY_SQL["accounts"]))
        if acc is None or any(acc[:-1]):
            return None
        n_accounts = int(acc[-1])
        if spent:
            stored = {(u, d, s): int(sp) for u, d, s, sp in con.execute(
                "SELECT a.user_id, a.domain, a.stream_id, CAST(a.spent AS VARCHAR) FROM accounts a "
                "JOIN domains d ON d.domain = a.domain WHERE d.notion = 'wevent'").fetchall()}
            if any(stored.get(k) != v for k, v in spent.items()):
                return None
        head_seq, head_hash = self._head(con)
        seal = first_row(con.execute("SELECT seal FROM chain_head WHERE id = 1"))
        if head_seq != n or head_hash != (last_hash if n else GENESIS_HASH):
            return None
        if seal is None or seal[0] != keys.chain_seal(self._key, head_seq, head_hash):
            return None
        dom_cols = ", ".join(schema.DOMAIN_MAC_COLUMNS)
        for *r, mac in con.execute(f"SELECT {dom_cols}, mac FROM domains").fetchall():  # noqa: S608
            if mac != schema.domain_mac(self._key, tuple(r)):
                return None
        for rid, state, manifest, mac in con.execute(
            "SELECT release_id, state, manifest, mac FROM releases"
        ).fetchall():
            if mac != schema.release_mac(self._key, (rid, state, manifest)):
                return None
        return VerifyReport(True, n, None, f"ok: {n} entries, hash chain, seal, key fingerprint, "
                                           f"domain and release MACs and {n_accounts} account "
                                           "balances verified")

    def _verify_entries(self, con: duckdb.DuckDBPyConnection) -> VerifyReport:  # noqa: C901
        def bad(n: int, msg: str, seq: int | None = None, eid: str | None = None) -> VerifyReport:
            where = ""
            if seq is not None:
                where = f"entry seq {seq}" + (f" (entry_id {eid})" if eid else "") + ": "
            return VerifyReport(False, n, seq, f"ledger integrity check failed: {where}{msg}", eid)

        if not self._key_ok:
            return bad(0, f"the noise key {str(self.key_path)!r} does not match the fingerprint "
                          "stored in the ledger (replaced or edited key)")
        domains = self._domains(con)
        run_map: dict[int, list[tuple[str, str, str, str, int, int, int]]] = {}
        for seq, kind, u, d, s, a, b, q in con.execute(
            "SELECT seq, kind, user_id, domain, stream_id, run_start, run_stop, amount "
            "FROM step_runs ORDER BY seq, run_start, run_stop, amount"
        ).fetchall():
            run_map.setdefault(int(seq), []).append((kind, u, d, s, int(a), int(b), int(q)))
        columns = ", ".join(_ENTRY_COLUMNS)  # constant column names, no input
        cur = con.execute(f"SELECT {columns} FROM entries ORDER BY seq")  # noqa: S608
        prev = GENESIS_HASH
        expected = 1
        n = 0
        spent: dict[tuple[str, str, str], int] = {}
        wruns: dict[tuple[str, str, str], list[Run]] = {}
        for values in cur.fetchall():
            e = dict(zip(_ENTRY_COLUMNS, values, strict=True))
            seq, eid = int(e["seq"]), e["entry_id"]
            if seq != expected:
                if seq < expected:
                    return bad(n, "duplicate sequence number", seq, eid)
                return bad(n, f"entries seq {expected}..{seq - 1} are missing (deleted); "
                              f"the next entry is seq {seq} (entry_id {eid})", expected)
            rr = run_map.pop(seq, [])
            for kind, u, d, s, *_ in rr:
                if (kind, u, d, s) != (e["kind"], e["user_id"], e["domain"], e["stream_id"]):
                    return bad(n, "a step run does not match its entry", seq, eid)
            runs = [(a, b, q) for *_, a, b, q in rr]
            if e["prev_hash"] != prev:
                return bad(n, "prev_hash does not match the previous entry's hash "
                              "(entries swapped, inserted or edited)", seq, eid)
            if entry_hash(prev, canonical(e, runs)) != e["hash"]:
                return bad(n, "content does not match its hash (edited entry)", seq, eid)
            prev = e["hash"]
            expected += 1
            n += 1
            msg = self._check_balance(e, runs, domains, spent, wruns)
            if msg:
                return bad(n, msg, seq, eid)
        if run_map:
            orphan = min(run_map)
            return bad(n, f"step runs refer to entry seq {orphan}, which does not exist", orphan)
        head_seq, head_hash = self._head(con)
        seal = first_row(con.execute("SELECT seal FROM chain_head WHERE id = 1"))
        if head_seq != n or head_hash != prev:
            return bad(n, f"the chain head says {head_seq} entries ending in {head_hash[:12]}…, "
                          f"but the entries end at seq {n} (entries deleted from the end?)",
                       n + 1 if head_seq > n else None)
        if seal is None or seal[0] != keys.chain_seal(self._key, head_seq, head_hash):
            return bad(n, "the keyed seal over the chain head does not match (chain rewritten "
                          "without the noise key)")
        dom_cols = ", ".join(schema.DOMAIN_MAC_COLUMNS)
        for *row, mac in con.execute(f"SELECT {dom_cols}, mac FROM domains ORDER BY domain"  # noqa: S608
                                     ).fetchall():
            if mac != schema.domain_mac(self._key, tuple(row)):
                return bad(n, f"domain {row[0]!r}: its row (cap, notion, w or units) was changed "
                              "outside privpipe (keyed MAC does not match)")
        for rid, state, manifest, mac in con.execute(
            "SELECT release_id, state, manifest, mac FROM releases ORDER BY release_id"
        ).fetchall():
            if mac != schema.release_mac(self._key, (rid, state, manifest)):
                return bad(n, f"release {rid!r}: its state or manifest was changed outside "
                              "privpipe (keyed MAC does not match)")
        stored = {
            (u, d, s): (int(cap), int(sp))
            for u, d, s, cap, sp in con.execute(
                "SELECT user_id, domain, stream_id, cap, spent FROM accounts"
            ).fetchall()
        }
        for key, value in spent.items():
            if key not in stored:
                return bad(n, f"account {key!r} has entries but no accounts row")
            if stored[key][1] != value:
                return bad(n, f"account {key!r}: stored spent {stored[key][1]} quanta differs from "
                              f"{value} recomputed from the entries")
        for key, (cap, sp) in stored.items():
            if key not in spent and sp != 0:
                return bad(n, f"account {key!r} shows spent {sp} quanta without any entries")
            if key[1] not in domains:
                return bad(n, f"account {key!r} refers to an unknown domain")
            if cap != int(domains[key[1]]["cap"]):
                return bad(n, f"account {key!r}: its cap {cap} quanta differs from the domain's "
                              f"cap {int(domains[key[1]]['cap'])} (edited outside privpipe)")
        return VerifyReport(True, n, None, f"ok: {n} entries, hash chain, seal, key fingerprint, "
                                           f"domain and release MACs and {len(stored)} account "
                                           "balances verified")

    @staticmethod
    def _check_balance(
        e: dict[str, Any],
        runs: list[Run],
        domains: dict[str, dict[str, Any]],
        spent: dict[tuple[str, str, str], int],
        wruns: dict[tuple[str, str, str], list[Run]],
    ) -> str:
        """Replay one entry into the recomputed balances; return a problem or ''."""
        kind = e["kind"]
        if kind not in ("reserve", "settle", "refund", "deny", "close"):
            return f"unknown entry kind {kind!r}"
        if e["user_id"] == "":
            return "" if kind == "close" and int(e["amount"]) == 0 else "entry without a user"
        dom = domains.get(e["domain"])
        if dom is None:
            return f"unknown domain {e['domain']!r}"
        if e["notion"] != dom["notion"]:
            return f"notion {e['notion']!r} differs from domain notion {dom['notion']!r}"
        key = (e["user_id"], e["domain"], e["stream_id"])
        amount = int(e["amount"])
        if amount < 0:
            return "negative amount"
        before = spent.get(key, 0)
        if dom["notion"] == "wevent":
            if accounting.total(runs) != amount:
                return "amount differs from the sum of its step runs"
            hist = wruns.get(key, [])
            sign = _SIGN.get(kind, 0)
            if sign:
                hist = accounting.profile([*hist, *((a, b, sign * q) for a, b, q in runs)])
                wruns[key] = hist
                after = accounting.max_window(hist, int(dom["w"]))[0]
            else:
                after = before
        else:
            if runs:
                return "a gp/cgp entry has step runs"
            after = before + _SIGN.get(kind, 0) * amount
        spent[key] = after
        if after < 0:
            return "balance would become negative (refund without reservation)"
        bal = e["balance_after"]
        if bal is None or int(bal) != after:
            return f"recorded balance_after {bal} differs from the recomputed {after}"
        if kind == "reserve" and (e["cap"] is None or after > int(e["cap"])):
            return f"admitted although the balance {after} exceeds the cap {e['cap']}"
        return ""


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
