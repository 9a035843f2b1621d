"""Verify: recompute the hash chain, its seal, every balance and every MAC; name the first fault.

One path for every ledger. The chain is checked set-based in DuckDB: per entry
(in seq order) the first failing check of: duplicate seq, missing seqs, step
runs that do not match their entry, prev_hash link, SHA-256 of the canonical
bytes (an entry whose hash does not match in SQL, e.g. text that needs the
JSON escapes of control characters, is re-hashed by `chain.canonical`). The
balances are replayed column-wise in Python on exact integers: gp/cgp
accounts as running sums per account, w-event accounts by the window sweep.
The first faulty entry (by position, then by check order) is named with its
seq and entry_id. Then the orphan step runs, the chain head and its keyed
seal, the domain and release MACs and the stored accounts are checked, in
that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger import accounting, counter, heads, history, schema, signing, storage, wevent_budget
from ledger.accounting import KIND_SIGN, Run
from ledger.chain import GENESIS_HASH, HASHED_COLUMNS, canonical, entry_hash
from ledger.columns import combine, group_running_sum, object_array
from ledger.entries import ENTRY_COLUMNS
from ledger.keyring import EMBEDDED, Keyring
from ledger.records import SignedHead, VerifyReport
from ledger.schema import first_row
from ledger.storage import head, load_domains, registered, runs_of

KINDS = ("reserve", "settle", "refund", "deny", "close", "policy")

# Chain problems, in the order they are checked for one entry.
DUPLICATE, MISSING, RUN_MISMATCH, PREV_LINK, HASH = 1, 2, 3, 4, 5
# Balance problems (after the chain checks of the entry).
(KIND, NO_USER, DOMAIN, NOTION, NEGATIVE, CAP_IN_FORCE, RUNS_SUM, GP_RUNS, BELOW_ZERO,
 BALANCE, OVER_CAP) = range(6, 17)

_CHAIN_MESSAGES = {
    DUPLICATE: "duplicate sequence number",
    RUN_MISMATCH: "a step run does not match its entry",
    PREV_LINK: "prev_hash does not match the previous entry's hash (entries swapped, inserted "
               "or edited)",
    HASH: "content does not match its hash (edited entry)",
}


def _json_sql(c: str, escape: bool) -> str:
    text = f"CAST(e.{c} AS VARCHAR)"
    if escape:  # as JSON does: backslash and double quote (control characters: in Python)
        text = f"replace(replace({text}, '\\', '\\\\'), '\"', '\\\"')"
    return f"CASE WHEN e.{c} IS NULL THEN 'null' ELSE concat('\"', {text}, '\"') END"


def _chain_sql() -> str:
    """Per-entry chain check in SQL (constant text, no input): the rows with a problem.

    The canonical text is built in SQL with the JSON escapes of backslash and
    double quote; an entry that needs more (a control character in a text
    column, an unusual timestamp) comes out with a hash mismatch and is
    re-hashed by the reference encoder (`chain.canonical`) before it counts.
    """
    numbers = ("seq", "amount", "cap", "balance_after")
    parts = []
    for c in HASHED_COLUMNS:
        if c == "created_at":
            parts.append("concat('\"', strftime(e.created_at, '%Y-%m-%d %H:%M:%S.%f'), '\"')")
        else:
            parts.append(_json_sql(c, escape=c not in numbers))
    canon = ", ',', ".join(parts)  # one concat() per entry: no quadratic copying
    return (
        # positions in (seq, entry_id) order over narrow rows, joined back to the entries
        "WITH w AS (SELECT seq AS w_seq, entry_id AS w_id, row_number() OVER o AS pos, "  # noqa: S608
        "lag(seq) OVER o AS prev_seq, lag(hash) OVER o AS prev_row_hash FROM entries "
        "WINDOW o AS (ORDER BY seq, entry_id)), "
        "e AS (SELECT x.*, w.pos, w.prev_seq, w.prev_row_hash FROM entries x "
        "JOIN w ON w.w_seq = x.seq AND w.w_id = x.entry_id), "
        "r AS (SELECT seq, '[' || string_agg('[\"' || CAST(run_start AS VARCHAR) || "
        "'\",\"' || CAST(run_stop AS VARCHAR) || '\",\"' || CAST(amount AS VARCHAR) || "
        "'\"]', ',' ORDER BY run_start, run_stop, amount) || ']' AS runs FROM step_runs "
        "GROUP BY seq), "
        # step runs belong to the first entry of their seq (a second one is a duplicate)
        "x AS (SELECT seq, kind, user_id, domain, stream_id FROM entries QUALIFY "
        "row_number() OVER (PARTITION BY seq ORDER BY entry_id) = 1), "
        "m AS (SELECT DISTINCT s.seq FROM step_runs s JOIN x ON x.seq = s.seq "
        "WHERE s.kind IS DISTINCT FROM x.kind OR s.user_id IS DISTINCT FROM x.user_id "
        "OR s.domain IS DISTINCT FROM x.domain OR s.stream_id IS DISTINCT FROM x.stream_id), "
        "c AS (SELECT e.pos, e.seq, e.entry_id, e.prev_seq, e.hash, e.prev_hash, "
        "e.prev_row_hash, m.seq IS NOT NULL AS bad_runs, "
        f"concat('[', {canon}, ',', coalesce(r.runs, '[]'), ']') AS canon "
        "FROM e LEFT JOIN r ON r.seq = e.seq LEFT JOIN m ON m.seq = e.seq), "
        "p AS (SELECT pos, seq, entry_id, prev_seq, CASE "
        f"WHEN prev_seq = seq THEN {DUPLICATE} "
        f"WHEN seq <> coalesce(prev_seq, 0) + 1 THEN {MISSING} "
        f"WHEN bad_runs THEN {RUN_MISMATCH} "
        f"WHEN prev_hash IS DISTINCT FROM coalesce(prev_row_hash, ?) THEN {PREV_LINK} "
        "WHEN sha256(prev_hash || '|' || canon) IS DISTINCT FROM hash "
        f"THEN {HASH} ELSE 0 END AS code FROM c) "
        "SELECT pos, seq, entry_id, prev_seq, code FROM p WHERE code > 0 ORDER BY pos"
    )


_CHAIN_SQL = _chain_sql()
_BALANCE_SQL = (
    "SELECT e.seq, e.entry_id, e.kind, e.user_id, e.domain, e.stream_id, e.notion, "
    "CAST(e.amount AS VARCHAR) AS amount, CAST(e.cap AS VARCHAR) AS cap, "
    "CAST(e.balance_after AS VARCHAR) AS balance_after, coalesce(r.n, 0) AS n_runs "
    "FROM entries e LEFT JOIN (SELECT seq, count(*) AS n FROM step_runs GROUP BY seq) r "
    "ON r.seq = e.seq ORDER BY e.seq, e.entry_id"
)


class _FirstFault:
    """The first faulty entry found so far: (position, check) order decides."""

    def __init__(self) -> None:
        self.best: tuple[int, int, int, str | None, str, int] | None = None

    def add(self, pos: int, code: int, seq: int, entry_id: str | None, message: str,
            checked: int) -> None:
        """Keep this problem if it comes before the current one."""
        if self.best is None or (pos, code) < self.best[:2]:
            self.best = (pos, code, seq, entry_id, message, checked)


def _bad(checked: int, msg: str, seq: int | None = None, eid: str | None = None
         ) -> VerifyReport:
    where = ""
    if seq is not None:
        where = f"entry seq {seq}" + (f" (entry_id {eid})" if eid else "") + ": "
    return VerifyReport(False, checked, seq, f"ledger integrity check failed: {where}{msg}", eid)


def _chain(con: duckdb.DuckDBPyConnection, found: _FirstFault) -> None:
    """The chain checks; problems go to `found`."""
    rows = con.execute(_CHAIN_SQL, [GENESIS_HASH]).fetchall()
    recheck = []
    for pos, seq, eid, prev_seq, code in rows:
        if code == MISSING:
            expected = (prev_seq or 0) + 1
            found.add(pos, code, expected, None,
                      f"entries seq {expected}..{seq - 1} are missing (deleted); the next entry "
                      f"is seq {seq} (entry_id {eid})", pos - 1)
        elif code == HASH:
            recheck.append((pos, seq))
        else:
            found.add(pos, code, seq, eid, _CHAIN_MESSAGES[code], pos - 1)
    if recheck:  # hash these entries with the reference encoder
        tbl = pa.table({"pos": _arrow_int64([p for p, _ in recheck])})
        columns = ", ".join(ENTRY_COLUMNS)
        with registered(con, "_pp_pos", tbl):
            cur = con.execute(
                f"SELECT pos, {columns} FROM (SELECT *, row_number() OVER "  # noqa: S608
                "(ORDER BY seq, entry_id) AS pos FROM entries) "
                "WHERE pos IN (SELECT pos FROM _pp_pos) ORDER BY pos")
            entries = [(pos, dict(zip(ENTRY_COLUMNS, v, strict=True)))
                       for pos, *v in cur.fetchall()]
        runs = runs_of(con, sorted({s for _, s in recheck}))
        for pos, e in entries:
            if entry_hash(e["prev_hash"], canonical(e, runs.get(e["seq"], []))) != e["hash"]:
                found.add(pos, HASH, e["seq"], e["entry_id"], _CHAIN_MESSAGES[HASH], pos - 1)


def _dictionary(col: pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """Codes (-1 for NULL) and distinct values of an Arrow column."""
    enc = pc.dictionary_encode(col.combine_chunks())
    codes = _int64(enc.indices, null=-1)
    return codes, enc.dictionary.to_pylist()


def _arrow_int64(values: Any) -> pa.Array:
    """An Arrow int64 array of integers, built from a numpy buffer (no pandas import)."""
    data = np.ascontiguousarray(np.asarray(values, dtype=np.int64))
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def _arrow_strings(values: list[str | None]) -> pa.Array:
    """An Arrow string array (None -> NULL) built from its buffers.

    ``pa.array`` imports pandas to test whether a list is array-like.
    """
    data = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(data) + 1, np.int32)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    nulls = len(values) - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.string(), len(data), [
        validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))], null_count=nulls)


def _int64(col: pa.ChunkedArray | pa.Array, null: int | None = None) -> np.ndarray:
    """An integer column as an int64 numpy copy of its Arrow buffers (NULL -> `null`).

    pyarrow's ``to_numpy``, ``np.asarray``, ``pa.array`` and ``pa.scalar`` import
    pandas (0.5-1 s of every ``privpipe ledger verify``); reading the buffers does not.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    arr = pc.cast(arr, pa.int64())
    n, off = len(arr), arr.offset
    out = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=n, offset=off * 8).copy()
    if arr.null_count:
        if null is None:
            raise ValueError("an integer column of the ledger has NULLs")
        bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[off:off + n].astype(bool)
        out[~valid] = null
    return out


