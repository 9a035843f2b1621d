"""The hash chain over ledger entries.

Every entry's ``hash`` is

    SHA-256( prev_hash || "|" || canonical(entry) )

where ``prev_hash`` is the previous entry's hash (64 zeros for seq 1) and
``canonical(entry)`` is the UTF-8 JSON array of *every* column of the entry in
`HASHED_COLUMNS` order (amounts as decimal integer strings of quanta, the JSON
columns as their stored text, the timestamp as ``YYYY-MM-DD HH:MM:SS.ffffff``
UTC) followed by the entry's w-event step runs ``[[start, stop, amount], ...]``.
Changing any stored byte of an entry, deleting an entry or swapping two entries
therefore breaks the chain at (or right after) that entry, and `verify` in
`ledger.ledger` names the first bad one. The chain head (last seq and hash) is
also kept in the ``chain_head`` table with a keyed seal, so truncating the tail
or re-hashing the whole chain without the noise key is detected as well.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from json.encoder import encode_basestring as _estr  # type: ignore[attr-defined]
from typing import Any

GENESIS_HASH = "0" * 64

HASHED_COLUMNS: tuple[str, ...] = (
    "seq", "entry_id", "created_at", "actor", "release_id", "user_id", "domain", "step",
    "stream_id", "kind", "amount", "notion", "cap", "balance_after", "mechanism",
    "parameters", "detail", "reason", "flow_run_id", "input_fingerprint",
)
_INT_COLUMNS = frozenset({"seq", "amount", "cap", "balance_after"})
_TS_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def format_ts(ts: datetime | str) -> str:
    """The canonical text of an entry timestamp (UTC, microseconds)."""
    if isinstance(ts, str):
        return ts
    return ts.strftime(_TS_FORMAT)


def _enc(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _column_text(name: str, value: Any) -> str:
    # Same bytes as json.dumps(str(value), ensure_ascii=False), via the C string encoder.
    if value is None:
        return "null"
    if name in _INT_COLUMNS:
        return f'"{int(value)}"'
    if name == "created_at":
        return _estr(format_ts(value))
    return _estr(str(value))


def _runs_text(runs: Sequence[Sequence[int]]) -> str:
    return "[" + ",".join(f'["{int(a)}","{int(b)}","{int(q)}"]' for a, b, q in runs) + "]"


def canonical(entry: dict[str, Any], runs: Sequence[Sequence[int]] = ()) -> bytes:
    """Canonical bytes of one entry (all hashed columns, then its step runs)."""
    parts = [_column_text(c, entry.get(c)) for c in HASHED_COLUMNS]
    parts.append(_runs_text(runs))
    return ("[" + ",".join(parts) + "]").encode("utf-8")


def entry_hash(prev_hash: str, data: bytes) -> str:
    """SHA-256 of the previous hash and an entry's canonical bytes, as hex."""
    h = hashlib.sha256(prev_hash.encode("ascii"))
    h.update(b"|")
    h.update(data)
    return h.hexdigest()


class BatchEncoder:
    """Fast canonical encoding of many entries that share most columns.

    A reserve or settle of 100,000 users writes entries that differ only in a
    few columns. The shared columns are encoded once, the others column by
    column (repeated values memoised), and each entry's bytes come from one
    format template. `encode_columns` produces exactly the bytes `canonical`
    would for each entry (the tests check the equality).
    """

    def __init__(self, shared: dict[str, Any]):
        self._shared = dict(shared)
        self._varying = [c for c in HASHED_COLUMNS if c not in shared]
        parts = [
            "%s" if c not in shared else _column_text(c, shared[c]).replace("%", "%%")
            for c in HASHED_COLUMNS
        ]
        self._template = "[" + ",".join(parts) + ",%s]"

    def encode(self, entry: dict[str, Any], runs: Sequence[Sequence[int]] = ()) -> bytes:
        """Canonical bytes of one entry (`entry` gives the columns not in `shared`)."""
        cols = {c: [entry.get(c)] for c in self._varying}
        return self.encode_columns(cols, [runs])[0]

    def encode_columns(
        self, columns: dict[str, list[Any]], runs: Sequence[Sequence[Sequence[int]]]
    ) -> list[bytes]:
        """Canonical bytes of n entries given as columns (each a list of n values)."""
        encoded = []
        for c in self._varying:
            values = columns[c]
            if c in _INT_COLUMNS:
                encoded.append(["null" if v is None else f'"{int(v)}"' for v in values])
            elif c in _MEMO_COLUMNS:
                memo: dict[Any, str] = {}
                out = []
                for v in values:
                    t = memo.get(v)
                    if t is None:
                        t = memo[v] = _column_text(c, v)
                    out.append(t)
                encoded.append(out)
            else:
                encoded.append(["null" if v is None else _column_text(c, v) for v in values])
        encoded.append([_runs_text(r) if r else "[]" for r in runs])
        template = self._template
        return [(template % t).encode("utf-8") for t in zip(*encoded, strict=True)]


_MEMO_COLUMNS = frozenset({"domain", "step", "stream_id", "kind", "notion", "cap", "detail",
                           "reason", "amount", "created_at", "actor", "release_id", "mechanism",
                           "parameters", "flow_run_id", "input_fingerprint"})
