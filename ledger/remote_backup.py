"""The client of the ledger service's backup route: `privpipe ledger backup --ledger https://...`.

``GET /v1/backup?keys=0|1`` answers a tar of a backup directory
(`flows.ledger_server_backup`). The client writes each member into the new
(or empty) ``--out`` directory as a new private file (0600; ``published/``
0700; exclusive, never through a symlink), accepting only the names a backup
has (``ledger.duckdb``, its key files, ``published/<sha256><suffix>``,
``manifest.json``), then verifies it locally as `ledger.backup` does before
calling it a backup: the snapshot's SHA-256 and size against the manifest,
the chain, balances and signed head with the signing key's public key
(``public_key``, else the key the snapshot records, pinned to the manifest's
fingerprint), the head against the manifest's, and every published file
against the snapshot's settled manifests (`ledger.backup_published`). On any
failure nothing is left in ``--out``. The result is what `ledger restore`
takes. A connection error before the answer is retried until
``PRIVPIPE_LEDGER_RETRY_SECONDS``. Standard library only.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any

import duckdb

from ledger import backup as backup_
from ledger import backup_published, remote_published
from ledger.errors import LedgerIntegrityError

TOP = (backup_.SNAPSHOT_NAME, backup_.MANIFEST_NAME, *(backup_.SNAPSHOT_NAME + s for s in (
    ".key", ".sign", ".pub", ".pin")))
_PUBLISHED = re.compile(r"published/[0-9a-f]{64}(\.[A-Za-z0-9]{1,16})?")


def _member_path(out: Path, member: tarfile.TarInfo) -> Path:
    """Where a tar member goes in `out` (LedgerIntegrityError: not a backup's file)."""
    if not member.isreg() or not (member.name in TOP or _PUBLISHED.fullmatch(member.name)):
        raise LedgerIntegrityError(f"the ledger service sent {member.name!r}, which is not a "
                                   "file of a backup; nothing was kept")
    if "/" in member.name and not (out / "published").is_dir():
        os.mkdir(out / "published", 0o700)
    return out / member.name


def _extract(stream: Any, out: Path) -> None:
    """Write the backup tar read from `stream` into `out` (new private files)."""
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            dest = _member_path(out, member)
            src = tar.extractfile(member)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)
                while block := src.read(1 << 20):  # type: ignore[union-attr]
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())


def _clear(out: Path) -> None:
    """Remove what an attempt wrote into `out` (which was new or empty)."""
    for p in out.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _verify(out: Path, public_key: Path | None) -> dict[str, Any]:
    """Verify a downloaded backup directory as `ledger.backup` does; its manifest."""
    from ledger.ledger import Ledger

    snap = backup_.load_snapshot(out)
    m = snap.manifest
    if (backup_._sha256_file(snap.path) != m["sha256"]
            or snap.path.stat().st_size != m.get("size")):
        raise LedgerIntegrityError(f"the snapshot {str(snap.path)!r} does not match the SHA-256 "
                                   "and size in its manifest (damaged in transit)")
    led = Ledger.open_auditor(snap.path, public_key=public_key,
                              expect_fingerprint=None if public_key is not None
                              else str(m.get("signing_key_fingerprint")))
    rep = led.verify()
    head = led.head()
    if not rep.ok:
        raise LedgerIntegrityError(f"the snapshot {str(snap.path)!r} does not verify: "
                                   f"{rep.message}", seq=rep.first_bad_seq,
                                   entry_id=rep.first_bad_entry_id)
    if (head.seq, head.hash) != (m["head"]["seq"], m["head"]["hash"]):
        raise LedgerIntegrityError("the snapshot's head is not the head its manifest names")
    con = duckdb.connect(str(snap.path), read_only=True)
    try:
        named = backup_published.named_files(con)
    finally:
        con.close()
    backup_published.check_backup_store(out, m.get("published", []), named)
    return m


def fetch_backup(url: str, out: Path, *, include_keys: bool = False,
                 public_key: Path | None = None) -> dict[str, Any]:
    """Take a backup through the ledger service at `url` into the new directory `out`.

    Returns:
        The manifest (verified: module docstring).

    Raises:
        ParameterError: `out` exists and is not empty, or cannot be created.
        LedgerAccessError: no credential, or a role that may not (403).
        LedgerIntegrityError: what was received does not verify (nothing kept).
        LedgerBusyError: the service did not answer, or takes another backup.
    """
    from ledger.remote import RemoteLedger

    tr = RemoteLedger(url)._http
    backup_._out_dir(out)
    route = f"/v1/backup?keys={int(bool(include_keys))}"

    def call(con: http.client.HTTPSConnection) -> None:
        _clear(out)
        con.request("GET", route, headers={"Authorization": tr.auth})
        resp = con.getresponse()
        if resp.status != 200:
            remote_published._raise_answer(resp.status, resp.read(), f"GET {route}")
        try:
            _extract(resp, out)
        except FileExistsError as err:  # a name sent twice: not a connection error to retry
            raise LedgerIntegrityError(f"the ledger service sent {err.filename!r} twice; "
                                       "nothing was kept") from None
        except (tarfile.TarError, EOFError) as err:
            raise LedgerIntegrityError(f"the backup the ledger service sent is not a "
                                       f"complete tar ({err}); nothing was kept") from None

    try:
        tr.retrying(call, fresh=True)
        return _verify(out, public_key)
    except BaseException:
        _clear(out)
        raise

