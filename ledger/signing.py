"""The Ed25519 signing key beside the noise key, and the signed chain head.

``<ledger>.sign`` holds the private key (32 raw bytes, hex, mode 0600, the same
file checks as the noise key); ``<ledger>.pub`` the public key (hex), which
`privpipe ledger pubkey` exports for auditors. Every write transaction signs
the new chain head. From schema 4 the canonical JSON is

    ["privpipe chain head v2", ledger_id, schema_version, rules, key_fingerprint,
     seq, hash, counter]

so the format version, the verification rules (`VERIFY_RULES`), the key's
fingerprint and the head counter (`ledger.counter`) are all under the
signature; schema 3 signed ``["privpipe chain head v1", ledger_id,
schema_version, seq, hash]`` (still verified as it is).

An auditor who keeps the public key (or a signed checkpoint) can check, with
no secret at all, that a head was produced by the holder of the signing key;
a ledger rolled back, truncated or re-keyed no longer matches a checkpoint it
signed earlier (`Ledger.verify` with ``expect_heads``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger.errors import LedgerOpenError
from ledger.keys import read_private_file
from schemas.errors import ParameterError

HEAD_LABEL = "privpipe chain head v1"
HEAD_LABEL_V2 = "privpipe chain head v2"
VERIFY_RULES = ("privpipe verify rules 4: hash chain, balances, policy history, keyed seal and "
                "MACs, signed head with counter, no format older than the signed history")
"""The verification rules a schema 4 head is signed under (a verifier checks it as it is)."""


def signing_key_path(ledger_path: str | os.PathLike[str]) -> Path:
    """Where a ledger's signing key lives: ``<ledger path>.sign``."""
    p = Path(ledger_path)
    return p.with_name(p.name + ".sign")


def public_key_path(ledger_path: str | os.PathLike[str]) -> Path:
    """Where a ledger's public key lives: ``<ledger path>.pub``."""
    p = Path(ledger_path)
    return p.with_name(p.name + ".pub")


