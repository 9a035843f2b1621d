"""The noise key: a secret file beside the ledger that seeds every release's noise.

The key is 32 random bytes written hex-encoded to ``<ledger path>.key`` (for
``ledger.duckdb`` that is ``ledger.duckdb.key``) with mode 0600, never inside the
DuckDB file. The noise for (release_id, user_id) comes from

    seed = int(HMAC-SHA256(key, canonical(release_id, user_id)))   # 256-bit

fed to ``np.random.default_rng(seed)``: a retried or resumed release reproduces
the same outputs, so no second, uncharged draw can leave the system, while
without the key the seeds are unpredictable. A key file must be a regular
file (no symbolic link) owned by the user running privpipe, mode 0600.

The ledger stores only an HMAC fingerprint of the key (`key_fingerprint`), so a
replaced or edited key is detected. A missing or unreadable key for an existing
ledger, or a key file readable by group/others, is an error: the key is never
silently regenerated. Nothing here logs or prints the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from ledger.errors import LedgerOpenError
from schemas.errors import ParameterError

KEY_BYTES = 32
_FINGERPRINT_LABEL = b"privpipe noise key fingerprint v1"
_SEAL_LABEL = "privpipe chain seal v1"
_SEAL_LABEL_V2 = "privpipe chain seal v2"
_SEAL_LABEL_V3 = "privpipe chain seal v3"
_TAG_LABEL = "privpipe input tag v1"
_SEED_LABEL = "privpipe noise seed v2"
_SAMPLE_LABEL = "privpipe recheck sample v1"


def key_path_for(ledger_path: str | os.PathLike[str]) -> Path:
    """Where the noise key of a ledger lives: ``<ledger path>.key``."""
    p = Path(ledger_path)
    return p.with_name(p.name + ".key")


def create_key(path: Path) -> bytes:
    """Create a new key file with mode 0600; refuse to overwrite an existing one.

    Raises:
        LedgerOpenError: the file exists or cannot be created.
    """
    key = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise LedgerOpenError(
            f"noise key file {str(path)!r} already exists; not overwriting it") from None
    except OSError as err:
        raise LedgerOpenError(
            f"cannot create noise key file {str(path)!r}: {err.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # in case the umask or filesystem changed it
        os.write(fd, key.hex().encode("ascii") + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def read_private_file(path: Path, what: str) -> bytes:
    """The bytes of a private key file, refusing any file another party could control.

    The file must be a regular file (not a symbolic link, FIFO or device),
    owned by the user running privpipe, with no permission for group or
    others. It is opened with ``O_NOFOLLOW`` and checked again on the open
    descriptor, so it cannot be swapped between the check and the read.

    Raises:
        LedgerOpenError: naming the file and the rule it breaks.
    """
    where = f"the {what} {str(path)!r}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise LedgerOpenError(f"cannot read {where}: {err.strerror}") from None
    _check_private(st, where, str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise LedgerOpenError(f"cannot read {where}: {err.strerror}") from None
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise LedgerOpenError(f"{where} changed while it was being opened; try again")
        _check_private(fst, where, str(path))
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    except OSError as err:
        raise LedgerOpenError(f"cannot read {where}: {err.strerror}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _check_private(st: os.stat_result, where: str, path: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise LedgerOpenError(
            f"{where} is a symbolic link; privpipe reads its keys only from a regular file "
            "beside the ledger (replace the link by the file it points to)")
    if not stat.S_ISREG(st.st_mode):
        raise LedgerOpenError(f"{where} is not a regular file")
    if st.st_uid != os.geteuid():
        raise LedgerOpenError(
            f"{where} is owned by uid {st.st_uid}, not by the user running privpipe "
            f"(uid {os.geteuid()}); another user can replace or read it. Give it to the "
            "ledger's owner (chown) and check that it was not changed")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise LedgerOpenError(
            f"{where} has permissions {mode:04o}, wider than 0600; "
            f"run `chmod 600 {path}` (and consider whether the key leaked)")


def read_token_file(path: str | os.PathLike[str], what: str) -> str:
    """A bearer token from a file no other local user can read or replace.

    Symbolic links are followed (Kubernetes mounts Secret files through them);
    the file they reach must be a regular file owned by the user running
    privpipe or by root, with no permission for others and not writable by its
    group (Kubernetes: ``defaultMode: 0440`` with the pod's ``fsGroup``).

    Raises:
        ParameterError: the file is missing, unreadable, empty, or breaks a rule
            (the message names the file, its mode and the fix); exit 2.
    """
    where = f"{what} {str(path)!r}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise ParameterError(f"cannot read {where}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            raise ParameterError(f"{where} is not a regular file")
        if st.st_uid not in (os.geteuid(), 0):
            raise ParameterError(f"{where} is owned by uid {st.st_uid}, not by the user running "
                                 f"privpipe (uid {os.geteuid()}) or root: another user can "
                                 "replace it")
        if mode & 0o027:
            raise ParameterError(f"{where} has permissions {mode:04o}: other users can read or "
                                 f"change the token; run `chmod 600 {path}` (in Kubernetes: "
                                 "defaultMode 0440 and the pod's fsGroup) and consider "
                                 "whether it leaked")
        text = os.read(fd, 1 << 16).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if not text:
        raise ParameterError(f"{where} is empty")
    return text


def load_key(path: Path) -> bytes:
    """Read the noise key file (see `read_private_file` for the checks).

    Raises:
        LedgerOpenError: the key is missing, unreadable, malformed, a symbolic
            link, not a regular file, owned by another user, or its mode grants
            any permission to group or others (wider than 0600).
    """
    try:
        text = read_private_file(path, "noise key")
    except FileNotFoundError:
        raise LedgerOpenError(
            f"the noise key {str(path)!r} of this ledger is missing; restore it from your "
            "backup (a new key would break the reproducibility of earlier releases, so "
            "privpipe never regenerates it)"
        ) from None
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise LedgerOpenError(
            f"the noise key {str(path)!r} is malformed (expected {KEY_BYTES} hex-encoded bytes)"
        )
    return key


def key_fingerprint(key: bytes) -> str:
    """HMAC-SHA256 fingerprint of the key (stored in the ledger; reveals nothing about it)."""
    return hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()


def chain_seal(key: bytes, last_seq: int, last_hash: str) -> str:
    """Keyed seal over the chain head, so a full re-hash of the chain without the key is caught."""
    msg = json.dumps([_SEAL_LABEL, int(last_seq), last_hash]).encode("utf-8")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def chain_seal_v2(key: bytes, version: int, last_seq: int, last_hash: str) -> str:
    """Keyed seal over the chain head and the schema version (schema 3 on)."""
    msg = json.dumps([_SEAL_LABEL_V2, int(version), int(last_seq), last_hash]).encode("utf-8")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def chain_seal_v3(key: bytes, version: int, last_seq: int, last_hash: str, counter: int) -> str:
    """Keyed seal over the chain head, the schema version and the head counter (schema 4 on)."""
    msg = json.dumps([_SEAL_LABEL_V3, int(version), int(last_seq), last_hash, int(counter)])
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).hexdigest()


def row_mac(key: bytes, label: str, values: list[object]) -> str:
    """Keyed MAC over a mutable table row (domains, releases) kept outside the hash chain.

    An edit of the row with plain SQL (without the key) no longer matches.
    """
    msg = json.dumps([label, *values], ensure_ascii=False, default=str)
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).hexdigest()


def input_tag(key: bytes, content_fingerprint: str) -> str:
    """The published fingerprint of an input: HMAC-SHA256(key, its content hash), hex.

    The content hash (`ingest.input_fingerprint`) is a deterministic function of
    the raw data: published as it is, anyone holding candidate inputs (a
    neighbour of the real one) could tell which was released. Keyed by the
    ledger's noise key, the tag still identifies one input exactly for whoever
    holds the key (`privpipe validate --ledger`), and tells nothing to anyone else.
    The canonical message is the JSON array ``["privpipe input tag v1", hash]``.
    """
    msg = json.dumps([_TAG_LABEL, str(content_fingerprint)])
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).hexdigest()


def noise_seed(key: bytes, release_id: str, user_id: str, data_fingerprint: str,
               parameters_digest: str) -> int:
    """256-bit seed = HMAC-SHA256(key, canonical(ids, data, parameters)) as a big-endian int.

    The canonical encoding is the JSON array ``["privpipe noise seed v2", release_id,
    user_id, data_fingerprint, parameters_digest]`` in UTF-8, unambiguous for any ids
    (no separator collisions). The user's own data fingerprint and the release's
    parameter digest are in it, so noise is reused only by a rerun of the same release
    on the same data with the same parameters, never by other data.
    """
    msg = json.dumps([_SEED_LABEL, str(release_id), str(user_id), str(data_fingerprint),
                      str(parameters_digest)], ensure_ascii=False)
    digest = hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()
    return int.from_bytes(digest, "big")


def recheck_sample_key(key: bytes, release_id: str, chunk: int) -> bytes:
    """The secret key that chooses a chunk's re-executed users (`tasks.recheck`).

    HMAC-SHA256 of the noise key over the JSON array ``["privpipe recheck sample
    v1", release_id, chunk]``: a label no noise seed uses, so it equals no seed a
    worker receives, and it reveals nothing of the noise key (one-way).
    """
    msg = json.dumps([_SAMPLE_LABEL, str(release_id), int(chunk)], ensure_ascii=False)
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()
