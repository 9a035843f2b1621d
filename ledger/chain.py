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
`ledger.verify` names the first bad one. The chain head (last seq and hash) is
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

import pyarrow as pa
import pyarrow.compute as pc

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


def runs_text(runs: Sequence[Sequence[int]]) -> str:
    """Canonical text of an entry's step runs: ``[["start","stop","amount"],...]``."""
    return "[" + ",".join(f'["{int(a)}","{int(b)}","{int(q)}"]' for a, b, q in runs) + "]"


def canonical(entry: dict[str, Any], runs: Sequence[Sequence[int]] = ()) -> bytes:
    """Canonical bytes of one entry (all hashed columns, then its step runs)."""
    parts = [_column_text(c, entry.get(c)) for c in HASHED_COLUMNS]
    parts.append(runs_text(runs))
    return ("[" + ",".join(parts) + "]").encode("utf-8")


def entry_hash(prev_hash: str, data: bytes) -> str:
    """SHA-256 of the previous hash and an entry's canonical bytes, as hex."""
    h = hashlib.sha256(prev_hash.encode("ascii"))
    h.update(b"|")
    h.update(data)
    return h.hexdigest()


_SPECIAL = r'[\x00-\x1f"\\]'  # what JSON string encoding escapes (see test_ledger_tamper)
_CONTROL = r"[\x00-\x1f]"
_SLICE = 1 << 16  # rows per Arrow join (keeps string offsets far below 2 GiB)


def json_texts(values: pa.Array) -> pa.Array:
    """JSON text of every value of a string array, exactly as `canonical` writes it.

    ``null`` for None, else the text in double quotes with backslashes and double
    quotes escaped; values with control characters (rare) go through
    `json.encoder.encode_basestring` itself.
    """
    values = values.cast(pa.string())
    special = pc.match_substring_regex(values, _SPECIAL)
    if pc.any(special).as_py():
        escaped = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
        text = pc.binary_join_element_wise('"', escaped, '"', "")
        control = pc.fill_null(pc.match_substring_regex(values, _CONTROL), False)
        if pc.any(control).as_py():
            exact_text = [_estr(v) for v in values.filter(control).to_pylist()]
            text = pc.replace_with_mask(text, control, pa.array(exact_text, pa.string()))
    else:
        text = pc.binary_join_element_wise('"', values, '"', "")
    return pc.fill_null(text, "null")


def int_texts(values: pa.Array) -> pa.Array:
    """JSON text of an integer column given as int64 or decimal strings: ``"123"`` or null."""
    return pc.fill_null(pc.binary_join_element_wise('"', values.cast(pa.string()), '"', ""),
                        "null")


def encode_batch(
    arrays: dict[str, pa.Array],
    shared: dict[str, Any],
    runs_texts: pa.Array | None = None,
    texts: dict[str, pa.Array] | None = None,
) -> list[bytes]:
    """Canonical bytes of n entries, built column by column with Arrow compute.

    Args:
        arrays: the varying columns, each an Arrow array of n values: integer
            columns as int64 or decimal-integer strings, ``created_at`` as its
            canonical text, the others as strings (None for NULL).
        shared: the columns with one value for all n entries (any of HASHED_COLUMNS).
        runs_texts: each entry's step runs as `runs_text` (None: no entry has runs).
        texts: columns of `arrays` whose JSON texts the caller built already
            (used instead of encoding them here).

    Returns:
        For each entry exactly ``canonical(entry, runs)`` (the tests check it).
    """
    n = len(next(iter(arrays.values()))) if arrays else 0
    pieces: list[Any] = []
    const = "["
    for c in HASHED_COLUMNS:
        if c in shared:
            const += _column_text(c, shared[c])
        elif texts and c in texts:
            pieces += [const, texts[c]]
            const = ""
        else:
            arr = arrays[c]
            plain = arr.null_count == 0 and (
                c in _INT_COLUMNS or not pc.any(pc.match_substring_regex(arr, _SPECIAL)).as_py())
            if plain:  # "value": the quotes go into the constant parts of the one join
                pieces += [const + '"', arr.cast(pa.string())]
                const = '"'
            else:
                pieces += [const, int_texts(arr) if c in _INT_COLUMNS else json_texts(arr)]
                const = ""
        const += ","
    if runs_texts is None:
        const += "[]]"
    else:
        pieces += [const, runs_texts]
        const = "]"
    out: list[bytes] = []
    for lo in range(0, n, _SLICE):
        part = [p if isinstance(p, str) else p.slice(lo, _SLICE) for p in pieces]
        joined = pc.binary_join_element_wise(*part, const, "")
        out += joined.cast(pa.binary()).to_pylist()
    return out


def chain_hashes(prev_hash: str, data: Sequence[bytes]) -> list[str]:
    """The hashes of consecutive entries after `prev_hash` (one SHA-256 each)."""
    out = []
    append = out.append
    sha = hashlib.sha256
    prev = prev_hash.encode("ascii")
    for d in data:
        h = sha(prev)
        h.update(b"|")
        h.update(d)
        x = h.hexdigest()
        append(x)
        prev = x.encode("ascii")
    return out


class BatchEncoder:
    """Canonical encoding of many entries that share most columns (Python values).

    The shared columns are encoded once, the others column by column with Arrow
    (`encode_batch`). `encode_columns` produces exactly the bytes `canonical`
    would for each entry (the tests check the equality).
    """

    def __init__(self, shared: dict[str, Any]):
        self._shared = dict(shared)
        self._varying = [c for c in HASHED_COLUMNS if c not in shared]

    def encode(self, entry: dict[str, Any], runs: Sequence[Sequence[int]] = ()) -> bytes:
        """Canonical bytes of one entry (`entry` gives the columns not in `shared`)."""
        cols = {c: [entry.get(c)] for c in self._varying}
        return self.encode_columns(cols, [runs])[0]

    def encode_columns(
        self, columns: dict[str, list[Any]], runs: Sequence[Sequence[Sequence[int]]]
    ) -> list[bytes]:
        """Canonical bytes of n entries given as columns (each a list of n values)."""
        arrays = {}
        for c in self._varying:
            values = columns[c]
            if c in _INT_COLUMNS:
                arrays[c] = pa.array([None if v is None else str(int(v)) for v in values],
                                     pa.string())
            elif c == "created_at":
                arrays[c] = pa.array([None if v is None else format_ts(v) for v in values],
                                     pa.string())
            else:
                arrays[c] = pa.array([None if v is None else str(v) for v in values],
                                     pa.string())
        runs_texts = None
        if any(runs):
            runs_texts = pa.array([runs_text(r) for r in runs], pa.string())
        if not arrays:  # every column shared
            return [canonical({**self._shared}, r) for r in runs]
        return encode_batch(arrays, self._shared, runs_texts)
