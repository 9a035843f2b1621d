"""`RemoteLedger`: the ledger operations of a `privpipe ledger serve` service, over HTTPS.

A `RemoteLedger` has the method names and return types of `ledger.Ledger` for
the operations the release path, the Python API and the CLI's read commands
use; each call is one ``POST /v1/<operation>`` with a JSON body
(`ledger.remote_codec`) and one transaction on the server. `open_ledger`
returns a `Ledger` for a path and a `RemoteLedger` for an ``https://`` URL.

Client configuration (environment):

- ``PRIVPIPE_LEDGER_TOKEN`` or ``PRIVPIPE_LEDGER_TOKEN_FILE``: the bearer
  token ``privpipe ledger serve-token`` printed (required);
- ``PRIVPIPE_LEDGER_CA``: a PEM file of the CA that signed the server's
  certificate (default: the system's trust store); the host name is checked.

Guarantees: TLS only (an ``http://`` URL is refused, exit 2); a refused
credential (401) or role (403) raises `LedgerAccessError` (exit 2) naming the
reason; the server's errors are raised as the same privpipe error classes
(same exit codes) with the server's message. A connection error (refused,
reset, timed out before an answer) is retried with backoff for
``PRIVPIPE_LEDGER_RETRY_SECONDS`` (default 60): every operation is
idempotent on the ledger (a replayed reserve returns the recorded decisions,
a replayed settle or close writes nothing), so a retry never charges twice.
Uses the standard library only.
"""

from __future__ import annotations

import http.client
import os
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ledger import errors as ledger_errors
from ledger import heads, summaries, watermark
from ledger import remote_codec as codec
from ledger.filters import Filter
from ledger.records import Request, ReserveResult, Settlement, SignedHead, VerifyReport
from schemas import errors as schema_errors
from schemas.errors import BadInputError, ParameterError, PrivpipeError
from schemas.policy import Domain, Policy

TOKEN_ENV, TOKEN_FILE_ENV, CA_ENV = ("PRIVPIPE_LEDGER_TOKEN", "PRIVPIPE_LEDGER_TOKEN_FILE",
                                     "PRIVPIPE_LEDGER_CA")
RETRY_ENV = "PRIVPIPE_LEDGER_RETRY_SECONDS"
T = TypeVar("T")


class LedgerAccessError(BadInputError):
    """The ledger service refused the credential (401) or its role (403); exit 2."""


def is_url(target: str | os.PathLike[str] | None) -> bool:
    """Whether a ``--ledger`` value names a service (``https://``/``http://``) not a file.

    A URL that passed through `pathlib.Path` (``https:/host:port``) counts too.
    """
    text = str(target or "")
    return text.startswith(("https:/", "http:/"))


def as_target(target: str | os.PathLike[str]) -> str | Path:
    """A ``--ledger`` value as a URL string (repairing ``Path``'s ``https:/``) or a Path."""
    text = str(target)
    for scheme in ("https:", "http:"):
        if text.startswith(scheme + "/") and not text.startswith(scheme + "//"):
            return scheme + "/" + text[len(scheme):]
        if text.startswith(scheme + "//"):
            return text
    return Path(target)


def parse_url(url: str) -> tuple[str, int]:
    """(host, port) of an ``https://host:port`` ledger URL.

    Raises:
        ParameterError: not https (plain http is refused), or no host.
    """
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise ParameterError(f"the ledger service must be reached over https://, not "
                             f"{parts.scheme or 'no scheme'}:// ({url!r}); plain HTTP is "
                             "refused")
    if not parts.hostname or parts.path not in ("", "/") or parts.query or parts.username:
        raise ParameterError(f"a ledger URL is https://HOST:PORT, got {url!r}")
    return parts.hostname, parts.port or 443


def load_token() -> str:
    """The bearer token from ``PRIVPIPE_LEDGER_TOKEN`` or ``PRIVPIPE_LEDGER_TOKEN_FILE``.

    Raises:
        LedgerAccessError: neither is set.
        ParameterError: the file cannot be read, is empty, or other users can read
            or replace it (`ledger.keys.read_token_file`).
    """
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    path = os.environ.get(TOKEN_FILE_ENV, "").strip()
    if not path:
        raise LedgerAccessError(f"a ledger service needs a credential: set {TOKEN_ENV} or "
                                f"{TOKEN_FILE_ENV} (`privpipe ledger serve-token` makes one)")
    from ledger.keys import read_token_file

    return read_token_file(path, TOKEN_FILE_ENV)