def public_bytes(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of a public key."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(Encoding.Raw, PublicFormat.Raw)


def pin_path(ledger_path: str | os.PathLike[str]) -> Path:
    """Where the fingerprint pinned at init lives: ``<ledger path>.pin`` (outside the database)."""
    p = Path(ledger_path)
    return p.with_name(p.name + ".pin")


def fingerprint(public: bytes) -> str:
    """SHA-256 of the raw public key, hex: how a checkpoint names the key it trusts."""
    return hashlib.sha256(public).hexdigest()


def parse_fingerprint(text: str, where: str) -> str:
    """A key fingerprint (64 hex digits, any case) in lower case.

    Raises:
        ParameterError: not 64 hex digits (naming `where`).
    """
    fp = text.strip().lower()
    if len(fp) != 64 or any(c not in "0123456789abcdef" for c in fp):
        raise ParameterError(f"{where} is not a key fingerprint (64 hex digits, the SHA-256 "
                             "that `privpipe ledger init` printed)")
    return fp


def write_pin(ledger_path: str | os.PathLike[str], public: bytes) -> Path:
    """Record the public key's fingerprint in ``<ledger>.pin`` (a new file; never overwritten).

    Raises:
        LedgerOpenError: the file exists or cannot be created.
    """
    path = pin_path(ledger_path)
    _write_new(path, fingerprint(public), None)
    return path


def load_pin(ledger_path: str | os.PathLike[str]) -> str | None:
    """The fingerprint pinned at init, or None when there is no ``.pin`` file.

    Raises:
        LedgerOpenError: the file is unreadable or not a fingerprint.
    """
    path = pin_path(ledger_path)
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else "not text"
        raise LedgerOpenError(f"cannot read the pinned fingerprint {str(path)!r}: {why}"
                              ) from None
    try:
        return parse_fingerprint(text, f"the pin file {str(path)!r}")
    except ParameterError as err:
        raise LedgerOpenError(str(err)) from None


def create_signing_key(ledger_path: Path) -> Ed25519PrivateKey:
    """Create ``<ledger>.sign`` (0600) and ``<ledger>.pub`` (the umask's mode, like the ledger).

    Neither file is ever overwritten.

    Raises:
        LedgerOpenError: a file exists or cannot be created.
    """
    key = Ed25519PrivateKey.generate()
    made: list[Path] = []
    try:
        for path, data, mode in ((signing_key_path(ledger_path), key.private_bytes_raw().hex(),
                                  0o600),
                                 (public_key_path(ledger_path), public_bytes(key).hex(), None)):
            _write_new(path, data, mode)
            made.append(path)
    except BaseException:
        for path in made:
            path.unlink(missing_ok=True)
        raise
    return key


def _write_new(path: Path, data: str, mode: int | None) -> None:
    """Create `path` with `data`: mode 0600 forced for a secret, else the umask decides."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o644 if mode is None else mode)
    except FileExistsError:
        raise LedgerOpenError(f"{str(path)!r} already exists; not overwriting it") from None
    except OSError as err:
        raise LedgerOpenError(f"cannot create {str(path)!r}: {err.strerror}") from None
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # in case the umask or file system changed it
        os.write(fd, data.encode("ascii") + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def load_signing_key(ledger_path: Path) -> Ed25519PrivateKey:
    """Read ``<ledger>.sign`` (regular file, owned by the running user, mode 0600).

    Raises:
        LedgerOpenError: missing, unsafe (see `keys.read_private_file`) or malformed.
    """
    path = signing_key_path(ledger_path)
    try:
        text = read_private_file(path, "signing key")
    except FileNotFoundError:
        raise LedgerOpenError(
            f"the signing key {str(path)!r} of this ledger is missing; restore it from your "
            "backup (a new key would make every checkpoint an auditor holds fail)") from None
    try:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(text.decode("ascii").strip()))
    except (UnicodeDecodeError, ValueError):
        raise LedgerOpenError(f"the signing key {str(path)!r} is malformed") from None


def parse_public_key(text: str, where: str) -> bytes:
    """The raw public key from its hex text.

    Raises:
        LedgerOpenError: the text is not a 32-byte hex key.
    """
    try:
        raw = bytes.fromhex(text.strip())
        Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise LedgerOpenError(f"{where} is not an Ed25519 public key (64 hex digits)") from None
    return raw


def load_public_key(path: Path) -> bytes:
    """Read a public key file (hex).

    Raises:
        LedgerOpenError: missing, unreadable or malformed.
    """
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else "not text"
        raise LedgerOpenError(f"cannot read the public key {str(path)!r}: {why}") from None
    return parse_public_key(text, f"the public key file {str(path)!r}")


def head_message(ledger_id: str, version: int, seq: int, last_hash: str,
                 counter: int | None = None, key_fingerprint: str = "") -> bytes:
    """The bytes a head signature covers (schema 4: rules, key fingerprint and counter too)."""
    if int(version) >= 4:
        return json.dumps([HEAD_LABEL_V2, ledger_id, int(version), VERIFY_RULES,
                           key_fingerprint, int(seq), last_hash, int(counter or 0)]
                          ).encode("utf-8")
    return json.dumps([HEAD_LABEL, ledger_id, int(version), int(seq), last_hash]).encode("utf-8")


def sign_head(key: Ed25519PrivateKey, ledger_id: str, version: int, seq: int,
              last_hash: str, counter: int = 0) -> str:
    """Hex Ed25519 signature of the chain head."""
    fp = fingerprint(public_bytes(key))
    return key.sign(head_message(ledger_id, version, seq, last_hash, counter, fp)).hex()


def head_signature_ok(public: bytes, signature: str | None, ledger_id: str, version: int,
                      seq: int, last_hash: str, counter: int | None = None) -> bool:
    """True iff `signature` is the key's signature of this head.

    A schema 4 head also needs its `counter` (None: it cannot verify).
    """
    if not signature or (int(version) >= 4 and counter is None):
        return False
    message = head_message(ledger_id, version, seq, last_hash, counter, fingerprint(public))
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(bytes.fromhex(signature), message)
    except (InvalidSignature, ValueError):
        return False
    return True
