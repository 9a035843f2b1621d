"""`privpipe ledger serve`: one process owns the DuckDB ledger and serves its operations.

Transport: HTTPS only (``--tls-cert``/``--tls-key``); ``GET /v1/tables/<table>``
for exports (`flows.ledger_server_tables`); ``POST /v1/<operation>``
with a JSON body of keyword arguments (`ledger.remote_codec`), answered with
``{"result": ...}`` (200) or ``{"error": {"class", "message", "attrs"}}``:
400 a malformed message (unknown field, wrong type, unknown operation), 401 a
missing, unknown or expired token, 403 a role or release the client may not
use, 413 a body over `MAX_REQUEST_MB`, 422 the ledger refused the operation
(same error class and exit code as the embedded ledger), 500 a bug.

Clients (``--clients CLIENTS.toml``, re-read when it changes): one
``[[client]]`` table per credential with ``name``, ``role`` (``releaser``,
``auditor`` or ``admin``), ``token_sha256`` (hex SHA-256 of the bearer token;
the token itself is never stored) and optional ``expires`` (a TOML datetime,
UTC when it has no offset). The name is the actor recorded on every entry the
client's calls write.

Roles: an auditor reads (`READ_OPS`); a releaser also plans, reserves,
settles, closes and records its own releases, draws noise seeds for the
users admitted in its own release and the recheck keys of its chunks, and
reads/writes the stream watermarks (`RELEASER_OPS`); a release belongs to the
client whose credential first reserved it (the actor of its entries, so it
survives a restart); an admin may do everything, including policy changes
and migrations (`ADMIN_OPS`).

Published files (`flows.ledger_server_published`, `ledger.published`): the
ledger keeps a copy of each stream release's ``samples.parquet`` in its store
(``published/`` beside the ledger file), so a release on another host with
another output root continues it. ``PUT /v1/published/<release_id>/<name>``
streams the bytes in (releaser owning the release, or admin; at most
``--max-published-mb``; kept only if they are the file the release's settled
manifest names, by SHA-256, else 422 and nothing kept);
``GET /v1/published/<release_id>/<name>`` streams them out (any role; 404:
no copy kept); the client re-checks the digest. ``GET /v1/backup`` streams an
online, verified backup (`flows.ledger_server_backup`; admin or auditor, keys admin only).

Concurrency: the service holds one DuckDB instance of the ledger for its life
(`Ledger.hold`), so it owns the file: other processes opening it wait and then
get LedgerBusyError; read it through the service while it runs. Every ledger
operation is one DuckDB transaction. The operations that write are serialised
by one lock here (which also makes a release's ownership check and its write
atomic) and by the store. Each read runs on its own cursor in a transaction, so
it sees one consistent snapshot (DuckDB MVCC): the state committed before it
began, never half of a write in progress, and it neither waits for a write
nor makes one wait. `verify` is the exception: it compares the database with
the head counter file, which a write advances after its commit, so no write
commits while it runs (hence the `verify_every` limit). Each write checkpoints
before it answers; while a read older than it is open DuckDB refuses, and the
checkpoint runs when that read ends (or after the next write, or at shutdown).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import inspect
import json
import logging
import threading
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ledger import remote_codec as codec
from ledger.checks import check_id
from ledger.errors import LedgerBusyError
from ledger.filters import Filter
from ledger.ledger import Ledger
from ledger.records import Request, Settlement
from ledger.remote import LedgerAccessError
from schemas.errors import ParameterError, PrivpipeError
from schemas.policy import Policy

MAX_REQUEST_MB = 512
VERIFY_EVERY = 60.0
"""Default least interval, in seconds, between two whole-chain verifications a non-admin
client can make the service run (`LedgerService.verify`)."""
ROLES = ("releaser", "auditor", "admin")
READ_OPS = frozenset({
    "whoami", "schema_version", "head", "kept_head_problem", "domains", "domain",
    "policy_history", "release", "entry_range", "balances", "near_cap_users", "history",
    "releases", "denials", "charge_summary", "window_charge_summary", "balance_summary",
    "release_charges", "verify"})
OWNED_OPS = frozenset({"reserve", "settle", "close", "record_release", "noise_seeds",
                       "recheck_keys"})
RELEASER_OPS = READ_OPS | OWNED_OPS | {"plan", "check_binding", "input_tag",
                                       "stream_ranges", "range_fingerprint",
                                       "range_fingerprints"}
ADMIN_OPS = RELEASER_OPS | {"apply_policy", "migrate"}
WRITE_OPS = frozenset({"reserve", "settle", "close", "record_release", "stream_ranges",
                       "apply_policy", "migrate"})
ALLOWED = {"auditor": READ_OPS, "releaser": RELEASER_OPS, "admin": ADMIN_OPS}
log = logging.getLogger("privpipe.ledger_server")


@dataclass(frozen=True)
class Client:
    """One credential of the clients file."""

    name: str
    role: str
    token_sha256: str
    expires: datetime | None = None


def load_clients(path: Path) -> list[Client]:
    """The clients of a clients file, checked.

    Raises:
        ParameterError: unreadable TOML, a client without name/role/hash, an
            unknown role or key, a hash that is not 64 hex digits, a duplicate name.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ParameterError(f"cannot read the clients file {str(path)!r}: {err}") from None
    rows = data.get("client", [])
    if set(data) - {"client"} or not isinstance(rows, list):
        raise ParameterError(f"{str(path)!r}: a clients file holds [[client]] tables only")
    out: list[Client] = []
    for i, row in enumerate(rows, 1):
        where = f"{str(path)!r}, client {i}"
        if not isinstance(row, dict) or set(row) - {"name", "role", "token_sha256", "expires"}:
            raise ParameterError(f"{where}: keys are name, role, token_sha256, expires")
        name, role, digest = row.get("name"), row.get("role"), row.get("token_sha256")
        check_id(name, f"{where}: name")
        if role not in ROLES:
            raise ParameterError(f"{where}: role must be one of {', '.join(ROLES)}")
        if not (isinstance(digest, str) and len(digest) == 64
                and all(c in "0123456789abcdef" for c in digest)):
            raise ParameterError(f"{where}: token_sha256 must be 64 lower-case hex digits")
        expires = row.get("expires")
        if expires is not None and not isinstance(expires, datetime):
            raise ParameterError(f"{where}: expires must be a TOML datetime")
        if expires is not None and expires.tzinfo is None:
            expires = expires.replace(tzinfo=UTC)
        if any(c.name == name for c in out):
            raise ParameterError(f"{where}: duplicate client name {name!r}")
        out.append(Client(name, role, digest, expires))
    return out


