"""The ledger service's backup route: an online, verified snapshot, streamed as a tar.

``GET /v1/backup?keys=0|1``: the service takes the backup `ledger.backup`
takes of a file, from the database it holds (`ledger.backup._snapshot`: one
read transaction on a cursor of its instance, so releases go on and are not
waited for), verifies it with the ledger's keys (chain, balances, seal, MACs,
signed head), copies the published files its settled releases name
(`ledger.backup_published`), and streams the backup directory as an
uncompressed POSIX tar: ``ledger.duckdb``, the key files (only with
``keys=1``), ``published/<sha256>.<suffix>``, ``manifest.json`` last. The
backup is built in a new private directory beside the ledger, its files are
opened and the directory removed before the first byte is sent (nothing stays
on the server's disk). The client (`ledger.remote_backup`) checks every file
against the manifest and verifies the chain and signatures again.

Roles: admin or auditor (an auditor already reads every table and published
file; the backup is a consistent, verified copy of them). ``keys=1`` (the
secret noise and signing keys leave the server) is for an admin only, and
only when asked; each served backup is logged with the client's name. One
backup runs at a time (another is answered 422 ``LedgerBusyError``, retryable).

Statuses: 400 a bad ``keys`` value, 401 no or an unknown token, 403 a role
that may not (a releaser; an auditor asking for keys), 422 the backup failed
(same error class and exit code as the embedded backup), 500 a bug.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

from flows.ledger_server import LedgerService, _error
from ledger import backup as backup_
from ledger import storage
from ledger.errors import LedgerBusyError
from ledger.remote import LedgerAccessError
from schemas.errors import ParameterError, PrivpipeError

ROLES = ("admin", "auditor")
BLOCK = 1 << 20
log = logging.getLogger("privpipe.ledger_server")


def check_backup_role(client: Any, include_keys: bool) -> None:
    """Refuse a client that may not take this backup (LedgerAccessError, answered 403)."""
    if client.role not in ROLES:
        raise LedgerAccessError(f"a backup needs the admin or auditor role; the credential "
                                f"{client.name!r} has the {client.role} role")
    if include_keys and client.role != "admin":
        raise LedgerAccessError(f"a backup with the secret keys (--include-keys) needs the "
                                f"admin role; the credential {client.name!r} has the "
                                f"{client.role} role")


def take_backup(service: LedgerService, include_keys: bool
                ) -> tuple[dict[str, Any], list[tuple[str, BinaryIO, int]]]:
    """Back up the held ledger into a new private directory; (manifest, open files).

    The directory is removed before returning: the open files are all that is left.
    """
    base = service._base
    tmp = service.path.parent / f".served-backup-{uuid.uuid4().hex}"
    try:
        manifest = backup_.backup(service.path, base._keys, tmp,
                                  lock_timeout=base.lock_timeout, created_at=storage.now(),
                                  include_keys=include_keys, store=base._store)
        return manifest, backup_.open_backup_dir(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tar_header(name: str, size: int, mtime: int) -> bytes:
    """The POSIX tar header of a regular file `name` of `size` bytes (mode 0600)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, 0o600, mtime, tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT)


def tar_length(files: list[tuple[str, BinaryIO, int]], mtime: int) -> int:
    """The byte length of the tar `stream` sends (headers, padded contents, end marker)."""
    return sum(len(tar_header(n, s, mtime)) + -(-s // 512) * 512 for n, _, s in files) + 1024


def _fail(status: int, err: BaseException) -> Any:
    from starlette.responses import Response

    code, body = _error(status, err)
    return Response(body, status_code=code, media_type="application/json")


class _Route:
    """The handler of ``GET /v1/backup`` (one instance per application)."""

    def __init__(self, service: LedgerService, limiter: Any):
        self.service, self.limiter = service, limiter
        self.running = threading.Lock()

    async def _run(self, fn: Any, *args: Any) -> Any:
        import anyio

        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def _take(self, client: Any, include_keys: bool) -> Any:
        if not self.running.acquire(blocking=False):
            raise LedgerBusyError("the ledger service is taking another backup; ask again "
                                  "when it ends")
        try:
            log.warning("ledger service: backup for %r (%s)", client.name,
                        "WITH the secret keys" if include_keys else "without the keys")
            return take_backup(self.service, include_keys)
        finally:
            self.running.release()

    async def get(self, request: Any) -> Any:
        """Take a backup and stream it (module docstring)."""
        from starlette.responses import StreamingResponse

        try:
            client = await self._run(self.service.authenticate,
                                     request.headers.get("authorization", ""))
        except LedgerAccessError as err:
            return _fail(401, err)
        keys = request.query_params.get("keys", "0")
        try:
            if keys not in ("0", "1"):
                raise ParameterError(f"keys={keys!r}: expected 0 or 1")
            check_backup_role(client, keys == "1")
            manifest, files = await self._run(self._take, client, keys == "1")
        except LedgerAccessError as err:
            return _fail(403, err)
        except ParameterError as err:
            return _fail(400, err)
        except PrivpipeError as err:
            return _fail(422, err)
        except Exception as err:  # noqa: BLE001 - a bug: logged, answered 500, server lives
            log.exception("ledger service: backup failed")
            return _fail(500, RuntimeError(f"internal error in the ledger service "
                                           f"({type(err).__name__}); see its log"))
        mtime = int(time.time())
        head = manifest["head"]
        return StreamingResponse(self._stream(files, mtime), media_type="application/x-tar",
                                 headers={"Content-Length": str(tar_length(files, mtime)),
                                          "X-Privpipe-Head": f"{head['seq']}:{head['hash']}"})

    async def _stream(self, files: list[tuple[str, BinaryIO, int]], mtime: int
                      ) -> AsyncIterator[bytes]:
        import anyio

        try:
            for name, f, size in files:
                yield tar_header(name, size, mtime)
                while block := await anyio.to_thread.run_sync(f.read, BLOCK):
                    yield block
                yield b"\0" * (-size % 512)
            yield b"\0" * 1024
        finally:
            for _, f, _ in files:
                f.close()


def backup_routes(service: LedgerService, limiter: Any) -> list[Any]:
    """The backup route, for `flows.ledger_server.make_app`."""
    from starlette.routing import Route

    return [Route("/v1/backup", _Route(service, limiter).get, methods=["GET"])]
