"""The ledger service's published-file routes: the store of `ledger.published`, streamed.

- ``PUT /v1/published/<release_id>/<name>``: the body is the file's bytes
  (``Content-Length`` required, at most ``--max-published-mb``); releaser role
  for a release it owns (the client that first reserved it), or admin. The
  bytes are hashed while written to a temporary file of the store and kept
  only if the release is settled and its manifest names `name` with exactly
  that SHA-256 (else 422 ``PublishedFileError``, nothing kept). Answers
  ``{"result": {"sha256", "size", "stored"}}``.
- ``GET /v1/published/<release_id>/<name>``: the stored bytes (any role);
  404 when the store keeps no copy, 422 when no settled release names the
  file or the stored name is not a regular file. The client checks the bytes
  against the manifest's digest (`ledger.remote_published`).

Errors use the JSON error body and statuses of the other operations
(`flows.ledger_server`): 400, 401, 403, 404, 413, 422, 500.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from flows.ledger_server import LedgerService, _error
from ledger import published
from ledger.errors import PublishedFileError
from ledger.remote import LedgerAccessError
from schemas.errors import ParameterError, PrivpipeError
from schemas.names import check_name

MAX_PUBLISHED_MB = 4096
WRITERS = ("releaser", "admin")


class _Refused(Exception):
    """A request answered with an error status before any byte of the body is read."""

    def __init__(self, status: int, err: BaseException):
        super().__init__(str(err))
        self.status, self.err = status, err


def _status(err: BaseException) -> int:
    if isinstance(err, LedgerAccessError):
        return 403
    if isinstance(err, ParameterError):
        return 400
    if isinstance(err, PublishedFileError) and "keeps no copy" in str(err):
        return 404
    return 422


def check_writer(service: LedgerService, client: Any, release_id: str) -> None:
    """Refuse a client that may not keep files for `release_id` (LedgerAccessError).

    A releaser may keep only its own releases' files (the client that first
    reserved the release, as for settle and record_release); an admin any.
    """
    if client.role not in WRITERS:
        raise LedgerAccessError(f"keeping a published file needs the releaser or admin role; "
                                f"the credential {client.name!r} has the {client.role} role")
    if client.role == "admin":
        return
    owner = service._owner(release_id)
    if owner is not None and owner != client.name:
        raise LedgerAccessError(f"release {release_id!r} belongs to another client "
                                f"({owner!r}); keeping its files needs that client or the "
                                "admin role")


def _fail(status: int, err: BaseException) -> Any:
    from starlette.responses import Response

    code, body = _error(status, err)
    return Response(body, status_code=code, media_type="application/json")


class _Routes:
    """The handlers of the two routes (one instance per application)."""

    def __init__(self, service: LedgerService, limiter: Any, max_bytes: int):
        self.service, self.limiter, self.max_bytes = service, limiter, max_bytes
        self.store = published.store_dir(service.path)

    async def _run(self, fn: Any, *args: Any) -> Any:
        import anyio

        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    async def prepare(self, request: Any, writing: bool) -> tuple[str, str, Any]:
        """(release id, name, release record) of a request; raises _Refused with its status."""
        try:
            client = await self._run(self.service.authenticate,
                                     request.headers.get("authorization", ""))
        except LedgerAccessError as err:
            raise _Refused(401, err) from None
        try:
            rid = check_name(request.path_params["release_id"], "release_id")
            name = check_name(request.path_params["name"], "file name")
            if writing:
                await self._run(check_writer, self.service, client, rid)
            record = await self._run(self.service._base.release, rid)
        except PrivpipeError as err:
            raise _Refused(_status(err), err) from None
        return rid, name, record

    async def put(self, request: Any) -> Any:
        """Keep the body's bytes if the release's manifest names them (module docstring)."""
        from starlette.responses import Response

        declared = request.headers.get("content-length", "")
        try:
            rid, name, record = await self.prepare(request, True)
            if not declared.isdigit() or int(declared) > self.max_bytes:
                raise _Refused(413, ParameterError(
                    f"a published file needs a content-length of at most {self.max_bytes} "
                    "bytes (--max-published-mb)"))
            expected = published.expected_sha256(record, rid, name)
            incoming = await self._run(published.Incoming, self.store)
        except _Refused as refused:
            return _fail(refused.status, refused.err)
        except PrivpipeError as err:
            return _fail(_status(err), err)
        try:
            async for piece in request.stream():
                if incoming.size + len(piece) > self.max_bytes:
                    return _fail(413, ParameterError("published file too large"))
                incoming.write(piece)
            info = await self._run(incoming.commit, expected, rid, name)
        except PrivpipeError as err:
            return _fail(_status(err), err)
        finally:
            incoming.abort()
        return Response(json.dumps({"result": info}), media_type="application/json")

    async def get(self, request: Any) -> Any:
        """Stream the stored bytes (the client checks them against the manifest)."""
        import anyio
        from starlette.responses import StreamingResponse

        try:
            rid, name, record = await self.prepare(request, False)
            f, expected, size = published.open_stored(self.store, record, rid, name)
        except _Refused as refused:
            return _fail(refused.status, refused.err)
        except PrivpipeError as err:
            return _fail(_status(err), err)

        async def body() -> AsyncIterator[bytes]:
            try:
                while block := await anyio.to_thread.run_sync(f.read, published.BLOCK):
                    yield block
            finally:
                f.close()

        return StreamingResponse(body(), media_type="application/octet-stream", headers={
            "Content-Length": str(size), "X-Privpipe-Sha256": expected})


def published_routes(service: LedgerService, limiter: Any, *,
                     max_bytes: int = MAX_PUBLISHED_MB * 2**20) -> list[Any]:
    """The two routes, for `flows.ledger_server.make_app`."""
    from starlette.routing import Route

    routes = _Routes(service, limiter, max_bytes)
    path = "/v1/published/{release_id}/{name}"
    return [Route(path, routes.put, methods=["PUT"]), Route(path, routes.get, methods=["GET"])]
