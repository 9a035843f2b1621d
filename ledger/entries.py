"""Writing ledger entries: the one place that appends to the hash chain.

Every entry the ledger writes (reserve, deny, settle, refund, close) goes
through `append`, which links the entries to the chain head, inserts them and
their w-event step runs with one Arrow bulk insert each, and moves the sealed
chain head. The metadata columns shared by an operation's entries come from
`meta`; the detail texts of settle and refund entries from `settle_details`
and `refund_details`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from fractions import Fraction
from json.encoder import encode_basestring as _estr  # type: ignore[attr-defined]
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.accounting import Run
from ledger.chain import chain_hashes, encode_batch, runs_text
from ledger.keyring import Keyring
from ledger.storage import head, head_counter, registered
from schemas.errors import ParameterError

ENTRY_COLUMNS = (
    "seq", "entry_id", "prev_hash", "hash", "created_at", "actor", "release_id", "user_id",
    "domain", "step", "stream_id", "kind", "amount", "notion", "cap", "balance_after",
    "mechanism", "parameters", "detail", "reason", "flow_run_id", "input_fingerprint",
)
"""The columns of the ``entries`` table, in table order."""

HUGE_COLUMNS = ("amount", "cap", "balance_after")
_TYPES = {"seq": "BIGINT", "created_at": "TIMESTAMP", "amount": "HUGEINT",
          "cap": "HUGEINT", "balance_after": "HUGEINT"}


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Fraction):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def canonical_json(obj: Any, what: str) -> str:
    """Canonical JSON text (sorted keys, no spaces, Fractions as ``"p/q"``).

    Raises:
        ParameterError: `obj` is not JSON-serialisable (`what` names it).
    """
    try:
        return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                          default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"{what} must be JSON-serialisable: {err}") from None


def meta(now: str, actor: str, release_id: str, **columns: Any) -> dict[str, Any]:
    """The columns every entry of one operation shares (mechanism etc. default to NULL)."""
    out = {"created_at": now, "actor": actor, "release_id": release_id, "mechanism": None,
           "parameters": None, "flow_run_id": None, "input_fingerprint": None}
    out.update(columns)
    return out


def _settle_parts(breakdown: str, reserved: int, signature: str) -> tuple[str, str]:
    return (f'{{"breakdown":{breakdown},"reserve_seq":',
            f',"reserved":"{reserved}","signature":{_estr(signature)}}}')


def settle_details(parts: Sequence[tuple[str, int, str]], reserve_seqs: Sequence[int]
                   ) -> tuple[list[str], list[str]]:
    """Details of settle entries and their JSON string texts (as the hash encodes them).

    Each detail is the canonical JSON ``{"breakdown":…,"reserve_seq":…,"reserved":"…",
    "signature":"…"}`` of one (breakdown, reserved, signature) triple and reserve
    seq, built from a head and a tail shared by equal triples and joined with the
    seq column by column; its JSON-string text is built the same way (escaping
    commutes with concatenation and digits need none).
    """
    memo: dict[tuple[str, int, str], int] = {}
    codes = [memo.setdefault(p, len(memo)) for p in parts]
    heads, tails, ehead, etail = [], [], [], []
    for key in memo:
        h, t = _settle_parts(*key)
        heads.append(h)
        tails.append(t)
        ehead.append('"' + _estr(h)[1:-1])
        etail.append(_estr(t)[1:-1] + '"')
    idx = pa.array(codes, pa.int32())
    seqs = pa.array(reserve_seqs, pa.int64()).cast(pa.string())

    def join(head: list[str], tail: list[str]) -> list[str]:
        return pc.binary_join_element_wise(pa.array(head, pa.string()).take(idx), seqs,
                                           pa.array(tail, pa.string()).take(idx),
                                           "").to_pylist()

    return join(heads, tails), join(ehead, etail)


def refund_details(reserve_seqs: Sequence[int]) -> tuple[list[str], list[str]]:
    """Details of refund (or close) entries, ``{"reserve_seq":N}``, and their JSON texts."""
    seqs = list(map(str, reserve_seqs))
    return ([f'{{"reserve_seq":{s}}}' for s in seqs],
            [f'"{{\\"reserve_seq\\":{s}}}"' for s in seqs])


def append(
    con: duckdb.DuckDBPyConnection,
    key: Keyring,
    cols: dict[str, list[Any]],
    runs: Sequence[Sequence[Run]] | None,
    shared: dict[str, Any],
    texts: dict[str, list[str]] | None = None,
) -> range:
    """Hash-chain and bulk-insert entries; return their seqs. Moves the sealed chain head.

    Args:
        con: the connection of the caller's transaction.
        key: the ledger's keys (seal and sign the new chain head).
        cols: the varying columns as lists of n Python values (a column whose
            values are all equal is bound once, like `shared`).
        runs: each entry's w-event step runs (None: no entry has runs).
        shared: the columns with one value for every entry.
        texts: the canonical JSON text of some columns of `cols`, if the caller has it.

    The canonical bytes are built column by column (`chain.encode_batch`); only
    the SHA-256 link is computed per entry.
    """
    n = len(next(iter(cols.values()))) if cols else 0
    if n == 0:
        return range(0)
    shared, cols = dict(shared), dict(cols)
    for c, values in list(cols.items()):
        if values.count(values[0]) == n:  # one value for all: encoded and bound once
            shared[c] = values[0]
            del cols[c]
    pre = {c: pa.array(t, pa.string()) for c, t in (texts or {}).items() if c in cols}
    last_seq, last_hash = head(con)
    seqs = range(last_seq + 1, last_seq + 1 + n)
    ids = os.urandom(16 * n).hex()
    arrays: dict[str, pa.Array] = {
        "seq": pa.array(seqs, pa.int64()),
        "entry_id": pa.array([ids[i: i + 32] for i in range(0, 32 * n, 32)], pa.string()),
    }
    for c, values in cols.items():
        if c in HUGE_COLUMNS:
            memo = {v: None if v is None else str(int(v)) for v in set(values)}
            arrays[c] = pa.array(list(map(memo.__getitem__, values)), pa.string())
        else:
            arrays[c] = pa.array(values, pa.string())
    with_runs = runs is not None and any(runs)
    runs_texts = pa.array([runs_text(r) for r in runs], pa.string()) if with_runs else None
    hashes = chain_hashes(last_hash, encode_batch(arrays, shared, runs_texts, pre))
    arrays["prev_hash"] = pa.array([last_hash, *hashes[:-1]], pa.string())
    arrays["hash"] = pa.array(hashes, pa.string())
    _insert(con, pa.table(arrays), shared)
    if with_runs:
        _append_runs(con, seqs, cols, shared, runs or [])
    move_head(con, key, seqs[-1], hashes[-1])
    return seqs


def move_head(con: duckdb.DuckDBPyConnection, key: Keyring, seq: int, last_hash: str) -> None:
    """Set the chain head to (seq, last_hash), its counter + 1, with its seal and signature."""
    if key.version < 4:
        con.execute("UPDATE chain_head SET last_seq = ?, last_hash = ?, seal = ?, signature = ? "
                    "WHERE id = 1", [seq, last_hash, key.seal(seq, last_hash),
                                     key.sign(seq, last_hash)])
        return
    n = head_counter(con) + 1
    con.execute("UPDATE chain_head SET last_seq = ?, last_hash = ?, seal = ?, signature = ?, "
                "counter = ? WHERE id = 1", [seq, last_hash, key.seal(seq, last_hash, n),
                                             key.sign(seq, last_hash, n), n])


def _insert(con: duckdb.DuckDBPyConnection, tbl: pa.Table, shared: dict[str, Any]) -> None:
    exprs, params = [], []
    for c in ENTRY_COLUMNS:  # shared columns are bound once as parameters
        typ = _TYPES.get(c)
        if c in shared:
            value = shared[c]
            exprs.append(f"CAST(? AS {typ or 'VARCHAR'})")
            params.append(None if value is None else str(value) if typ != "BIGINT" else value)
        elif typ:
            exprs.append(f"CAST({c} AS {typ})")
        else:
            exprs.append(c)
    select = ", ".join(exprs)
    with registered(con, "_pp_new_entries", tbl):
        con.execute(f"INSERT INTO entries SELECT {select} FROM _pp_new_entries",  # noqa: S608
                    params)


def _append_runs(
    con: duckdb.DuckDBPyConnection,
    seqs: range,
    cols: dict[str, list[Any]],
    shared: dict[str, Any],
    runs: Sequence[Sequence[Run]],
) -> None:
    """Insert the step runs of the new entries, one row per run, built column by column."""
    counts = np.fromiter(map(len, runs), np.int64, len(runs))
    entry = np.repeat(np.arange(len(runs), dtype=np.int64), counts)  # the entry of each run
    starts, stops, amounts = zip(*(r for rr in runs for r in rr), strict=True)
    texts = {q: str(q) for q in set(amounts)}
    m = len(starts)
    run_cols: dict[str, pa.Array] = {"seq": pa.array(seqs.start + entry, pa.int64())}
    for c in ("kind", "user_id", "domain", "stream_id"):
        run_cols[c] = (pa.array([shared[c]] * m, pa.string()) if c in shared
                       else pa.array(cols[c], pa.string()).take(pa.array(entry)))
    run_cols["run_start"] = pa.array(starts)
    run_cols["run_stop"] = pa.array(stops)
    run_cols["amount"] = pa.array(list(map(texts.__getitem__, amounts)), pa.string())
    tbl = pa.table(run_cols)
    with registered(con, "_pp_new_runs", tbl):
        con.execute(
            "INSERT INTO step_runs SELECT seq, kind, user_id, domain, stream_id, "
            "run_start, run_stop, CAST(amount AS HUGEINT) FROM _pp_new_runs")
