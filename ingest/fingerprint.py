"""SHA-256 fingerprints of validated, converted data.

A user's fingerprint hashes a canonical byte encoding of their data after
validation and conversion: curves (or streams) in id order, each with its id,
its times (or steps) and values as little-endian float64 (int64 for steps),
and the curve's start. The file's row order, the chunking of the read and the
input format (CSV, Parquet, DuckDB) do not change it; any converted value does.

The input's fingerprint hashes the sorted (user id, user fingerprint) pairs of
the accepted users, then the sorted ids of the rejected users (their rows are
not hashed: they are not released). It is the one fingerprint of an input:
``privpipe validate`` prints it, a release records it in the ledger and its
manifest, and its report prints it, so an auditor can link a validated file to
its release. It depends on the domain (units, projection, value columns),
because it hashes converted values: validate against the release's domain.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Iterable, Sequence

import numpy as np

from ingest.types import Curve, Stream

_VERSION = b"privpipe-fingerprint-v1\0"


_PACK_LEN = struct.Struct("<Q").pack
_PACK_START = struct.Struct("<d").pack
_F8, _I8 = np.dtype("<f8"), np.dtype("<i8")


def _text_bytes(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    return _PACK_LEN(len(b)) + b


_CURVE, _STREAM = _text_bytes("curve"), _text_bytes("stream")


def _text(h: hashlib._Hash, s: str) -> None:
    h.update(_text_bytes(s))


def _array(h: hashlib._Hash, a: np.ndarray, dtype: np.dtype) -> None:
    b = np.ascontiguousarray(a, dtype=dtype)
    h.update(_PACK_LEN(b.size))
    h.update(b)  # its bytes (a C-contiguous buffer), without a copy


@functools.lru_cache(maxsize=256)
def _columns_bytes(columns: tuple[str, ...]) -> bytes:
    return b"".join(_text_bytes(c) for c in columns)


def user_fingerprint(
    user_id: str, items: Sequence[Curve] | Sequence[Stream], columns: Iterable[str]
) -> str:
    """Fingerprint one user's canonical data.

    The bytes hashed, in order: the version tag, the user id, each value
    column name (texts as a little-endian u64 byte count and their UTF-8
    bytes), then per item in id order: ``"curve"``, its id, its start
    (little-endian float64, NaN when unknown), its times and its values; or
    ``"stream"``, its id, its steps (int64) and its values (arrays as a u64
    element count and their little-endian elements, row-major).

    Args:
        user_id: the user.
        items: the user's `Curve` or `Stream` objects.
        columns: the value column names (part of the canonical form).

    Returns:
        The SHA-256 hex digest.
    """
    h = hashlib.sha256(_VERSION)
    h.update(_text_bytes(user_id) + _columns_bytes(tuple(columns)))
    if len(items) > 1:
        items = sorted(items, key=_item_id)
    for item in items:
        if isinstance(item, Curve):
            h.update(_CURVE + _text_bytes(item.curve_id)
                     + _PACK_START(float("nan") if item.start is None else item.start))
            _array(h, item.t, _F8)
            _array(h, item.values, _F8)
        else:
            h.update(_STREAM + _text_bytes(item.stream_id))
            _array(h, item.steps, _I8)
            _array(h, item.values, _F8)
    return h.hexdigest()


def _item_id(item: Curve | Stream) -> str:
    return item.curve_id if isinstance(item, Curve) else item.stream_id


class InputFingerprint:
    """Incremental hash over (user id, fingerprint) pairs fed in sorted user order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256(_VERSION + b"input\0")
        self._last: str | None = None
        self._rejecting = False

    def add(self, user_id: str, fingerprint: str) -> None:
        """Add one user; users must arrive in strictly increasing id order."""
        if self._rejecting:
            raise RuntimeError("internal error (a bug): accepted user after rejected ones")
        if self._last is not None and not user_id > self._last:
            raise RuntimeError("internal error (a bug): users reached the fingerprint unsorted")
        self._last = user_id
        _text(self._h, user_id)
        self._h.update(bytes.fromhex(fingerprint))

    def reject(self, user_id: str) -> None:
        """Add one rejected user, after every accepted one, in strictly increasing id order."""
        if self._last is not None and self._rejecting and not user_id > self._last:
            raise RuntimeError("internal error (a bug): rejected users reached the fingerprint "
                               "unsorted")
        self._rejecting = True
        self._last = user_id
        _text(self._h, "rejected")
        _text(self._h, user_id)

    def hexdigest(self) -> str:
        """The input's SHA-256 hex digest."""
        return self._h.hexdigest()


def input_fingerprint(user_fingerprints: dict[str, str], rejected: Iterable[str] = ()) -> str:
    """Fingerprint of a whole input (see the module docstring); arguments in any order.

    Args:
        user_fingerprints: accepted user id -> `user_fingerprint`.
        rejected: ids of rejected users (``""``, rows without a user id, is skipped).
    """
    acc = InputFingerprint()
    for u in sorted(user_fingerprints):
        acc.add(u, user_fingerprints[u])
    for u in sorted({r for r in rejected if r} - set(user_fingerprints)):
        acc.reject(u)
    return acc.hexdigest()


class OrderedInputFingerprint:
    """`input_fingerprint` of users met one by one in increasing id order, holding no pair.

    A release's staging meets every user once, in user order (the reader's
    order, `ingest.pipeline`): the accepted users are hashed as they come and
    only the rejected ids are kept (they are hashed after all the accepted
    ones), so nothing per accepted user stays in memory. The digest is that of
    `input_fingerprint` over the same users.
    """

    def __init__(self) -> None:
        self._acc = InputFingerprint()
        self._rejected: list[str] = []
        self._last: str | None = None
        self._digest: str | None = None
        self.users = 0

    def _next(self, user_id: str) -> None:
        if self._digest is not None:
            raise RuntimeError("internal error (a bug): a user after the input's digest")
        if self._last is not None and not user_id > self._last:
            raise RuntimeError("internal error (a bug): users reached the fingerprint unsorted")
        self._last = user_id

    def add(self, user_id: str, fingerprint: str) -> None:
        """Add one accepted user (ids strictly increasing over accepted and rejected users)."""
        self._next(user_id)
        self._acc.add(user_id, fingerprint)
        self.users += 1

    def reject(self, user_id: str) -> None:
        """Add one rejected user (``""``, rows without a user id, is skipped)."""
        if user_id:
            self._next(user_id)
            self._rejected.append(user_id)

    def hexdigest(self) -> str:
        """The input's SHA-256 hex digest (no user may be added after it)."""
        if self._digest is None:
            for u in self._rejected:
                self._acc.reject(u)
            self._digest = self._acc.hexdigest()
        return self._digest