def _first_seen(labels: np.ndarray) -> np.ndarray:
    """Relabel codes (-1 kept) 0, 1, ... in order of first appearance.

    ``pc.dictionary_encode`` numbers the distinct values of a column this way.
    """
    out = np.full(len(labels), -1, np.int64)
    ok = labels >= 0
    if ok.any():
        uniq, first, inverse = np.unique(labels[ok], return_index=True, return_inverse=True)
        rank = np.empty(len(uniq), np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
        out[ok] = rank[inverse]
    return out


def _per_row(col: pa.ChunkedArray, convert: Any = None) -> np.ndarray:
    """An ``object`` array of a column's values, converting each distinct value once."""
    codes, values = _dictionary(col)
    table = object_array([convert(v) if convert else v for v in values] + [None])
    return table[codes]


class _Rows:
    """The balance columns of every entry, in (seq, entry_id) order, as arrays."""

    def __init__(self, tbl: pa.Table, domains: dict[str, dict[str, Any]]):
        self.n = tbl.num_rows
        self.seq = _int64(tbl.column("seq"))
        self.entry_id = tbl.column("entry_id")
        for c in ("kind", "user_id", "domain", "stream_id", "notion"):
            setattr(self, c, _per_row(tbl.column(c)))
        for c in ("amount", "cap", "balance_after"):
            setattr(self, c, _per_row(tbl.column(c), int))
        self.n_runs = _int64(tbl.column("n_runs"))
        notion_of = {d: dom["notion"] for d, dom in domains.items()}
        self.dom_notion = _per_row(tbl.column("domain"), notion_of.get)
        self.codes = {c: _dictionary(tbl.column(c))[0] for c in ("user_id", "domain",
                                                                   "stream_id")}
        self._account_streams(tbl, wevent_budget.per_user_domains(domains))

    def _account_streams(self, tbl: pa.Table, per_user: frozenset[str]) -> None:
        """Each entry's account stream: '' for every stream of a per-user w-event domain."""
        self.account_stream = self.stream_id
        self.codes["account_stream"] = self.codes["stream_id"]
        if not per_user:
            return
        mine = _per_row(tbl.column("domain"), per_user.__contains__).astype(bool)
        self.account_stream = np.where(mine, wevent_budget.ALL_STREAMS, self.stream_id)
        # the codes `_dictionary` would give the new column, without building it in Arrow
        streams = _dictionary(tbl.column("stream_id"))[1]
        own = (streams.index(wevent_budget.ALL_STREAMS)
               if wevent_budget.ALL_STREAMS in streams else len(streams))
        self.codes["account_stream"] = _first_seen(
            np.where(mine, own, self.codes["stream_id"]))

    def checks(self) -> np.ndarray:
        """Per entry the first failing check of kind, user, domain, notion, sign (0: none)."""
        no_user = (self.user_id == "").astype(bool)
        marker = no_user & (self.kind == "close").astype(bool) & (self.amount == 0).astype(bool)
        policy = (self.kind == "policy").astype(bool)
        known_kind = np.isin(self.kind, np.array(KINDS, object))
        charge = ~no_user & ~policy  # an entry of an account
        return np.select([
            ~known_kind,
            (no_user & ~marker & ~policy) | (policy & ~no_user),
            np.equal(self.dom_notion, None) & (charge | policy),
            (self.notion != self.dom_notion).astype(bool) & charge,
            (self.amount < 0).astype(bool) & (charge | policy),
        ], [KIND, NO_USER, DOMAIN, NOTION, NEGATIVE], 0)

    def cap_checks(self) -> np.ndarray:
        """`CAP_IN_FORCE` where an account entry's cap is not the one the chain's policy set.

        The cap in force at an entry is the new cap of the latest ``policy``
        entry of its domain before it (entries before a domain's first policy
        entry, written by a schema older than 3, are not compared).
        """
        out = np.zeros(self.n, np.int64)
        self.in_force: dict[int, tuple[int, int]] = {}
        policy = np.flatnonzero((self.kind == "policy").astype(bool))
        charge = (self.user_id != "").astype(bool) & (self.kind != "policy").astype(bool)
        dom = self.codes["domain"]
        for d in np.unique(dom[policy]).tolist():
            rows = policy[dom[policy] == d]  # in seq order
            mine = np.flatnonzero(charge & (dom == d))
            at = np.searchsorted(self.seq[rows], self.seq[mine]) - 1
            mine, at = mine[at >= 0], at[at >= 0]
            force = self.amount[rows][at]
            bad = mine[(self.cap[mine] != force).astype(bool)]
            for i in bad.tolist()[:1]:
                k = int(np.searchsorted(self.seq[rows], self.seq[i])) - 1
                self.in_force[i] = (int(self.seq[rows][k]), int(self.amount[rows][k]))
            out[bad] = CAP_IN_FORCE
        return out

    def message(self, code: int, i: int, after: int | None) -> str:
        """The text of problem `code` at row `i` (`after`: the recomputed balance)."""
        return {
            KIND: lambda: f"unknown entry kind {self.kind[i]!r}",
            NO_USER: lambda: ("a policy entry with a user" if self.kind[i] == "policy"
                              else "entry without a user"),
            DOMAIN: lambda: f"unknown domain {self.domain[i]!r}",
            NOTION: lambda: (f"notion {self.notion[i]!r} differs from domain notion "
                             f"{self.dom_notion[i]!r}"),
            NEGATIVE: lambda: "negative amount",
            CAP_IN_FORCE: lambda: (f"recorded cap {self.cap[i]} differs from the cap "
                                   f"{self.in_force[i][1]} that policy entry seq "
                                   f"{self.in_force[i][0]} set (a cap changed outside the "
                                   "chain)"),
            RUNS_SUM: lambda: "amount differs from the sum of its step runs",
            GP_RUNS: lambda: "a gp/cgp entry has step runs",
            BELOW_ZERO: lambda: "balance would become negative (refund without reservation)",
            BALANCE: lambda: (f"recorded balance_after {self.balance_after[i]} differs from the "
                              f"recomputed {after}"),
            OVER_CAP: lambda: (f"admitted although the balance {after} exceeds the cap "
                               f"{self.cap[i]}"),
        }[code]()


def _after_checks(rows: _Rows, i: int, after: int) -> int:
    """The first failing check on an entry's recomputed balance (0: none)."""
    if after < 0:
        return BELOW_ZERO
    bal = rows.balance_after[i]
    if bal is None or bal != after:
        return BALANCE
    if rows.kind[i] == "reserve" and (rows.cap[i] is None or after > rows.cap[i]):
        return OVER_CAP
    return 0


def _wevent_replay(r: _Rows, take: list[int], runs: dict[int, list[Run]],
                   domains: dict[str, dict[str, Any]], codes: np.ndarray,
                   afters: np.ndarray) -> None:
    """Replay the w-event entries `take` in order; record the first problem in `codes`."""
    spent: dict[tuple[str, str, str], int] = {}
    history: dict[tuple[str, str, str], list[Run]] = {}
    for i in take:
        if codes[i]:
            break
        key = (r.user_id[i], r.domain[i], r.account_stream[i])
        rr = runs.get(int(r.seq[i]), [])
        if accounting.total(rr) != r.amount[i]:
            codes[i] = RUNS_SUM
            break
        sign = KIND_SIGN.get(r.kind[i], 0)
        after = spent.get(key, 0)
        if sign:
            history[key] = accounting.profile([*history.get(key, []),
                                               *((a, b, sign * q) for a, b, q in rr)])
            after = accounting.max_window(history[key], int(domains[key[1]]["w"]))[0]
        spent[key] = afters[i] = after
        codes[i] = _after_checks(r, i, after)
        if codes[i]:
            break


def _gp_replay(r: _Rows, rows: np.ndarray, acc: np.ndarray, codes: np.ndarray,
               afters: np.ndarray) -> None:
    """Running sums of the gp/cgp entries `rows` per account `acc`; problems go to `codes`."""
    if not len(rows):
        return
    sign = np.select([(r.kind[rows] == k).astype(bool) for k in KIND_SIGN],
                     list(KIND_SIGN.values()), 0).astype(object)
    running, _ = group_running_sum(acc[rows], sign * r.amount[rows], int(acc.max()) + 1)
    bal, cap = r.balance_after[rows], r.cap[rows]
    bal_none, cap_none = np.equal(bal, None), np.equal(cap, None)
    bal_f, cap_f = np.where(bal_none, 0, bal), np.where(cap_none, 0, cap)
    own = np.select([
        r.n_runs[rows] > 0,
        (running < 0).astype(bool),
        bal_none | (bal_f != running).astype(bool),
        (r.kind[rows] == "reserve").astype(bool) & (cap_none | (running > cap_f).astype(bool)),
    ], [GP_RUNS, BELOW_ZERO, BALANCE, OVER_CAP], 0)
    codes[rows] = np.where(codes[rows] > 0, codes[rows], own)
    afters[rows] = running


def _balances(con: duckdb.DuckDBPyConnection, domains: dict[str, dict[str, Any]],
              found: _FirstFault) -> pa.Table | None:
    """Replay every entry into the balances; return the recomputed spend per account.

    The result has one row per account in order of its first entry (columns
    user_id, domain, stream_id, spent as text); None when an entry is faulty.
    """
    r = _Rows(con.sql(_BALANCE_SQL).to_arrow_table(), domains)
    codes = r.checks()
    codes = np.where(codes > 0, codes, r.cap_checks())
    has_user = (r.user_id != "").astype(bool)
    is_wevent = (r.dom_notion == "wevent").astype(bool)
    known = ~np.equal(r.dom_notion, None)
    acc = np.full(r.n, -1, np.int64)
    users = np.flatnonzero(has_user)
    if len(users):
        pair, _ = combine(r.codes["user_id"][users], r.codes["domain"][users])
        acc[users] = combine(pair, r.codes["account_stream"][users])[0]
    afters = np.zeros(r.n, object)
    _gp_replay(r, np.flatnonzero(has_user & known & ~is_wevent), acc, codes, afters)
    wevent_rows = np.flatnonzero(has_user & is_wevent).tolist()
    runs = runs_of(con, [int(r.seq[i]) for i in wevent_rows]) if wevent_rows else {}
    _wevent_replay(r, wevent_rows, runs, domains, codes, afters)
    bad = np.flatnonzero(codes)
    if len(bad):
        i = int(bad[0])
        found.add(i + 1, int(codes[i]), int(r.seq[i]), r.entry_id[i].as_py(),
                  r.message(int(codes[i]), i, afters[i]), i + 1)
        return None
    # each account's spend after its last entry, accounts in order of their first entry
    n_acc = int(acc.max()) + 1 if len(users) else 0
    last = np.zeros(n_acc, np.int64)
    np.maximum.at(last, acc[users], users)
    first = np.full(n_acc, r.n, np.int64)
    np.minimum.at(first, acc[users], users)
    return pa.table({"i": _arrow_int64(np.arange(n_acc)),
                     "user_id": _arrow_strings(r.user_id[first].tolist()),
                     "domain": _arrow_strings(r.domain[first].tolist()),
                     "stream_id": _arrow_strings(r.account_stream[first].tolist()),
                     "spent": _arrow_strings([str(v) for v in afters[last].tolist()])})


def _macs(con: duckdb.DuckDBPyConnection, key: Keyring, n: int) -> VerifyReport | None:
    """The keyed MACs of the domain rows (schema 2 on); None when they all match."""
    if key.version < 2:
        return None
    cols = ", ".join(schema.domain_mac_columns(key.version))
    for *row, mac in con.execute(f"SELECT {cols}, mac FROM domains ORDER BY domain"  # noqa: S608
                                 ).fetchall():
        if mac != schema.domain_mac(key.noise_key, tuple(row), key.version):
            return _bad(n, f"domain {row[0]!r}: its row (cap, notion, w or units) was changed "
                           "outside privpipe (keyed MAC does not match)")
    return None


def _release_macs(con: duckdb.DuckDBPyConnection, key: Keyring, n: int) -> VerifyReport | None:
    if key.version < 2:
        return None
    for rid, state, manifest, mac in con.execute(
            "SELECT release_id, state, manifest, mac FROM releases ORDER BY release_id"
    ).fetchall():
        if mac != schema.release_mac(key.noise_key, (rid, state, manifest)):
            return _bad(n, f"release {rid!r}: its state or manifest was changed outside "
                           "privpipe (keyed MAC does not match)")
    return None


def _signed_history(con: duckdb.DuckDBPyConnection, key: Keyring) -> tuple[int, str]:
    """The oldest schema the ledger can be, from what no downgrade can hide, and why.

    Outside the database (`Keyring.floor`): a signing key, a public key, a
    pin (schema 3) or a head counter file (schema 4). Inside it: the columns
    and rows only later schemas write (a head counter: 4; a head signature,
    a signing key in ``meta``, policy entries, domain definitions: 3). The
    file's own ``schema_version`` is the claim this is checked against.
    """
    inside = [
        (4, storage.has_column(con, "chain_head", "counter"), "a head counter column"),
        (3, storage.has_column(con, "chain_head", "signature"), "a head signature column"),
        (3, storage.has_column(con, "domains", "definition"), "domain definitions"),
        (3, bool(con.execute("SELECT count(*) FROM meta WHERE key = 'signing_public_key'"
                             ).fetchall()[0][0]), "a signing key in meta"),
        (3, bool(con.execute("SELECT count(*) FROM entries WHERE kind = 'policy'"
                             ).fetchall()[0][0]), "policy entries in the chain"),
    ]
    floor, why = key.floor, key.floor_why
    for version, present, what in inside:
        if present and version > floor:
            floor, why = version, what
    return floor, why


def _counter_fault(con: duckdb.DuckDBPyConnection, key: Keyring, head_seq: int,
                   head_hash: str) -> str | None:
    """The chain head against the head counter file (schema 4), or None."""
    if key.counter_file is None:
        return None
    rec = counter.read(key.counter_file, private=key.noise is not None)
    if rec is None:
        if key.noise is None:
            return None  # an auditor without the operator's directory: reported as not checked
        return (f"the head counter file {str(key.counter_file)!r} is missing: without it a "
                "chain head restored from an older state cannot be told apart; restore it "
                "with the keys from backup")
    n = storage.head_counter(con)
    if rec.ledger_id != key.ledger_id:
        return (f"the head counter file {str(key.counter_file)!r} belongs to ledger "
                f"{rec.ledger_id}, not to this one ({key.ledger_id}): replaced ledger?")
    if n < rec.counter:
        return (f"the chain head's counter is {n}, but {str(key.counter_file)!r} recorded "
                f"counter {rec.counter} at seq {rec.seq}: the head was restored from an older "
                "state (entries after it deleted, or an old copy of the file)")
    if n == rec.counter and (rec.seq, rec.hash) != (head_seq, head_hash):
        return (f"the chain head (seq {head_seq}) is not the head {str(key.counter_file)!r} "
                f"recorded for counter {n} (seq {rec.seq}): the head was replaced")
    return None


def _key_faults(key: Keyring) -> str | None:
    """The public key against the pinned fingerprints, or None."""
    fp = signing.fingerprint(key.public or b"")
    for where, pinned in key.pins:
        if fp != pinned:
            return (f"the public key from {key.source} has fingerprint {fp[:16]}…, not the "
                    f"pinned {pinned[:16]}… ({where}): the ledger is signed by another key")
    return None


def _head(con: duckdb.DuckDBPyConnection, key: Keyring, n: int, last_hash: str,
          expected: Sequence[tuple[str, Any]]) -> VerifyReport | None:
    """The chain head: no downgrade, its seal, signature, pins, counter and the kept heads.

    The rules are those of the newest schema the ledger's signed history
    shows, never fewer because its ``schema_version`` says it is older.
    """
    orphan = con.execute("SELECT min(s.seq) FROM step_runs s ANTI JOIN entries e "
                         "ON e.seq = s.seq").fetchall()[0][0]
    if orphan is not None:
        return _bad(n, f"step runs refer to entry seq {orphan}, which does not exist",
                    int(orphan))
    floor, why = _signed_history(con, key)
    if key.version < floor:
        return _bad(n, f"schema downgrade: the ledger says it is schema {key.version}, but "
                       f"{why} requires schema {floor} or later (a signed head); a ledger "
                       "claiming an older format than its signed history is refused")
    head_seq, head_hash = head(con)
    if head_seq != n or head_hash != last_hash:
        return _bad(n, f"the chain head says {head_seq} entries ending in {head_hash[:12]}…, "
                       f"but the entries end at seq {n} (entries deleted from the end?)",
                    n + 1 if head_seq > n else None)
    cols = "seal, signature" if key.version >= 3 else "seal, NULL"
    seal, signature = con.execute(f"SELECT {cols} FROM chain_head WHERE id = 1").fetchall()[0]  # noqa: S608
    count = storage.head_counter(con)
    if key.noise is not None and seal != key.seal(head_seq, head_hash, count):
        return _bad(n, "the keyed seal over the chain head does not match (chain rewritten "
                       "without the noise key, or its schema version edited)")
    if key.version >= 3 and key.public is None:
        return _bad(n, "no public key to check the chain head's signature with")
    if key.version >= 3 and not key.signature_ok(signature, head_seq, head_hash, count):
        return _bad(n, "the chain head's Ed25519 signature does not verify with the public key "
                       f"{signing.fingerprint(key.public or b'')[:16]}… from {key.source} "
                       "(head, counter or schema version edited, or signed by another key)")
    problem = (_key_faults(key) if key.version >= 3 else None) or (
        _counter_fault(con, key, head_seq, head_hash) if key.version >= 4 else None) or (
        heads.expected_faults(con, key, n, expected))
    return None if problem is None else _bad(n, problem)


def _tables(con: duckdb.DuckDBPyConnection, key: Keyring, n: int, last_hash: str,
            spent: pa.Table, expected: Sequence[tuple[str, Any]]) -> VerifyReport:
    """The checks after the entries: head, seal, signature, kept heads, MACs, policy, accounts."""
    rep = _head(con, key, n, last_hash, expected)
    if rep is None and key.noise is not None:
        rep = _macs(con, key, n)
    if rep is None and key.version >= 3:
        problem = history.domain_faults(con)
        rep = None if problem is None else _bad(n, problem)
    if rep is None and key.noise is not None:
        rep = _release_macs(con, key, n)
    return rep or _accounts(con, n, spent, key, len(expected))


def _accounts(con: duckdb.DuckDBPyConnection, n: int, spent: pa.Table, key: Keyring,
              n_expected: int) -> VerifyReport:
    """The stored accounts against the recomputed spend `spent` (see `_balances`)."""
    with registered(con, "_pp_spent", spent):
        row = first_row(con.execute(
            "SELECT k.user_id, k.domain, k.stream_id, a.user_id IS NULL, "
            "CAST(a.spent AS VARCHAR), k.spent FROM _pp_spent k LEFT JOIN accounts a "
            "ON a.user_id = k.user_id AND a.domain = k.domain AND a.stream_id = k.stream_id "
            "WHERE a.user_id IS NULL OR a.spent <> CAST(k.spent AS HUGEINT) ORDER BY k.i LIMIT 1"))
        if row is not None:
            key = tuple(row[:3])
            if row[3]:
                return _bad(n, f"account {key!r} has entries but no accounts row")
            return _bad(n, f"account {key!r}: stored spent {row[4]} quanta differs from "
                           f"{row[5]} recomputed from the entries")
        row = first_row(con.execute(
            "SELECT a.user_id, a.domain, a.stream_id, CAST(a.spent AS VARCHAR), "
            "k.user_id IS NULL AND a.spent <> 0, d.domain IS NULL, CAST(a.cap AS VARCHAR), "
            "CAST(d.cap AS VARCHAR) FROM accounts a LEFT JOIN _pp_spent k "
            "ON a.user_id = k.user_id AND a.domain = k.domain AND a.stream_id = k.stream_id "
            "LEFT JOIN domains d ON d.domain = a.domain WHERE (k.user_id IS NULL AND a.spent <> 0) "
            "OR d.domain IS NULL OR a.cap <> d.cap ORDER BY a.user_id, a.domain, a.stream_id "
            "LIMIT 1"))
    if row is not None:
        key = tuple(row[:3])
        if row[4]:
            return _bad(n, f"account {key!r} shows spent {row[3]} quanta without any entries")
        if row[5]:
            return _bad(n, f"account {key!r} refers to an unknown domain")
        return _bad(n, f"account {key!r}: its cap {row[6]} quanta differs from the domain's "
                       f"cap {row[7]} (edited outside privpipe)")
    stored = con.execute("SELECT count(*) FROM accounts").fetchall()[0][0]
    return _ok(n, stored, key, n_expected)


NEEDS_NOISE_KEY = ("the keyed seal over the chain head", "the noise key fingerprint",
                   "the domain and release MACs")
"""What an auditor without the noise key cannot check."""
NO_COUNTER_FILE = "the head counter (no readable head counter file beside the ledger)"
"""What an auditor cannot check without the operator's head counter file."""


def _ok(n: int, accounts: int, key: Keyring, n_expected: int) -> VerifyReport:
    signed = ""
    if key.version >= 3:
        signed = (f"; policy history and the Ed25519-signed head (key "
                  f"{signing.fingerprint(key.public or b'')[:16]}… from {key.source}) verified")
    if n_expected:
        signed += f"; consistent with {n_expected} kept signed head(s)"
    if key.noise is not None:
        return VerifyReport(True, n, None, f"ok: {n} entries, hash chain, seal, key "
                                           f"fingerprint, domain and release MACs and "
                                           f"{accounts} account balances verified{signed}")
    not_checked = NEEDS_NOISE_KEY
    if key.version >= 4 and (key.counter_file is None
                             or counter.read(key.counter_file, private=False) is None):
        not_checked = (*not_checked, NO_COUNTER_FILE)
    if key.version < 3 or key.source == EMBEDDED:
        why = ("its only public key is the one the ledger holds itself (meta), which whoever "
               "edits the file can replace" if key.version >= 3 else
               f"schema {key.version} has no signed head")
        return VerifyReport(
            False, n, None,
            f"ledger NOT independently verified (auditor mode): {n} entries and {accounts} "
            f"account balances are consistent, but {why}; give the public key you kept "
            "(--public-key) or the fingerprint `privpipe ledger init` printed "
            "(--expect-fingerprint)", not_checked=not_checked)
    return VerifyReport(
        True, n, None,
        f"ok (auditor mode, public key only): {n} entries, hash chain and {accounts} "
        f"account balances verified{signed}; NOT checked without the noise key: "
        f"{', '.join(not_checked)}", not_checked=not_checked)


def verify_tx(con: duckdb.DuckDBPyConnection, key: Keyring,
              expected: Sequence[tuple[str, SignedHead | heads.PlainHead]] = ()
              ) -> VerifyReport:
    """Verify the whole ledger in `con`'s transaction (see the module docstring).

    `expected` are heads kept earlier (checkpoint files, release manifests,
    ``SEQ:HASH``), each with where it came from; the ledger must extend them.
    In auditor mode (no noise key) a ledger whose signed head was checked
    only with the key its own ``meta`` table holds, or that has no signed
    head (schema < 3), is reported not ok: "NOT independently verified".
    """
    domains = load_domains(con)
    found = _FirstFault()
    _chain(con, found)
    spent = _balances(con, domains, found)
    if found.best is not None or spent is None:
        _, _, seq, eid, msg, checked = found.best
        return _bad(checked, msg, seq, eid)
    n, last = con.execute("SELECT count(*), (SELECT hash FROM entries ORDER BY seq DESC, "
                          "entry_id DESC LIMIT 1) FROM entries").fetchall()[0]
    return _tables(con, key, int(n), last or GENESIS_HASH, spent, expected)