def _error(status: int, err: BaseException) -> tuple[int, bytes]:
    attrs: dict[str, Any] = {}
    for k, v in vars(err).items():
        try:
            codec.encode(v)
        except codec.CodecError:
            continue
        attrs[k] = v
    body = {"error": {"class": type(err).__name__, "message": str(err), "attrs": attrs}}
    return status, codec.dumps(body)


def _check_args(op: str, kwargs: dict[str, Any]) -> None:
    """Refuse arguments of the wrong record type before the ledger sees them (400)."""
    checks = {"requests": Request, "settlements": Settlement}
    for key, cls in checks.items():
        if key in kwargs and not (isinstance(kwargs[key], list)
                                  and set(map(type, kwargs[key])) <= {cls}):
            raise codec.CodecError(f"{op}: {key} must be a list of {cls.__name__}")
    if kwargs.get("where") is not None and not isinstance(kwargs["where"], Filter):
        raise codec.CodecError(f"{op}: where must be a Filter")
    if kwargs.get("policy_") is not None and not isinstance(kwargs["policy_"], Policy):
        raise codec.CodecError(f"{op}: policy_ must be a Policy")
    if "chunks" in kwargs and not (isinstance(kwargs["chunks"], list) and all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in kwargs["chunks"])):
        raise codec.CodecError(f"{op}: chunks must be a list of chunk indices (ints >= 0)")
    for key in ("users", "fingerprints", "user_ids", "stream_ids"):
        if key in kwargs and not (isinstance(kwargs[key], list)
                                  and all(isinstance(x, str) for x in kwargs[key])):
            raise codec.CodecError(f"{op}: {key} must be a list of strings")
    if op == "range_fingerprints":
        _check_fingerprint_args(op, kwargs)
    elif _holds_array(kwargs):
        raise codec.CodecError(f"{op}: only range_fingerprints takes $i8/$f8 arrays")


