"""The noise key: a secret file beside the ledger that seeds every release's noise.

The key is 32 random bytes written hex-encoded to ``<ledger path>.key`` (for
``ledger.duckdb`` that is ``ledger.duckdb.key``) with mode 0600, never inside the
DuckDB file. The noise for (release_id, user_id) comes from

    seed = int(HMAC-SHA256(key, canonical(release_id, user_id)))   # 256-bit

fed to ``np.random.default_rng(seed)``: a retried or resumed release reproduces
the same outputs, so no second, uncharged draw can leave the system, while
without the key the seeds are unpredictable.

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

KEY_BYTES = 32
_FINGERPRINT_LABEL = b"privpipe noise key fingerprint v1"
_SEAL_LABEL = "privpipe chain seal v1"
_SEED_LABEL = "privpipe noise seed v2"


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


def load_key(path: Path) -> bytes:
    """Read a key file, checking that only its owner can read it.

    Raises:
        LedgerOpenError: the key is missing, unreadable, malformed, or its mode
            grants any permission to group or others (wider than 0600).
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise LedgerOpenError(
            f"the noise key {str(path)!r} of this ledger is missing; restore it from your "
            "backup (a new key would break the reproducibility of earlier releases, so "
            "privpipe never regenerates it)"
        ) from None
    except OSError as err:
        raise LedgerOpenError(f"cannot read the noise key {str(path)!r}: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise LedgerOpenError(f"the noise key {str(path)!r} is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise LedgerOpenError(
            f"the noise key {str(path)!r} has permissions {mode:04o}, wider than 0600; "
            f"run `chmod 600 {path}` (and consider whether the key leaked)"
        )
    try:
        text = path.read_bytes()
    except OSError as err:
        raise LedgerOpenError(f"cannot read the noise key {str(path)!r}: {err.strerror}") from None
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


def row_mac(key: bytes, label: str, values: list[object]) -> str:
    """Keyed MAC over a mutable table row (domains, releases) kept outside the hash chain.

    An edit of the row with plain SQL (without the key) no longer matches.
    """
    msg = json.dumps([label, *values], ensure_ascii=False, default=str)
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
