"""A user's fingerprint is the SHA-256 of the byte layout its docstring documents.

Fingerprints are stored in ledgers (a release is bound to its input's), so a
faster encoding must hash the same bytes as every earlier version: the
reference here builds them with `struct` and `tobytes`, independently of
`ingest.fingerprint`.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from ingest.fingerprint import user_fingerprint
from ingest.types import Curve, Stream

VERSION = b"privpipe-fingerprint-v1\0"


def _text(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(b)) + b


def _floats(a) -> bytes:
    a = np.asarray(a, dtype=np.float64)
    return struct.pack("<Q", a.size) + struct.pack(f"<{a.size}d", *a.ravel(order="C"))


def _ints(a) -> bytes:
    a = np.asarray(a, dtype=np.int64)
    return struct.pack("<Q", a.size) + struct.pack(f"<{a.size}q", *a.ravel())


def _reference_curves(user: str, curves: list[Curve], columns: list[str]) -> str:
    blob = VERSION + _text(user) + b"".join(_text(c) for c in columns)
    for c in sorted(curves, key=lambda c: c.curve_id):
        start = float("nan") if c.start is None else c.start
        blob += _text("curve") + _text(c.curve_id) + struct.pack("<d", start)
        blob += _floats(c.t) + _floats(c.values)
    return hashlib.sha256(blob).hexdigest()


def _reference_streams(user: str, streams: list[Stream], columns: list[str]) -> str:
    blob = VERSION + _text(user) + b"".join(_text(c) for c in columns)
    for s in sorted(streams, key=lambda s: s.stream_id):
        blob += _text("stream") + _text(s.stream_id) + _ints(s.steps) + _floats(s.values)
    return hashlib.sha256(blob).hexdigest()


def _curve(cid: str, n: int, start: float | None, rng, fortran: bool = False) -> Curve:
    values = rng.normal(size=(n, 2))
    if fortran:
        values = np.asfortranarray(values)  # the row-major bytes are hashed all the same
    return Curve(curve_id=cid, t=np.cumsum(rng.uniform(0.1, 1, n)) - 0.1, values=values,
                 start=start)


@pytest.mark.parametrize("user", ["u1", "ünïcødé-ß", ""])
def test_curve_fingerprints_hash_the_documented_bytes(user):
    rng = np.random.default_rng(7)
    curves = [_curve("b", 5, None, rng), _curve("a", 3, 12.5, rng, fortran=True),
              _curve("é", 1, -3.0, rng)]
    want = _reference_curves(user, curves, ["x", "y"])
    assert user_fingerprint(user, curves, ["x", "y"]) == want
    assert user_fingerprint(user, curves[::-1], ("x", "y")) == want  # any item order
    assert user_fingerprint(user, curves[:1], ["x", "y"]) == _reference_curves(
        user, curves[:1], ["x", "y"])
    # every part counts: a column name, a start, a value
    assert user_fingerprint(user, curves, ["y", "x"]) != want
    moved = [Curve(c.curve_id, c.t, c.values, None if c.start else 0.0) for c in curves]
    assert user_fingerprint(user, moved, ["x", "y"]) != want
    curves[1].values[2, 1] += 1e-12
    assert user_fingerprint(user, curves, ["x", "y"]) != want


def test_stream_fingerprints_hash_the_documented_bytes():
    rng = np.random.default_rng(8)
    steps = np.arange(10, 20, dtype=np.int64)
    streams = [Stream("s2", steps, rng.uniform(size=10)),
               Stream("s1", steps[::2], rng.uniform(size=5))]  # a strided view of steps
    want = _reference_streams("u", streams, ["value"])
    assert user_fingerprint("u", streams, ["value"]) == want
    assert user_fingerprint("u", streams[:1], ["value"]) == _reference_streams(
        "u", streams[:1], ["value"])
    shifted = [Stream(s.stream_id, s.steps + 1, s.values) for s in streams]
    assert user_fingerprint("u", shifted, ["value"]) != want