def _holds_array(value: Any, depth: int = 0) -> bool:
    """Whether a decoded argument holds a numpy array anywhere (records' fields included)."""
    if isinstance(value, np.ndarray):
        return True
    if depth > 64:
        return False  # the codec refuses deeper messages
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = (getattr(value, f.name) for f in dataclasses.fields(value))
    else:
        return False
    return any(_holds_array(v, depth + 1) for v in items)


def _check_fingerprint_args(op: str, kwargs: dict[str, Any]) -> None:
    """offsets: a list of ints; steps and values: ``$i8`` and ``$f8`` arrays (the codec)."""
    offsets = kwargs.get("offsets")
    if not (isinstance(offsets, list) and all(type(x) is int for x in offsets)):
        raise codec.CodecError(f"{op}: offsets must be a list of ints")
    for key, tag in (("steps", "$i8"), ("values", "$f8")):
        arr = kwargs.get(key)
        if not (isinstance(arr, np.ndarray) and arr.ndim == 1
                and arr.dtype == codec.ARRAY_DTYPES[tag]):
            raise codec.CodecError(f"{op}: {key} must be a {tag} array")


class LedgerService:
    """The served ledger: authentication, roles, release ownership, one lock for writes."""

    def __init__(self, ledger_path: Path, clients_path: Path, *,
                 verify_every: float = VERIFY_EVERY):
        """Open the ledger (as its owner: keys required) and read the clients file.

        `verify_every`: the least seconds between two whole-chain verifications run for
        releasers and auditors (`verify`); 0 runs every one asked for.

        Raises:
            LedgerOpenError: the ledger or its keys cannot be opened.
            ParameterError: a bad clients file.
        """
        self.path, self.clients_path = Path(ledger_path), Path(clients_path)
        self._ledgers: dict[str, Ledger] = {}
        self._base = Ledger(self.path)
        self._base.hold()  # one DuckDB instance for the service's life: snapshot reads
        self._write = threading.Lock()
        self._guard = threading.Lock()
        self._owners: dict[str, str] = {}
        self._clients: tuple[float, list[Client]] = (-1.0, [])
        self.verify_every = float(verify_every)
        self._verifying = threading.Lock()
        self._verified: tuple[Any, Any, float] | None = None  # (key, report, when)
        self.clients()

    def clients(self) -> list[Client]:
        """The clients file's credentials, re-read when its modification time changes."""
        mtime = self.clients_path.stat().st_mtime
        with self._guard:
            if mtime != self._clients[0]:
                self._clients = (mtime, load_clients(self.clients_path))
            return self._clients[1]

    def authenticate(self, header: str) -> Client:
        """The client whose token the ``Authorization: Bearer`` header carries.

        Raises:
            LedgerAccessError: no bearer token, an unknown one, or an expired credential.
        """
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token:
            raise LedgerAccessError("the ledger service needs a bearer token "
                                    "(PRIVPIPE_LEDGER_TOKEN or PRIVPIPE_LEDGER_TOKEN_FILE)")
        digest = hashlib.sha256(token.strip().encode("utf-8")).hexdigest()
        found = None
        for c in self.clients():  # compare with every entry: no early exit to time
            if hmac.compare_digest(c.token_sha256, digest):
                found = c
        if found is None:
            raise LedgerAccessError("the ledger service does not know this token")
        if found.expires is not None and found.expires <= datetime.now(UTC):
            raise LedgerAccessError(f"the credential {found.name!r} expired on "
                                    f"{found.expires.isoformat()}")
        return found

    def close(self) -> None:
        """Checkpoint and close the ledger's held DuckDB instance (at shutdown)."""
        self._base.unhold()

    def ledger_for(self, client: Client) -> Ledger:
        """The ledger with the client's name as the actor of what it writes (shared instance)."""
        with self._guard:
            led = self._ledgers.get(client.name)
            if led is None:
                led = self._ledgers[client.name] = self._base.with_actor(client.name)
            return led

    def _owner(self, release_id: str) -> str | None:
        """The client that reserved a release (the actor of its first entry), None if none did.

        A lookup of that release's first reserve or deny entry, remembered (an owner
        never changes).
        """
        if release_id not in self._owners:
            owner = self._base.release_owner(release_id)
            if owner is None:
                return None
            self._owners[release_id] = owner
        return self._owners[release_id]

    def _check_owner(self, client: Client, op: str, kwargs: dict[str, Any]) -> None:
        if client.role == "admin" or op not in OWNED_OPS:
            return
        rid = kwargs.get("release_id")
        check_id(rid, "release_id")
        owner = self._owner(rid)
        if owner is not None and owner != client.name:
            raise LedgerAccessError(f"release {rid!r} belongs to another client ({owner!r}); "
                                    f"{op} on it needs that client or the admin role")
        if op == "recheck_keys" and owner != client.name:
            raise LedgerAccessError(f"recheck keys are given only to the client that reserved "
                                    f"release {rid!r}")
        if op == "noise_seeds":
            if owner is None or not self._base.all_admitted(rid, kwargs["users"]):
                raise LedgerAccessError(f"noise seeds are given only for users admitted in "
                                        f"release {rid!r}, and only to its releaser")

    def _note(self, client: Client, op: str, kwargs: dict[str, Any], result: Any) -> None:
        if op == "reserve":
            self._owners.setdefault(kwargs["release_id"], client.name)

    def verify(self, client: Client, led: Ledger, kwargs: dict[str, Any]) -> Any:
        """A whole-chain verification for a client, at most one at a time.

        A verification reads the whole chain while holding the ledger, so every write
        waits for it (22.6 s at 10^6 users, benchmarks/results/audit_serve.md): a
        non-admin client asking again and again would stop every release. So for
        releasers and auditors: the same question at the same signed head is answered
        from the last verification (same chain, same answer); a new one runs at most
        every `verify_every` seconds and never beside another. Admins are not limited.

        Raises:
            LedgerBusyError: a verification is running, or the last one was too recent
                (the message says when to ask again); exit 2, retryable.
        """
        if client.role == "admin":
            return led.verify(**kwargs)
        head = led.head()
        key = (head.seq, head.hash, codec.dumps(kwargs))
        if not self._verifying.acquire(blocking=False):
            raise LedgerBusyError("the ledger service is verifying the chain for another "
                                  "client; ask again when it ends")
        try:
            last = self._verified
            if last is not None and last[0] == key:
                return last[1]
            ago = time.monotonic() - last[2] if last is not None else None
            if ago is not None and ago < self.verify_every:
                raise LedgerBusyError(
                    f"the ledger service verified the chain {ago:.0f} s ago (up to entry "
                    f"{last[0][0]:,}) and runs a new verification at most every "
                    f"{self.verify_every:g} s, so that releases are not held up; ask again "
                    f"in {self.verify_every - ago:.0f} s")
            report = led.verify(**kwargs)
            self._verified = (key, report, time.monotonic())
            return report
        finally:
            self._verifying.release()

    def call(self, client: Client, op: str, kwargs: dict[str, Any]) -> Any:
        """Run one operation for an authenticated client (role and ownership checked).

        Raises:
            LedgerAccessError: the role or the release's owner refuses it.
            CodecError: unknown operation or arguments of the wrong type or name.
            PrivpipeError: what the embedded ledger raises for the same call.
        """
        if op not in ADMIN_OPS:
            raise codec.CodecError(f"unknown ledger operation {op!r}")
        if op not in ALLOWED[client.role]:
            need = "releaser or admin" if op in RELEASER_OPS else "admin"
            raise LedgerAccessError(f"{op} needs the {need} role; the credential "
                                    f"{client.name!r} has the {client.role} role")
        _check_args(op, kwargs)
        if op == "whoami":
            return {"name": client.name, "role": client.role}
        led = self.ledger_for(client)
        if op == "schema_version":
            return led.schema_version
        method = getattr(led, op)
        try:
            inspect.signature(method).bind(**kwargs)
        except TypeError as err:
            raise codec.CodecError(f"{op}: {err}") from None
        if op == "verify":
            return self.verify(client, led, kwargs)
        if op not in WRITE_OPS and op not in OWNED_OPS:
            return method(**kwargs)
        with self._write:
            self._check_owner(client, op, kwargs)
            result = method(**kwargs)
            self._note(client, op, kwargs, result)
            return result

    def handle(self, header: str, op: str, body: bytes) -> tuple[int, bytes]:
        """(status, JSON body) of one request (see the module docstring for statuses)."""
        try:
            client = self.authenticate(header)
        except LedgerAccessError as err:
            return _error(401, err)
        try:
            kwargs = codec.loads(body) if body else {}
            if not isinstance(kwargs, dict):
                raise codec.CodecError("the body is a JSON object of keyword arguments")
            result = self.call(client, op, kwargs)
            return 200, codec.dumps({"result": result})
        except codec.CodecError as err:
            return _error(400, err)
        except LedgerAccessError as err:
            return _error(403, err)
        except PrivpipeError as err:
            return _error(422, err)
        except Exception as err:  # noqa: BLE001 - a bug: logged, answered 500, server lives
            log.exception("ledger service: %s failed", op)
            return _error(500, RuntimeError(f"internal error in the ledger service "
                                            f"({type(err).__name__}); see its log"))