def _error_classes() -> dict[str, type[PrivpipeError]]:
    out: dict[str, type[PrivpipeError]] = {"LedgerAccessError": LedgerAccessError,
                                           "CodecError": codec.CodecError,
                                           "StreamContinuityError":
                                               watermark.StreamContinuityError}
    for mod in (schema_errors, ledger_errors):
        for name, obj in vars(mod).items():
            if isinstance(obj, type) and issubclass(obj, PrivpipeError):
                out[name] = obj
    return out


def rebuild_error(name: str, message: str, attrs: dict[str, Any]) -> PrivpipeError:
    """The privpipe error a service answered with, as the same class (same exit code)."""
    cls = _error_classes().get(name, PrivpipeError)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    for k, v in attrs.items():
        setattr(err, k, v)
    return err


class _Transport:
    """One keep-alive HTTPS connection per thread to the service, with retries."""

    def __init__(self, url: str, token: str, ca: str | None, retry_seconds: float):
        self.host, self.port = parse_url(url)
        self.auth = f"Bearer {token}"
        try:
            self.context = ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError) as err:
            raise ParameterError(f"cannot load {CA_ENV} {ca!r}: {err}") from None
        self.retry_seconds = retry_seconds
        self._local = threading.local()

    def _new(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                           timeout=600)

    def _connection(self) -> http.client.HTTPSConnection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = self._new()
        return con

    def _drop(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
        self._local.con = None

    def post(self, op: str, body: bytes) -> tuple[int, bytes]:
        """(status, body) of ``POST /v1/<op>`` (`request`)."""
        return self.request("POST", f"/v1/{op}", body)

    def request(self, method: str, route: str, body: bytes | None = None
                ) -> tuple[int, bytes]:
        """(status, body) of one request on this thread's keep-alive connection (`retrying`)."""
        def call(con: http.client.HTTPSConnection) -> tuple[int, bytes]:
            con.request(method, route, body=body, headers={
                "Authorization": self.auth, "Content-Type": "application/json"})
            resp = con.getresponse()
            return resp.status, resp.read()

        return self.retrying(call)

    def retrying(self, call: Callable[[http.client.HTTPSConnection], T], *,
                 fresh: bool = False) -> T:
        """`call` on a connection, retried on connection errors until the deadline.

        The connection is this thread's keep-alive one (dropped after an error), or
        with `fresh` a new one closed after the call (a streamed body or answer).

        Raises:
            LedgerAccessError: the server's certificate is not trusted.
            LedgerBusyError: no connection until the deadline.
        """
        deadline, attempt = time.monotonic() + self.retry_seconds, 0
        while True:
            con = self._new() if fresh else self._connection()
            try:
                return call(con)
            except ssl.SSLCertVerificationError as err:
                if not fresh:
                    self._drop()
                raise LedgerAccessError(
                    f"the ledger service https://{self.host}:{self.port} presented a "
                    f"certificate this client does not trust ({err.verify_message}); set "
                    f"{CA_ENV} to the CA's PEM file") from None
            except (OSError, http.client.HTTPException) as err:
                if not fresh:
                    self._drop()
                if time.monotonic() >= deadline:
                    raise ledger_errors.LedgerBusyError(
                        f"the ledger service https://{self.host}:{self.port} did not answer "
                        f"for {self.retry_seconds:g} s ({type(err).__name__}: {err}); "
                        "run the command again when it is up (it is idempotent)") from None
                time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))
                attempt += 1
            finally:
                if fresh:
                    con.close()


