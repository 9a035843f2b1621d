"""Signed chain heads: read them, keep them (checkpoints, manifests), check a ledger against them.

A checkpoint file (`privpipe ledger checkpoint`) is the JSON of a `SignedHead`
plus a ``format`` and ``created_at``. Release manifests carry the signed head a
release ended at under ``ledger_head``. `expected_faults` compares a ledger
with heads kept earlier: a head whose signature does not verify is refused; a
ledger signed by another key was re-keyed; a ledger whose entries end before a
kept head was rolled back or truncated; a ledger whose entry at a kept seq has
another hash had its history rewritten. A head kept as seq and hash only
(`PlainHead`, ``--expect-head SEQ:HASH``) is checked for the last two.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ledger import signing
from ledger.chain import GENESIS_HASH
from ledger.errors import LedgerOpenError
from ledger.keyring import Keyring
from ledger.records import SignedHead
from ledger.schema import first_row
from ledger.storage import head_counter
from schemas.errors import ParameterError

CHECKPOINT_FORMAT = "privpipe-ledger-checkpoint-v1"


def read_head(con: duckdb.DuckDBPyConnection, key: Keyring) -> SignedHead:
    """The ledger's current signed head (schema 3).

    Raises:
        LedgerOpenError: the ledger has no signing key yet (schema older than 3).
    """
    if key.public is None:
        raise LedgerOpenError("this ledger has no signed head before schema 3; run "
                              "`privpipe ledger migrate`")
    row = first_row(con.execute("SELECT last_seq, last_hash, signature FROM chain_head "
                                "WHERE id = 1"))
    seq, last_hash, sig = (0, GENESIS_HASH, "") if row is None else row
    if key.version < 4:
        return SignedHead(key.ledger_id, key.version, int(seq), str(last_hash), sig or "",
                          signing.fingerprint(key.public), key.public.hex())
    return SignedHead(key.ledger_id, key.version, int(seq), str(last_hash), sig or "",
                      signing.fingerprint(key.public), key.public.hex(), head_counter(con),
                      signing.VERIFY_RULES)


@dataclass(frozen=True)
class PlainHead:
    """A head an auditor kept as seq and hash only (``--expect-head SEQ:HASH``): no signature.

    The ledger must contain it: an entry at `seq` with this `hash` (seq 0: the genesis).
    """

    seq: int
    hash: str


def parse_expect_head(text: str) -> tuple[str, SignedHead | PlainHead]:
    """``SEQ:HASH`` (a head kept as seq and hash) or the path of a checkpoint file.

    Raises:
        ParameterError: neither a valid ``SEQ:HASH`` nor a readable checkpoint.
    """
    m = re.fullmatch(r"(\d+):([0-9a-fA-F]{64})", text.strip())
    if m:
        return f"the kept head {text.strip()}", PlainHead(int(m.group(1)), m.group(2).lower())
    return text, load_checkpoint(text)


def head_from_dict(data: Any, where: str) -> SignedHead:
    """A `SignedHead` from its JSON data.

    Raises:
        ParameterError: a field is missing or of the wrong type (naming `where`).
    """
    fields: dict[str, type] = {"ledger_id": str, "schema_version": int, "seq": int,
                               "hash": str, "signature": str, "key_fingerprint": str,
                               "public_key": str}
    if not isinstance(data, dict):
        raise ParameterError(f"{where}: not a signed ledger head (a JSON object)")
    if isinstance(data.get("schema_version"), int) and data["schema_version"] >= 4:
        fields.update(counter=int, rules=str)  # under the signature from schema 4
    for name, typ in fields.items():
        if not isinstance(data.get(name), typ) or isinstance(data.get(name), bool):
            raise ParameterError(f"{where}: field {name!r} is missing or not a {typ.__name__}")
    return SignedHead(**{k: data[k] for k in fields})


def write_checkpoint(path: str | os.PathLike[str], head: SignedHead, created_at: str) -> Path:
    """Write a checkpoint file (a new file; an existing one is never overwritten).

    Raises:
        ParameterError: the file exists or cannot be written.
    """
    out = Path(path)
    text = json.dumps({"format": CHECKPOINT_FORMAT, "created_at": created_at, **head.to_dict()},
                      indent=1, sort_keys=True) + "\n"
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise ParameterError(f"{str(out)!r} exists; a checkpoint is never overwritten") from None
    except OSError as err:
        raise ParameterError(f"cannot write {str(out)!r}: {err.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return out


def load_checkpoint(path: str | os.PathLike[str]) -> SignedHead:
    """Read a checkpoint file.

    Raises:
        ParameterError: unreadable, not JSON, or not a checkpoint.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise ParameterError(f"cannot read the checkpoint {str(p)!r}: {err.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise ParameterError(f"{str(p)!r} is not a checkpoint (not JSON)") from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ParameterError(f"{str(p)!r} is not a privpipe ledger checkpoint")
    return head_from_dict(data, str(p))


def manifest_heads(out_dir: str | os.PathLike[str]) -> list[tuple[str, SignedHead]]:
    """The signed heads of the release manifests under `out_dir` (``*/manifest.json``).

    Raises:
        ParameterError: `out_dir` is not a directory, a manifest is not JSON, or
            no manifest carries a signed head.
    """
    root = Path(out_dir)
    if not root.is_dir():
        raise ParameterError(f"{str(root)!r} is not a directory of releases")
    found = []
    for m in sorted([*root.glob("manifest.json"), *root.glob("*/manifest.json")]):
        try:
            data = json.loads(m.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            raise ParameterError(f"cannot read the release manifest {str(m)!r}") from None
        if isinstance(data, dict) and "ledger_head" in data:
            found.append((str(m), head_from_dict(data["ledger_head"], f"{m}: ledger_head")))
    if not found:
        raise ParameterError(f"no release manifest under {str(root)!r} carries a signed "
                             "ledger head (ledger_head)")
    return found


def expected_faults(con: duckdb.DuckDBPyConnection, key: Keyring, n: int,
                    heads: Sequence[tuple[str, SignedHead | PlainHead]]) -> str | None:
    """The first way the ledger contradicts a head kept earlier, or None."""
    for where, h in heads:
        if isinstance(h, PlainHead):
            problem = _contains(con, n, where, h.seq, h.hash)
            if problem:
                return problem
            continue
        problem = signature_problem(where, h, key) or _contains(con, n, where, h.seq, h.hash)
        if problem:
            return problem
    return None


def signature_problem(where: str, h: SignedHead, key: Keyring) -> str | None:
    """Why the kept signed head `h` is not a head this ledger's key signed, or None.

    Checks the signature over the head's fields, the ledger id and the
    signing key's fingerprint; not whether the chain contains it (`contains`).
    """
    public = bytes.fromhex(h.public_key) if _is_hex(h.public_key) else b""
    if (signing.fingerprint(public) != h.key_fingerprint
            or (h.schema_version >= 4 and h.rules != signing.VERIFY_RULES)
            or not signing.head_signature_ok(public, h.signature, h.ledger_id,
                                             h.schema_version, h.seq, h.hash, h.counter)):
        return f"{where}: its signature does not verify (not a head this key signed)"
    if h.ledger_id != key.ledger_id:
        return (f"{where} is a head of ledger {h.ledger_id}, not of this one "
                f"({key.ledger_id}): replaced ledger?")
    if key.public is None or signing.fingerprint(key.public) != h.key_fingerprint:
        return (f"{where} was signed by key {h.key_fingerprint[:16]}…, the ledger is signed "
                "by another key: the ledger was re-keyed")
    return None


def _contains(con: duckdb.DuckDBPyConnection, n: int, where: str, seq: int, hash_: str
              ) -> str | None:
    """Why a ledger of `n` entries does not contain the head (seq, hash), or None."""
    if seq > n:
        return (f"the ledger ends at seq {n}, but {where} has its head at seq {seq}: "
                "the ledger was rolled back or truncated")
    row = first_row(con.execute("SELECT hash FROM entries WHERE seq = ?", [seq]))
    actual = GENESIS_HASH if seq == 0 else (row[0] if row else None)
    if actual != hash_:
        return (f"entry seq {seq} does not have the hash {where} recorded: the ledger's "
                "history was rewritten")
    return None


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def contains(con: duckdb.DuckDBPyConnection, n: int, where: str, seq: int, hash_: str
             ) -> str | None:
    """Why a ledger of `n` entries does not contain the head (seq, hash), or None."""
    return _contains(con, n, where, seq, hash_)
