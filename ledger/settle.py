"""Settle and close: record what admitted reservations actually spent, refund the rest.

`settle_tx` writes per settlement a ``settle`` entry (the sub-step breakdown)
and, when the actual cost is below the reservation, a ``refund`` entry with the
difference (per step for w-event). The checks run column-wise and the first
problem in settlement order is raised: no admitted reservation, another
domain, a cost that does not fit the domain, a closed reservation, an earlier
settlement with another cost (`ReplayConflictError`), an actual cost above the
reservation (`LedgerInternalError`, a bug). A settlement recorded earlier with
the same cost writes nothing. `close_tx` refunds a release's unsettled
reservations with ``close`` entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ledger import accounting, releases, storage, wevent_budget
from ledger.accounting import Run
from ledger.amounts import format_units
from ledger.checks import SettlementColumns
from ledger.columns import group_first, group_running_sum, interleave, key_codes, object_array
from ledger.entries import append, canonical_json, meta, refund_details, settle_details
from ledger.errors import LedgerInternalError, ReplayConflictError
from ledger.keyring import Keyring
from ledger.pricing import Actual, price_settlements
from ledger.storage import AccountWrites, registered
from schemas.errors import ParameterError

_LOOKUP = (
    "WITH e AS (SELECT e.seq, e.kind, e.user_id, e.step, e.stream_id, e.domain, "
    "e.amount, e.notion, e.detail FROM entries e "
    "SEMI JOIN (SELECT DISTINCT user_id FROM _pp_keys) u ON e.user_id = u.user_id "
    "WHERE e.release_id = ? AND e.user_id <> '' "
    "AND e.kind IN ('reserve', 'deny', 'settle', 'close')), "
    "r AS (SELECT * FROM e WHERE kind IN ('reserve', 'deny') QUALIFY row_number() OVER "
    "(PARTITION BY user_id, step, stream_id ORDER BY seq DESC) = 1), "
    "d AS (SELECT * FROM e WHERE kind IN ('settle', 'close') QUALIFY row_number() OVER "
    "(PARTITION BY user_id, step, stream_id ORDER BY seq DESC) = 1) "
    "SELECT r.seq AS r_seq, r.kind AS r_kind, r.domain AS r_domain, "
    "CAST(r.amount AS VARCHAR) AS r_amount, "
    "d.kind AS d_kind, d.detail AS d_detail, CAST(a.spent AS VARCHAR) AS spent "
    "FROM _pp_keys k "
    "LEFT JOIN r ON r.user_id = k.user_id AND r.step = k.step AND r.stream_id = k.stream_id "
    "LEFT JOIN d ON d.user_id = k.user_id AND d.step = k.step AND d.stream_id = k.stream_id "
    "LEFT JOIN accounts a ON a.user_id = k.user_id AND a.domain = r.domain "
    "AND a.stream_id = k.stream_id ORDER BY k.i"
)


def _lookup(con: duckdb.DuckDBPyConnection, release_id: str, cols: SettlementColumns
            ) -> dict[str, list[Any]]:
    """Per settlement: its reservation, an earlier settle/close entry, the account's spent.

    The reservation is the last reserve/deny entry of the key; spent is None
    when the account row is missing.
    """
    keys = pa.table({"i": pa.array(range(len(cols)), pa.int64()),
                     "user_id": pa.array(cols.users, pa.string()),
                     "step": pa.array(cols.steps, pa.string()),
                     "stream_id": pa.array(cols.streams, pa.string())})
    with registered(con, "_pp_keys", keys):
        tbl = con.sql(_LOOKUP, params=[release_id]).to_arrow_table()
    out = {name: tbl.column(name).to_pylist() for name in tbl.column_names}
    for c in ("r_amount", "spent"):
        memo = {t: None if t is None else int(t) for t in set(out[c])}
        out[c] = list(map(memo.__getitem__, out[c]))
    return out


# Problem codes, in the order the checks apply to one settlement.
_NO_RESERVATION, _DENIED, _OTHER_DOMAIN, _BAD_COST, _CLOSED, _CONFLICT, _OVER = range(1, 8)


def _what(cols: SettlementColumns, i: int) -> str:
    return f"user {cols.users[i]!r}, step {cols.steps[i]!r}, stream {cols.streams[i]!r}"


def _raise(code: int, i: int, release_id: str, cols: SettlementColumns, look: dict[str, list],
           actual: list[Any], over: dict[int, Exception]) -> None:
    what = _what(cols, i)
    if code == _NO_RESERVATION:
        raise ParameterError(f"cannot settle release {release_id!r} for {what}: it has no "
                             "reservation")
    if code == _DENIED:
        raise ParameterError(f"cannot settle release {release_id!r} for {what}: it was denied")
    if code == _OTHER_DOMAIN:
        raise ParameterError(f"settlement for {what} names domain {cols.domains[i]!r} but the "
                             f"reservation is for {look['r_domain'][i]!r}")
    if code == _BAD_COST:
        raise actual[i]
    if code == _CLOSED:
        raise ParameterError(f"cannot settle {what}: the reservation of release {release_id!r} "
                             "was closed (refunded) by an operator")
    if code == _CONFLICT:
        raise ReplayConflictError(
            f"release {release_id!r} already settled {what} with a different cost")
    raise over[i]


@dataclass
class _Fresh:
    """The settlements to write (no problem, not settled before), as arrays in call order."""

    rows: np.ndarray  # indices into the call
    wevent: np.ndarray  # per row: a w-event reservation
    units: np.ndarray  # actual cost, quanta (object)
    reserved: np.ndarray  # reserved amount, quanta (object)
    refund: np.ndarray  # reserved - actual, quanta (object; w-event: over steps)
    refund_runs: list[list[Run]]
    before: np.ndarray  # the account's balance before the refund (object)
    after: np.ndarray  # ... and after it


def _refunds(release_id: str, cols: SettlementColumns, f: _Fresh, look: dict[str, list],
             actual: list[Any], reserved_runs: dict[int, list[Run]]) -> dict[int, Exception]:
    """Fill the refunds of the fresh settlements; return the errors of costs above the reservation.

    gp/cgp: ``reserved - actual`` column-wise; w-event: per step (`accounting.difference`).
    """
    f.refund = f.reserved - f.units
    over: dict[int, Exception] = {}
    for k in np.flatnonzero((f.units > f.reserved).astype(bool) & ~f.wevent).tolist():
        i = int(f.rows[k])
        over[i] = LedgerInternalError(
            f"release {release_id!r}, {_what(cols, i)}: actual cost {format_units(f.units[k])} "
            f"exceeds the reservation {format_units(f.reserved[k])}")
    diffs: dict[tuple, tuple[list[Run], int] | LedgerInternalError] = {}
    for k in np.flatnonzero(f.wevent).tolist():
        i = int(f.rows[k])
        # equal (reserved, actual) runs have equal differences: each computed once
        key = (tuple(reserved_runs.get(look["r_seq"][i], [])), tuple(actual[i].runs))
        diff = diffs.get(key)
        if diff is None:
            try:
                runs = accounting.difference(*key)
                diff = diffs[key] = (runs, accounting.total(runs))
            except LedgerInternalError as err:
                diff = diffs[key] = err
        if isinstance(diff, LedgerInternalError):
            over[i] = diff
            continue
        f.refund_runs[k], f.refund[k] = diff
    return over


def _codes(cols: SettlementColumns, look: dict[str, list], actual: list[Any]) -> np.ndarray:
    """The first problem code of every settlement (0: none), before the refund check."""
    sig_of: dict[str, Any] = {}

    def prior(text: str) -> Any:
        if text not in sig_of:
            sig_of[text] = json.loads(text).get("signature")
        return sig_of[text]

    r_kind, d_kind = look["r_kind"], look["d_kind"]
    return np.select([
        np.array([s is None for s in look["r_seq"]], bool),
        np.array([k != "reserve" for k in r_kind], bool),
        np.array([a != b for a, b in zip(look["r_domain"], cols.domains, strict=True)], bool),
        np.array([isinstance(a, Exception) for a in actual], bool),
        np.array([k == "close" for k in d_kind], bool),
        np.array([k == "settle" and isinstance(a, Actual) and prior(t) != a.signature
                  for k, t, a in zip(d_kind, look["d_detail"], actual, strict=True)], bool),
    ], [_NO_RESERVATION, _DENIED, _OTHER_DOMAIN, _BAD_COST, _CLOSED, _CONFLICT], 0)


def _gp_balances(cols: SettlementColumns, look: dict[str, list], f: _Fresh,
                 caps: dict[str, int]) -> AccountWrites:
    """Balances before and after the refunds of the fresh gp/cgp settlements; account writes.

    Settlements of one account in one call refund one after the other.
    """
    writes = AccountWrites()
    pos = np.flatnonzero(~f.wevent)
    if not len(pos):
        return writes
    rows = f.rows[pos].tolist()
    users, doms, streams = ([col[i] for i in rows] for col in (cols.users, cols.domains,
                                                              cols.streams))
    acc, n_acc = key_codes(users, doms, streams)
    amounts = f.refund[pos]
    cum, totals = group_running_sum(acc, amounts, n_acc)
    first = group_first(acc, n_acc).tolist()
    spent = [look["spent"][rows[k]] for k in first]
    base = object_array([0 if sp is None else sp for sp in spent])
    f.after[pos] = base[acc] - cum
    f.before[pos] = f.after[pos] + amounts
    for a in np.flatnonzero((totals > 0).astype(bool)
                            | np.array([sp is None for sp in spent], bool)).tolist():
        k = first[a]  # a refund, or no account row (never for a real reservation)
        writes.add(users[k], doms[k], streams[k], caps[doms[k]], int(base[a] - totals[a]))
    return writes


def _wevent_balances(con: duckdb.DuckDBPyConnection, cols: SettlementColumns, f: _Fresh,
                     domains: dict[str, dict[str, Any]]) -> AccountWrites:
    """Balances before and after the refunds of the fresh w-event settlements; account writes."""
    writes = AccountWrites()
    pos = np.flatnonzero(f.wevent).tolist()
    if not pos:
        return writes
    per_user = wevent_budget.per_user_domains(domains)
    key_of = {k: wevent_budget.account_key(cols.users[i], cols.domains[i], cols.streams[i],
                                           per_user)
              for k, i in zip(pos, f.rows[pos].tolist(), strict=True)}
    keys = list(dict.fromkeys(key_of.values()))
    stored = dict(zip(keys, storage.account_spent(con, *map(list, zip(*keys, strict=True))),
                      strict=True))
    # only accounts with a refund change: only their runs are read
    refunded = list(dict.fromkeys(key_of[k] for k in pos if f.refund_runs[k]))
    history = {k: accounting.profile(r)
               for k, r in storage.account_runs(con, refunded, per_user).items()}
    spent = {k: 0 if v is None else v for k, v in stored.items()}
    dirty = {k for k, v in stored.items() if v is None}
    for k in pos:
        key = key_of[k]
        f.before[k] = spent[key]
        if f.refund_runs[k]:
            history[key] = accounting.profile(
                [*history[key], *((a, b, -q) for a, b, q in f.refund_runs[k])])
            spent[key] = accounting.max_window(history[key], int(domains[key[1]]["w"] or 1))[0]
            dirty.add(key)
        f.after[k] = spent[key]
    for key in keys:
        if key in dirty:
            writes.add(*key, int(domains[key[1]]["cap"]), spent[key])
    return writes


def _entry_columns(cols: SettlementColumns, look: dict[str, list], f: _Fresh,
                   actual: list[Any], domains: dict[str, dict[str, Any]]
                   ) -> tuple[dict[str, list[Any]], list[str], list[list[Run]]]:
    """Entry columns (settle, then refund if any, per fresh settlement), detail texts, runs."""
    rows = f.rows.tolist()
    every = len(rows) == len(cols)  # all settlements are written (the usual case)
    has_refund = (f.refund > 0).astype(bool)

    def pick(col: list[Any]) -> list[Any]:
        return col if every else [col[i] for i in rows]

    seqs, dom = pick(look["r_seq"]), pick(cols.domains)
    notion_of = {d: domains[d]["notion"] for d in set(dom)}
    cap_of = {d: int(domains[d]["cap"]) for d in notion_of}
    notions, caps = list(map(notion_of.__getitem__, dom)), list(map(cap_of.__getitem__, dom))
    s_det, s_text = settle_details(
        list(zip([actual[i].breakdown for i in rows], pick(look["r_amount"]),
                 [actual[i].signature for i in rows], strict=True)), seqs)
    r_det, r_text = refund_details(seqs)

    def both(settle: list[Any], refunded: list[Any]) -> list[Any]:
        return interleave(settle, refunded, has_refund)

    def same(col: list[str]) -> list[str]:
        values = pick(col)
        return both(values, values)

    n = len(rows)
    entry_cols = {
        "user_id": same(cols.users), "domain": both(dom, dom), "step": same(cols.steps),
        "stream_id": same(cols.streams),
        "kind": both(["settle"] * n, ["refund"] * n),
        "amount": both(f.units.tolist(), f.refund.tolist()),
        "notion": both(notions, notions), "cap": both(caps, caps),
        "balance_after": both(f.before.tolist(), f.after.tolist()),
        "detail": both(s_det, r_det),
        "reason": both(["settled"] * n, ["unused part of the reservation"] * n),
    }
    runs = None
    if f.wevent.any():
        runs = [r for i, k, h in zip(rows, range(n), has_refund.tolist(), strict=True)
                for r in ([actual[i].runs, f.refund_runs[k]] if h else [actual[i].runs])]
    return entry_cols, both(s_text, r_text), runs


def settle_tx(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, release_id: str,
              cols: SettlementColumns) -> None:
    """Settle one call's settlements in `con`'s transaction (see the module docstring).

    Raises:
        ParameterError: no admitted reservation, another domain, a closed reservation.
        NotionMismatchError: a cost that does not fit the reservation's domain.
        ReplayConflictError: the key was settled earlier with a different cost.
        LedgerInternalError: the actual cost exceeds the reservation.
    """
    now = storage.now()
    domains = storage.load_domains(con)
    look = _lookup(con, release_id, cols)
    priced_domain = [d if k == "reserve" and d == want else None
                     for k, d, want in zip(look["r_kind"], look["r_domain"], cols.domains,
                                           strict=True)]
    actual = price_settlements(cols.costs, priced_domain, domains)
    codes = _codes(cols, look, actual)
    f = _fresh(codes, look, actual, priced_domain, domains)
    reserved_runs = storage.runs_of(
        con, [look["r_seq"][i] for i in f.rows[f.wevent].tolist()])
    over = _refunds(release_id, cols, f, look, actual, reserved_runs)
    codes[list(over)] = _OVER
    bad = np.flatnonzero(codes)
    if len(bad):
        i = int(bad[0])
        _raise(int(codes[i]), i, release_id, cols, look, actual, over)
    if not len(f.rows):
        return
    writes = _gp_balances(cols, look, f, {name: int(d["cap"]) for name, d in domains.items()})
    w_writes = _wevent_balances(con, cols, f, domains)
    entry_cols, texts, runs = _entry_columns(cols, look, f, actual, domains)
    append(con, key, entry_cols, runs, meta(now, actor, release_id), {"detail": texts})
    for c in ("users", "domains", "streams", "caps", "spents"):
        getattr(writes, c).extend(getattr(w_writes, c))
    storage.save_accounts(con, writes)
    releases.mark_settled_if_done(con, key.noise_key, release_id, now)


def _fresh(codes: np.ndarray, look: dict[str, list], actual: list[Any],
           priced_domain: list[str | None], domains: dict[str, dict[str, Any]]) -> _Fresh:
    """The settlements without a problem so far and not settled before."""
    rows = np.flatnonzero((codes == 0) & np.array([k is None for k in look["d_kind"]], bool))
    take = rows.tolist()
    wevent = np.array([domains[priced_domain[i]]["notion"] == "wevent" for i in take], bool)
    n = len(take)
    return _Fresh(rows, wevent, object_array([actual[i].units for i in take]),
                  object_array([look["r_amount"][i] for i in take]), np.zeros(n, object),
                  [[]] * n, np.zeros(n, object), np.zeros(n, object))


def _open_reservations(con: duckdb.DuckDBPyConnection, release_id: str
                       ) -> list[dict[str, Any]]:
    """The release's admitted reservations without a settle or close entry, in seq order."""
    rows = con.execute(
        "SELECT r.seq, r.user_id, r.step, r.stream_id, r.domain, CAST(r.amount AS VARCHAR), "
        "r.notion FROM entries r WHERE r.release_id = ? AND r.kind = 'reserve' "
        "AND r.user_id <> '' AND NOT EXISTS (SELECT 1 FROM entries d WHERE "
        "d.release_id = r.release_id AND d.kind IN ('settle', 'close') "
        "AND d.user_id = r.user_id AND d.step = r.step AND d.stream_id = r.stream_id) "
        "ORDER BY r.seq", [release_id]).fetchall()
    out = [{"seq": int(seq), "user_id": u, "step": st, "stream_id": s, "domain": d,
            "amount": int(q), "notion": notion}
           for seq, u, st, s, d, q, notion in rows]
    runs = storage.runs_of(con, [r["seq"] for r in out if r["notion"] == "wevent"])
    for r in out:
        r["runs"] = runs.get(r["seq"], [])
    return out


