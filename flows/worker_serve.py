"""`privpipe worker serve`: a keyless compute server for chunk work from untrusted-worker hosts.

The worker answers ``POST /v1/chunk`` (a wire-format request,
`tasks.wire_chunk`) by running exactly the function the local path runs,
`tasks.privatize.privatize_curve_chunk` or `privatize_stream_chunk`, and
answering with its output tables and costs (`tasks.wire_result`): 200 with the
answer; 422 with ``{"user_id", "item_id", "cause"}`` when the mechanism failed
on one user (as the local path's `MechanismRunError`); 400 for a malformed
request; 401 without the right bearer token; 413 for a request over the size
limit. ``GET /v1/health`` answers ``{"wire": 1}``.

What it holds: the chunks it is sent (the admitted users' samples and noise
seeds of one chunk at a time, in memory) and the public parameters. It has no
ledger, no noise key, no other chunk and no file of the flow, and it writes
nothing to disk. It reads requests with json and pyarrow only.

Transport: HTTPS (``--tls-cert``/``--tls-key``), optionally requiring a client
certificate signed by ``--client-ca``. Authentication: a bearer token
(``--token-file``, compared in constant time) and/or the client certificate;
a worker with neither refuses to start. Plain HTTP only with
``--insecure-loopback`` on a loopback address (tests and benchmarks on one
machine).
"""

from __future__ import annotations

import hmac
import json
import ssl
from pathlib import Path
from typing import Any

from flows.worker_address import is_loopback, parse_listen
from ledger.keys import read_token_file
from schemas.errors import ParameterError

MAX_REQUEST_MB = 1024
def _check_options(host: str, tls: tuple[Path | None, Path | None], client_ca: Path | None,
                   token: str | None, insecure_loopback: bool) -> None:
    cert, key = tls
    if (cert is None) != (key is None):
        raise ParameterError("give both --tls-cert and --tls-key")
    if cert is None and not insecure_loopback:
        raise ParameterError("a worker serves HTTPS only: give --tls-cert and --tls-key "
                             "(plain HTTP only with --insecure-loopback on 127.0.0.1)")
    if cert is None and not is_loopback(host):
        raise ParameterError(f"--insecure-loopback listens on a loopback address only, not "
                             f"{host!r}")
    if client_ca is not None and cert is None:
        raise ParameterError("--client-ca needs --tls-cert and --tls-key")
    if token is None and client_ca is None:
        raise ParameterError("a worker needs an authentication: --token-file and/or "
                             "--client-ca (a client certificate)")
    if token is not None and len(token) < 16:
        raise ParameterError("the worker token must be at least 16 characters")


def _run_request(body: bytes) -> tuple[int, bytes]:
    """(status, answer) of one chunk request: the local path's function on the chunk."""
    from tasks.privatize import MechanismRunError, privatize_curve_chunk, privatize_stream_chunk
    from tasks.wire import WireError
    from tasks.wire_chunk import decode_request
    from tasks.wire_result import encode_result

    try:
        req = decode_request(body)
    except WireError as err:
        return 400, json.dumps({"error": str(err)}).encode()
    try:
        if req.kind == "curves":
            res = privatize_curve_chunk(req.chunk, req.value_columns, req.spec)
        else:
            res = privatize_stream_chunk(req.chunk, req.spec)
    except MechanismRunError as err:
        cause = type(err.__cause__).__name__ if err.__cause__ is not None else "error"
        return 422, json.dumps({"user_id": err.user_id, "item_id": err.item_id,
                                "cause": cause}).encode()
    except Exception as err:  # noqa: BLE001 - a refused chunk (e.g. an empty one)
        return 422, json.dumps({"user_id": f"chunk {req.chunk.index}",
                                "item_id": f"chunk {req.chunk.index}",
                                "cause": type(err).__name__}).encode()
    return 200, encode_result(req.kind, res)


def make_app(*, token: str | None, threads: int = 1,
             max_request: int = MAX_REQUEST_MB * 2**20) -> Any:
    """The worker's Starlette application (`threads` chunks run at once)."""
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    limiter = anyio.CapacityLimiter(threads)
    expected = f"Bearer {token}".encode() if token is not None else None

    async def chunk(request: Request) -> Response:
        given = request.headers.get("authorization", "").encode()
        if expected is not None and not hmac.compare_digest(given, expected):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) > max_request:
            return JSONResponse({"error": f"a request needs a content-length of at most "
                                          f"{max_request} bytes"}, status_code=413)
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > max_request:
                return JSONResponse({"error": "request too large"}, status_code=413)
        status, answer = await anyio.to_thread.run_sync(_run_request, bytes(body),
                                                        limiter=limiter)
        kind = ("application/vnd.privpipe.wire.v1" if status == 200 else "application/json")
        return Response(answer, status_code=status, media_type=kind)

    async def health(request: Request) -> Response:
        return JSONResponse({"wire": 1})

    return Starlette(routes=[Route("/v1/chunk", chunk, methods=["POST"]),
                             Route("/v1/health", health, methods=["GET"])])


def serve_worker(listen: str, *, tls_cert: Path | None, tls_key: Path | None,
                 client_ca: Path | None, token_file: Path | None,
                 insecure_loopback: bool = False, threads: int = 1) -> None:
    """Check the options, then serve until interrupted (see the module docstring).

    Raises:
        ParameterError: an option combination the module docstring refuses.
    """
    from flows.http_serve import serve_app

    host, port = parse_listen(listen)
    token = (read_token_file(token_file, "the --token-file") if token_file is not None
             else None)
    _check_options(host, (tls_cert, tls_key), client_ca, token, insecure_loopback)
    tls: dict[str, Any] = {}
    if tls_cert is not None:
        tls = {"ssl_certfile": str(tls_cert), "ssl_keyfile": str(tls_key)}
    if client_ca is not None:
        tls |= {"ssl_ca_certs": str(client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    serve_app(make_app(token=token, threads=threads), host=host, port=port,
              log_level="warning", access_log=False, **tls)