class RemoteLedger:
    """A ledger served by ``privpipe ledger serve``, with the methods of `Ledger`.

    Holds no state but the connection settings; safe to share between threads
    (one connection per thread). See the module docstring for configuration
    and guarantees.
    """

    def __init__(self, url: str, *, token: str | None = None, ca: str | None = None,
                 retry_seconds: float | None = None):
        """Check the URL and load the credential (nothing is sent yet).

        Raises:
            ParameterError: not an https URL; an unreadable CA file.
            LedgerAccessError: no credential configured.
        """
        self.path = url.rstrip("/")
        parse_url(self.path)
        ca = ca if ca is not None else (os.environ.get(CA_ENV) or None)
        retry = (float(os.environ.get(RETRY_ENV, "60")) if retry_seconds is None
                 else float(retry_seconds))
        self._http = _Transport(self.path, token or load_token(), ca, retry)
        self.auditor = False

    def __repr__(self) -> str:
        return f"RemoteLedger({self.path!r})"

    @property
    def key_path(self) -> Path:
        """Not available: the noise key stays with the service (`recheck_keys`, `noise_seeds`).

        Raises:
            ParameterError: always.
        """
        raise ParameterError("the noise key stays with the ledger service; what a flow needs "
                             "of it comes through the service (noise_seeds, recheck_keys)")

    def _call(self, op: str, **kwargs: Any) -> Any:
        status, body = self._http.post(op, codec.dumps(kwargs))
        try:
            answer = codec.loads(body)
        except codec.CodecError:
            answer = None
        if status == 200 and isinstance(answer, dict) and "result" in answer:
            return answer["result"]
        self._raise(status, body, op, answer)

    @staticmethod
    def _raise(status: int, body: bytes, op: str, answer: Any = None) -> None:
        """Raise the privpipe error of a service's error answer (same class, same exit code).

        Raises:
            PrivpipeError: always (`LedgerInternalError` for an answer without one).
        """
        if answer is None:
            try:
                answer = codec.loads(body)
            except codec.CodecError:
                answer = None
        err = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(err, dict):
            raise ledger_errors.LedgerInternalError(
                f"the ledger service answered {op} with HTTP {status} and no privpipe error")
        raise rebuild_error(str(err.get("class")), str(err.get("message")),
                            err.get("attrs") or {})

    # --------------------------------------------------------------- metadata / policy

    @property
    def schema_version(self) -> int:
        """The schema version of the served ledger file."""
        return int(self._call("schema_version"))

    def whoami(self) -> dict[str, str]:
        """This credential's name (the actor recorded on its entries) and role."""
        return dict(self._call("whoami"))

    def head(self) -> SignedHead:
        """The current signed chain head (`Ledger.head`)."""
        return self._call("head")

    def kept_head_problem(self, where: str, kept: SignedHead | heads.PlainHead) -> str | None:
        """Why a kept head is not one this ledger's key signed (`Ledger.kept_head_problem`)."""
        return self._call("kept_head_problem", where=where, kept=kept)

    def checkpoint(self, path: str | os.PathLike[str]) -> SignedHead:
        """Write the served ledger's signed head to a new local file (`Ledger.checkpoint`)."""
        from ledger.storage import now

        h = self.head()
        heads.write_checkpoint(path, h, now())
        return h

    def apply_policy(self, policy_: Policy, reason: str = "") -> list[str]:
        """Create or update domains (`Ledger.apply_policy`); admin role."""
        return self._call("apply_policy", policy_=policy_, reason=reason)

    def migrate(self, policy_: Policy | None = None) -> list[str]:
        """Upgrade the served ledger (`Ledger.migrate`); admin role."""
        return self._call("migrate", policy_=policy_)

    def domains(self) -> list[dict[str, Any]]:
        """The ledger's domains (`Ledger.domains`)."""
        return self._call("domains")

    def domain(self, name: str) -> Domain:
        """One domain's complete definition (`Ledger.domain`)."""
        return self._call("domain", name=name)

    def policy_history(self, domain: str | None = None, *, where: Filter | None = None
                       ) -> list[dict[str, Any]]:
        """Every policy change (`Ledger.policy_history`)."""
        return self._call("policy_history", domain=domain, where=where)

    # --------------------------------------------------------------- reserve / settle

    def reserve(self, release_id: str, requests: Sequence[Request], *, mechanism: str,
                parameters: dict[str, Any], flow_run_id: str | None = None,
                input_fingerprint: str | None = None) -> ReserveResult:
        """Reserve budget, one transaction on the server (`Ledger.reserve`); replay-safe."""
        return self._call("reserve", release_id=release_id, requests=list(requests),
                          mechanism=mechanism, parameters=parameters,
                          flow_run_id=flow_run_id, input_fingerprint=input_fingerprint)

    def plan(self, release_id: str, requests: Sequence[Request], *, mechanism: str = "plan",
             parameters: dict[str, Any] | None = None,
             input_fingerprint: str | None = None) -> ReserveResult:
        """The decisions reserve would make now, writing nothing (`Ledger.plan`)."""
        return self._call("plan", release_id=release_id, requests=list(requests),
                          mechanism=mechanism, parameters=parameters,
                          input_fingerprint=input_fingerprint)

    def check_binding(self, release_id: str, input_fingerprint: str | None,
                      parameters: dict[str, Any]) -> None:
        """Refuse a release id bound to another input or parameters (`Ledger.check_binding`)."""
        self._call("check_binding", release_id=release_id,
                   input_fingerprint=input_fingerprint, parameters=parameters)

    def settle(self, release_id: str, settlements: Sequence[Settlement], *,
               input_fingerprint: str | None = None,
               parameters: dict[str, Any] | None = None) -> None:
        """Record actual costs and refunds (`Ledger.settle`); a replay writes nothing."""
        self._call("settle", release_id=release_id, settlements=list(settlements),
                   input_fingerprint=input_fingerprint, parameters=parameters)

    def close(self, release_id: str, reason: str) -> None:
        """Close a release, refunding its unsettled reservations (`Ledger.close`)."""
        self._call("close", release_id=release_id, reason=reason)

    def record_release(self, release_id: str, manifest: dict[str, Any], state: str) -> None:
        """Store a release's manifest and state (`Ledger.record_release`)."""
        self._call("record_release", release_id=release_id, manifest=manifest, state=state)

    def put_published(self, release_id: str, name: str,
                      data: bytes | str | os.PathLike[str]) -> dict[str, Any]:
        """Stream a published file to the service's store (`Ledger.put_published`)."""
        from ledger import remote_published

        return remote_published.upload(self._http, release_id, name, data)

    def published(self, release_id: str, name: str, to: str | os.PathLike[str]) -> Path:
        """Download a published file, checked against its manifest (`Ledger.published`)."""
        from ledger import published, remote_published

        expected = published.expected_sha256(self.release(release_id), release_id, name)
        return remote_published.download(self._http, release_id, name, expected, Path(to))

    def release(self, release_id: str) -> dict[str, Any] | None:
        """A release's record or None (`Ledger.release`)."""
        return self._call("release", release_id=release_id)

    def entry_range(self, release_id: str) -> tuple[int, int] | None:
        """(first_seq, last_seq) of a release's entries (`Ledger.entry_range`)."""
        return self._call("entry_range", release_id=release_id)

    def input_tag(self, content_fingerprint: str) -> str:
        """The keyed input fingerprint (`Ledger.input_tag`); releaser role."""
        return self._call("input_tag", content_fingerprint=content_fingerprint)

    def noise_seeds(self, release_id: str, users: Sequence[str], fingerprints: Sequence[str],
                    parameters: dict[str, Any]) -> dict[str, int]:
        """Noise seeds of users admitted in this client's own release (`Ledger.noise_seeds`)."""
        return self._call("noise_seeds", release_id=release_id, users=list(users),
                          fingerprints=list(fingerprints), parameters=parameters)

    def recheck_keys(self, release_id: str, chunks: Sequence[int]) -> list[str]:
        """The recheck sample keys of a release's chunks (`Ledger.recheck_keys`); its owner."""
        return self._call("recheck_keys", release_id=release_id, chunks=[int(c) for c in chunks])

    def stream_ranges(self, domain: str, keys_: Iterable[tuple[str, str]]
                      ) -> dict[tuple[str, str], list[watermark.StreamRange]]:
        """The released ranges of streams (`Ledger.stream_ranges`)."""
        return self._call("stream_ranges", domain=domain, keys_=[tuple(k) for k in keys_])

    def range_fingerprint(self, user_id: str, domain: str, stream_id: str, steps: Any,
                          values: Any) -> str:
        """Keyed fingerprint of a stream range (`Ledger.range_fingerprint`)."""
        import numpy as np

        return self._call("range_fingerprint", user_id=user_id, domain=domain,
                          stream_id=stream_id, steps=np.asarray(steps).tolist(),
                          values=np.asarray(values).tolist())

    def range_fingerprints(self, domain: str, user_ids: Sequence[str], stream_ids: Sequence[str],
                           steps: Any, values: Any, offsets: Sequence[int]) -> list[str]:
        """Keyed fingerprints of many stream ranges in one call (`Ledger.range_fingerprints`)."""
        import numpy as np

        return self._call("range_fingerprints", domain=domain, user_ids=list(user_ids),
                          stream_ids=list(stream_ids),
                          steps=np.ascontiguousarray(steps, dtype="<i8"),
                          values=np.ascontiguousarray(values, dtype="<f8"),
                          offsets=[int(o) for o in offsets])

    # --------------------------------------------------------------- queries

    def balances(self, domain: str | None = None, *, where: Filter | None = None
                 ) -> list[dict[str, Any]]:
        """Per-account balances, exact (`Ledger.balances`)."""
        return self._call("balances", domain=domain, where=where)

    def near_cap_users(self, release_id: str, domain: str) -> int:
        """Users of the release near their cap (`Ledger.near_cap_users`)."""
        return self._call("near_cap_users", release_id=release_id, domain=domain)

    def history(self, user_id: str | None = None, domain: str | None = None, *,
                where: Filter | None = None) -> list[dict[str, Any]]:
        """Account entries in seq order (`Ledger.history`)."""
        return self._call("history", user_id=user_id, domain=domain, where=where)

    def releases(self, where: Filter | None = None) -> list[dict[str, Any]]:
        """One row per release and domain (`Ledger.releases`)."""
        return self._call("releases", where=where)

    def denials(self, where: Filter | None = None) -> list[dict[str, Any]]:
        """Every denial (`Ledger.denials`)."""
        return self._call("denials", where=where)

    def charge_summary(self, release_id: str) -> summaries.Spread | None:
        """Spread of a release's net charge per user (`Ledger.charge_summary`)."""
        return self._call("charge_summary", release_id=release_id)

    def window_charge_summary(self, release_id: str) -> tuple[summaries.Spread | None, bool]:
        """A w-event release's window charges (`Ledger.window_charge_summary`)."""
        return self._call("window_charge_summary", release_id=release_id)

    def balance_summary(self, domain: str) -> summaries.DomainBudget | None:
        """Spread of a domain's balances (`Ledger.balance_summary`)."""
        return self._call("balance_summary", domain=domain)

    def release_charges(self, release_id: str) -> list[dict[str, Any]]:
        """What one release charged each account (`Ledger.release_charges`)."""
        return self._call("release_charges", release_id=release_id)

    def verify(self, expect: Sequence[tuple[str, SignedHead | heads.PlainHead]] = ()
               ) -> VerifyReport:
        """The server's full verification of its file (`Ledger.verify`)."""
        return self._call("verify", expect=[tuple(e) for e in expect])

    def export(self, path: str | os.PathLike[str], fmt: str = "csv", what: str = "entries"
               ) -> int:
        """Write a table for auditors to the local `path`, as `Ledger.export` does.

        The service sends the tables (``GET /v1/tables/<what>``, `ledger.export_wire`;
        ``all`` from one snapshot) and they are written here with the embedded
        ledger's code, so the files are those `export` writes on the service's host.

        Raises:
            ParameterError: an unknown format or table.
        """
        from ledger import export_wire, queries

        queries.check_export(fmt, what)
        status, body = self._http.request("GET", f"/v1/tables/{what}")
        if status != 200:
            self._raise(status, body, "export")
        names = list(queries.EXPORTS) if what == "all" else [what]
        return queries.write_export(export_wire.decode_tables(body, names), path, fmt, what)

    def verify_or_raise(self, expect: Sequence[tuple[str, SignedHead | heads.PlainHead]] = ()
                        ) -> VerifyReport:
        """Like `verify`, but raise `LedgerIntegrityError` (exit 4) when it fails."""
        rep = self.verify(expect)
        if not rep.ok:
            raise ledger_errors.LedgerIntegrityError(rep.message, seq=rep.first_bad_seq,
                                                     entry_id=rep.first_bad_entry_id)
        return rep


def open_ledger(target: str | os.PathLike[str], *, actor: str | None = None) -> Any:
    """A `Ledger` for a file path, a `RemoteLedger` for an ``https://`` URL.

    Raises:
        ParameterError: an ``http://`` URL (refused), or a malformed URL.
        LedgerOpenError: (path) as `Ledger`.
    """
    from ledger.ledger import Ledger

    if is_url(target):
        return RemoteLedger(str(as_target(target)))
    return Ledger(target, actor=actor)