def make_app(service: LedgerService, *, max_request: int = MAX_REQUEST_MB * 2**20,
             threads: int = 8, max_published: int | None = None) -> Any:
    """The service's Starlette application (`threads` operations run at once).

    `max_published`: the largest published file kept (bytes; default
    `flows.ledger_server_published.MAX_PUBLISHED_MB`).
    """
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import Request as HttpRequest
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    limiter = anyio.CapacityLimiter(threads)

    async def operation(request: HttpRequest) -> Response:
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) > max_request:
            return JSONResponse({"error": {"class": "CodecError", "attrs": {}, "message":
                                           f"a request needs a content-length of at most "
                                           f"{max_request} bytes"}}, status_code=413)
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > max_request:
                return JSONResponse({"error": {"class": "CodecError", "attrs": {},
                                               "message": "request too large"}},
                                    status_code=413)
        status, answer = await anyio.to_thread.run_sync(
            service.handle, request.headers.get("authorization", ""),
            request.path_params["op"], bytes(body), limiter=limiter)
        return Response(answer, status_code=status, media_type="application/json")

    async def health(request: HttpRequest) -> Response:
        return Response(json.dumps({"ledger": 1}), media_type="application/json")

    async def tables(request: HttpRequest) -> Response:
        from flows.ledger_server_tables import tables_answer

        status, answer, media = await anyio.to_thread.run_sync(
            tables_answer, service, request.headers.get("authorization", ""),
            request.path_params["what"], limiter=limiter)
        return Response(answer, status_code=status, media_type=media)

    from flows.ledger_server_backup import backup_routes
    from flows.ledger_server_published import MAX_PUBLISHED_MB, published_routes

    files = published_routes(service, limiter,
                             max_bytes=max_published or MAX_PUBLISHED_MB * 2**20)
    files += backup_routes(service, limiter)  # GET /v1/backup (flows.ledger_server_backup)
    return Starlette(routes=[Route("/v1/health", health, methods=["GET"]), *files,
                             Route("/v1/tables/{what}", tables, methods=["GET"]),
                             Route("/v1/{op}", operation, methods=["POST"])])


