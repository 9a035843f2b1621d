"""The client of the ledger service's published-file routes (`RemoteLedger.put_published`).

``PUT /v1/published/<release_id>/<name>`` streams a file's bytes to the
service's store (releaser owning the release, or admin); ``GET`` of the
same path streams them back (any role). Bodies are raw bytes, not JSON; an
error is answered with the usual JSON error body. The client re-checks the
bytes it downloads against the SHA-256 of the release's manifest, as the
embedded ledger does (`ledger.published`). A connection error is retried
until ``PRIVPIPE_LEDGER_RETRY_SECONDS`` (`ledger.remote._Transport.retrying`,
on a fresh connection per attempt): both routes are idempotent (a file is
named by its digest). Standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from ledger import errors as ledger_errors
from ledger import published
from schemas.names import check_name


def route(release_id: str, name: str) -> str:
    """The URL path of a release's published file (both parts checked as safe names)."""
    check_name(release_id, "release_id")
    check_name(name, "file name")
    return f"/v1/published/{quote(release_id, safe='')}/{quote(name, safe='')}"


def _raise_answer(status: int, body: bytes, what: str) -> None:
    """Raise the privpipe error of a non-200 answer (same class as the embedded ledger's)."""
    from ledger.remote import rebuild_error

    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        err = None
    if not isinstance(err, dict):
        raise ledger_errors.LedgerInternalError(
            f"the ledger service answered {what} with HTTP {status} and no privpipe error")
    raise rebuild_error(str(err.get("class")), str(err.get("message")),
                        err.get("attrs") or {})


def upload(tr: Any, release_id: str, name: str,
           data: bytes | str | os.PathLike[str]) -> dict[str, Any]:
    """PUT a published file's bytes (or the file at a path) to the service's store.

    Returns:
        The service's answer: ``sha256``, ``size``, ``stored``.
    """
    path = route(release_id, name)
    size = len(data) if isinstance(data, bytes) else os.stat(data).st_size

    def call(con: http.client.HTTPSConnection) -> dict[str, Any]:
        body: bytes | BinaryIO
        if isinstance(data, bytes):
            body = data
        else:
            body = os.fdopen(os.open(data, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")
        try:
            con.request("PUT", path, body=body, headers={
                "Authorization": tr.auth, "Content-Type": "application/octet-stream",
                "Content-Length": str(size)})
            resp = con.getresponse()
            answer = resp.read()
        finally:
            if not isinstance(body, bytes):
                body.close()
        if resp.status != 200:
            _raise_answer(resp.status, answer, f"PUT {path}")
        return dict(json.loads(answer)["result"])

    return tr.retrying(call, fresh=True)


def download(tr: Any, release_id: str, name: str, expected: str, dest: Path) -> Path:
    """GET a published file into the new file `dest`, checked against `expected` (SHA-256).

    Raises:
        OutputIntegrityError: the bytes do not match (nothing is left at `dest`).
        PublishedFileError: the service keeps no copy, or no settled release names it.
    """
    path = route(release_id, name)

    def call(con: http.client.HTTPSConnection) -> Path:
        con.request("GET", path, headers={"Authorization": tr.auth})
        resp = con.getresponse()
        if resp.status != 200:
            _raise_answer(resp.status, resp.read(), f"GET {path}")

        def blocks() -> Iterator[bytes]:
            yield from iter(lambda: resp.read(published.BLOCK), b"")

        return published.receive(blocks(), expected, dest, f"{release_id}/{name}")

    return tr.retrying(call, fresh=True)