def close_tx(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, release_id: str,
             reason: str) -> None:
    """Close a release: refund its unsettled reservations with ``close`` entries.

    A release without open reservations gets one marker entry (no user, amount
    0) the first time it is closed; closing again writes nothing.

    Raises:
        ParameterError: unknown release.
    """
    now = storage.now()
    state = releases.state(con, release_id)
    if state is None:
        raise ParameterError(f"unknown release {release_id!r}")
    domains = storage.load_domains(con)
    open_res = _open_reservations(con, release_id)
    if state == "closed" and not open_res:
        return
    per_user = wevent_budget.per_user_domains(domains)
    key_of = [wevent_budget.account_key(r["user_id"], r["domain"], r["stream_id"], per_user)
              for r in open_res]
    keys = list(dict.fromkeys(key_of))
    stored = storage.account_spent(con, *map(list, zip(*keys, strict=True))) if keys else []
    spent = {k: 0 if v is None else v for k, v in zip(keys, stored, strict=True)}
    history = {k: accounting.profile(r) for k, r in storage.account_runs(
        con, [k for k in keys if domains[k[1]]["notion"] == "wevent"], per_user).items()}
    rows: dict[str, list[Any]] = {c: [] for c in (
        "user_id", "domain", "step", "stream_id", "kind", "amount", "notion", "cap",
        "balance_after", "detail")}
    for r, k in zip(open_res, key_of, strict=True):
        dom = domains[r["domain"]]
        if dom["notion"] == "wevent":
            history[k] = accounting.profile([*history[k], *((a, b, -q) for a, b, q in r["runs"])])
            spent[k] = accounting.max_window(history[k], int(dom["w"] or 1))[0]
        else:
            spent[k] -= r["amount"]
        for c, v in (("user_id", k[0]), ("domain", k[1]), ("step", r["step"]),
                     ("stream_id", r["stream_id"]), ("kind", "close"), ("amount", r["amount"]),
                     ("notion", r["notion"]), ("cap", int(dom["cap"])),
                     ("balance_after", spent[k]),
                     ("detail", canonical_json({"reserve_seq": r["seq"]}, "detail"))):
            rows[c].append(v)
    runs = [r["runs"] for r in open_res]
    if not open_res:  # an audited marker that the release was closed
        rows = {"user_id": [""], "domain": [""], "step": [""], "stream_id": [""],
                "kind": ["close"], "amount": [0], "notion": [""], "cap": [None],
                "balance_after": [None], "detail": [None]}
        runs = [[]]
    append(con, key, rows, runs, meta(now, actor, release_id, reason=reason))
    writes = AccountWrites()
    for k in keys:
        writes.add(*k, int(domains[k[1]]["cap"]), spent[k])
    storage.save_accounts(con, writes)
    releases.set_state(con, key.noise_key, release_id, "closed", now)