def serve_ledger(ledger: Path, listen: str, *, tls_cert: Path, tls_key: Path,
                 clients: Path, verify_every: float = VERIFY_EVERY,
                 max_published_mb: int | None = None) -> None:
    """Open the ledger and serve it over HTTPS until interrupted (module docstring).

    Raises:
        ParameterError: a bad --listen, missing certificate or key files, a bad
            clients file.
        LedgerOpenError: the ledger or its keys cannot be opened.
    """
    from flows.http_serve import serve_app
    from flows.worker_address import parse_listen

    host, port = parse_listen(listen)
    for flag, f in (("--tls-cert", tls_cert), ("--tls-key", tls_key), ("--clients", clients)):
        if not Path(f).is_file():
            raise ParameterError(f"{flag} {str(f)!r} is not a readable file")
    if not verify_every >= 0:
        raise ParameterError(f"--verify-every must be >= 0 seconds; got {verify_every}")
    service = LedgerService(ledger, clients, verify_every=verify_every)
    cap = None if max_published_mb is None else int(max_published_mb) * 2**20
    serve_app(make_app(service, max_published=cap), host=host, port=port,
              on_stop=service.close, log_level="warning", access_log=False,
              ssl_certfile=str(tls_cert), ssl_keyfile=str(tls_key))
