"""Reserve: price a call's requests, answer replays, admit, and write the decisions.

One transaction per call (`reserve_tx`): the domains are read and their MACs
checked, every request is priced (`ledger.pricing`), requests recorded earlier
in the release are answered from their entries (a changed request is a
`ReplayConflictError`), the rest are decided by the pure `admission.admit`
and written as ``reserve``/``deny`` entries with the accounts' new spend.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from itertools import repeat
from json.encoder import encode_basestring as _estr  # type: ignore[attr-defined]
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ledger import accounting, admission, history, releases, storage, watermark, wevent_budget
from ledger.accounting import Run
from ledger.admission import Accounts, Charges, Decisions
from ledger.amounts import from_units
from ledger.checks import RequestColumns
from ledger.columns import group_first, object_array
from ledger.entries import append, canonical_json, meta
from ledger.errors import LedgerIntegrityError, ReplayConflictError
from ledger.keyring import Keyring
from ledger.pricing import Prices, price_requests
from ledger.records import Decision, ReserveResult
from ledger.storage import AccountWrites, registered
from schemas.errors import ParameterError

_SYMBOLS = {"gp": "ε", "cgp": "ρ", "wevent": "ε per window"}


def units_text(dom: dict[str, Any]) -> str:
    """The unit text printed next to a domain's amounts, e.g. ``ε (L2 over m x s^(1/2))``."""
    return f"{_SYMBOLS[dom['notion']]} ({dom['units_label']})"


@dataclass(frozen=True)
class ReserveCall:
    """Everything one reserve call records besides its requests."""

    release_id: str
    mechanism: str
    parameters: str  # canonical JSON
    flow_run_id: str | None
    input_fingerprint: str | None


class _Fractions(dict):
    """Exact amounts of quanta counts, converted once per distinct count."""

    def __missing__(self, units: int) -> Fraction:
        value = self[units] = from_units(units)
        return value


def _replays(con: duckdb.DuckDBPyConnection, release_id: str, cols: RequestColumns,
             prices: Prices, domains: dict[str, dict[str, Any]],
             decisions: list[Decision | None]) -> tuple[list[int], set[str]]:
    """Answer requests recorded earlier in the release; return the others and the denied users.

    Raises:
        ReplayConflictError: the first request (in order) recorded earlier with
            another domain or request.
    """
    keys = pa.table({"i": pa.array(range(len(cols)), pa.int64()),
                     "user_id": pa.array(cols.users, pa.string()),
                     "step": pa.array(cols.steps, pa.string()),
                     "stream_id": pa.array(cols.streams, pa.string())})
    with registered(con, "_pp_keys", keys):
        rows = con.execute(
            "SELECT k.i, e.kind, e.seq, e.domain, CAST(e.amount AS VARCHAR), "
            "CAST(e.cap AS VARCHAR), CAST(e.balance_after AS VARCHAR), e.reason, e.detail "
            "FROM _pp_keys k JOIN entries e ON e.user_id = k.user_id AND e.step = k.step "
            "AND e.stream_id = k.stream_id WHERE e.release_id = ? "
            "AND e.kind IN ('reserve', 'deny') "
            "QUALIFY row_number() OVER (PARTITION BY k.i ORDER BY e.seq DESC) = 1 ORDER BY k.i",
            [release_id]).fetchall()
        denied = {u for (u,) in con.execute(
            "SELECT DISTINCT e.user_id FROM entries e SEMI JOIN _pp_keys k "
            "ON e.user_id = k.user_id WHERE e.release_id = ? AND e.kind = 'deny'",
            [release_id]).fetchall()}
    parsed: dict[str, dict[str, Any]] = {}
    fractions = _Fractions()
    answered = set()
    for i, kind, seq, dname, amount, cap, bal, reason, detail in rows:
        det = parsed.get(detail)
        if det is None:
            det = parsed[detail] = json.loads(detail)
        if dname != cols.domains[i] or det.get("signature") != prices.signatures[i]:
            raise ReplayConflictError(
                f"release {release_id!r} already recorded a different request for user "
                f"{cols.users[i]!r}, step {cols.steps[i]!r}, stream {cols.streams[i]!r}; a new "
                "or changed charge needs a new release id")
        if "requested" in det:  # w-event: the worst window's figures
            req, rem = int(det["requested"]), int(det["remaining"])
        else:
            req, rem = int(amount), int(cap) - int(bal)
        dom = domains[dname]
        decisions[i] = Decision(cols.users[i], dname, cols.steps[i], cols.streams[i],
                                kind == "reserve", reason or "", fractions[req], fractions[rem],
                                int(seq), True, dom["notion"], units_text(dom))
        answered.add(i)
    return [i for i in range(len(cols)) if i not in answered], denied


@dataclass(frozen=True)
class _Batch:
    """The admission inputs of the fresh requests and how to write their accounts back."""

    accounts: Accounts
    charges: Charges
    keys: tuple[np.ndarray, np.ndarray, np.ndarray]  # user, domain, stream per account
    exists: np.ndarray  # per account: a stored row


def _batch(con: duckdb.DuckDBPyConnection, cols: RequestColumns, prices: Prices,
           domains: dict[str, dict[str, Any]], denied: set[str]) -> _Batch:
    """Load the accounts of the fresh requests `cols` and build the admission inputs."""
    per_user = wevent_budget.per_user_domains(domains)
    acc, n_acc, acc_streams = wevent_budget.account_codes(cols, per_user)
    first = group_first(acc, n_acc)
    users, domain_of, streams = (object_array(c)[first] for c in (cols.users, cols.domains,
                                                                   acc_streams))
    stored = storage.account_spent(con, users.tolist(), domain_of.tolist(), streams.tolist())
    dom_codes, dom_names = cols.codes("domains")
    doms = [domains[d] for d in dom_names]
    per_acc = dom_codes[first]  # the domain of each account (index into dom_names)
    wevent = np.array([d["notion"] == "wevent" for d in doms], bool)[per_acc]
    history: list[list[Run]] = [[]] * n_acc  # gp/cgp accounts: no runs (never mutated)
    wkeys = [(users[a], domain_of[a], streams[a]) for a in np.flatnonzero(wevent).tolist()]
    for a, runs in zip(np.flatnonzero(wevent).tolist(),
                       storage.account_runs(con, wkeys, per_user).values(), strict=True):
        history[a] = accounting.profile(runs)
    accounts = Accounts(
        cap=object_array([int(d["cap"]) for d in doms])[per_acc],
        spent=object_array([0 if s is None else s for s in stored]),
        w=np.array([int(d["w"] or 1) if d["notion"] == "wevent" else 0 for d in doms],
                   np.int64)[per_acc],
        history=history,
        labels=object_array([units_text(d) for d in doms])[per_acc].tolist(),
        streams=[None if d in per_user else s for d, s in zip(domain_of.tolist(),
                                                              streams.tolist(), strict=True)])
    user_codes, names = cols.codes("users")
    denied_before = (np.array([u in denied for u in names], bool) if denied
                     else np.zeros(len(names), bool))
    charges = Charges(user=user_codes, account=acc, units=prices.units, runs=prices.runs,
                      denied_before=denied_before)
    return _Batch(accounts, charges, (users, domain_of, streams),
                  np.array([s is not None for s in stored], bool))


_OWN = ("signature", "requested", "remaining")
"""The keys a w-event reserve entry's detail sets itself (over the price's detail)."""


class _Layouts(dict):
    """Per key set of a w-event detail: a `str.format` template of its canonical JSON.

    The template holds the keys in sorted order (as `canonical_json` writes
    them, without spaces) with a ``{}`` for each value's canonical text: the
    encoder writes a nested value as it writes that value alone.
    """

    def __missing__(self, keys: tuple[str, ...]) -> tuple[str, list[str]]:
        ks = sorted({*(k for k in keys if k not in _OWN), *_OWN})
        template = "{{" + ",".join(_estr(k).replace("{", "{{").replace("}", "}}") + ":{}"
                                   for k in ks) + "}}"
        value = self[keys] = (template, ks)
        return value


def _details(prices: Prices, out: Decisions, order: list[int]) -> tuple[list[str], list[str]]:
    """The detail text of each new entry (in entry order), and its JSON string text.

    A w-event detail is assembled from the canonical texts of its values,
    each shared value (the runs of equal requests) encoded once.
    """
    memo: dict[str, str] = {}
    values: dict[int, str] = {}  # id of a shared value -> its canonical JSON

    def text_of(k: str, v: Any) -> str:
        if type(v) is str:
            return _estr(v)
        if k == "stream_range":
            return watermark.claim_json(v)
        t = values.get(id(v))
        if t is None:
            t = values[id(v)] = canonical_json(v, "detail")
        return t

    layouts = _Layouts()
    requested, remaining = out.requested.tolist(), out.remaining.tolist()
    texts = []
    for i in order:
        sig = prices.signatures[i]
        if prices.notions[i] == "wevent":
            base = prices.details[i]
            template, ks = layouts[tuple(base)]
            own = {"signature": _estr(sig), "requested": f'"{requested[i]}"',
                   "remaining": f'"{remaining[i]}"'}
            texts.append(template.format(*[own[k] if k in own else text_of(k, base[k])
                                           for k in ks]))
            continue
        text = memo.get(sig)
        if text is None:
            text = memo[sig] = canonical_json({**prices.details[i], "signature": sig}, "detail")
        texts.append(text)
    return texts, list(map(_estr, texts))


def _in_order(values: list[Any], order: np.ndarray, identity: bool) -> list[Any]:
    return values if identity else object_array(values)[order].tolist()


def _write(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, call: ReserveCall,
           now: str, cols: RequestColumns, prices: Prices, batch: _Batch, out: Decisions
           ) -> np.ndarray:
    """Append the decisions as entries and save the accounts; return each request's seq."""
    order = out.order
    identity = bool((order == np.arange(len(order))).all())
    acc = batch.charges.account[order]
    details, detail_texts = _details(prices, out, order.tolist())
    entry_cols = {
        "user_id": _in_order(cols.users, order, identity),
        "domain": _in_order(cols.domains, order, identity),
        "step": _in_order(cols.steps, order, identity),
        "stream_id": _in_order(cols.streams, order, identity),
        "kind": np.where(out.admitted[order], "reserve", "deny").tolist(),
        "amount": prices.units[order].tolist(),
        "notion": _in_order(prices.notions, order, identity),
        "cap": batch.accounts.cap[acc].tolist(), "balance_after": out.balance[order].tolist(),
        "detail": details,
        "reason": _in_order(out.reasons, order, identity)}
    with_runs = "wevent" in prices.notions
    seqs = append(con, key, entry_cols,
                  _in_order(prices.runs, order, identity) if with_runs else None,
                  meta(now, actor, call.release_id, mechanism=call.mechanism,
                       parameters=call.parameters, flow_run_id=call.flow_run_id,
                       input_fingerprint=call.input_fingerprint), {"detail": detail_texts})
    write = np.flatnonzero(out.changed | ~batch.exists)
    users, domain_of, streams = batch.keys
    storage.save_accounts(con, AccountWrites(
        users[write].tolist(), domain_of[write].tolist(), streams[write].tolist(),
        batch.accounts.cap[write].tolist(), out.spent[write].tolist()))
    seq_of = np.zeros(len(order), np.int64)
    seq_of[order] = np.arange(seqs.start, seqs.stop)
    return seq_of


def _with_stream_claims(con: duckdb.DuckDBPyConnection, call: ReserveCall,
                        cols: RequestColumns, prices: Prices) -> Prices:
    """Check the call's stream claims against the chain; add them to details and signatures.

    Incremental stream releases only (`ledger.watermark`): a request with a
    `StreamClaim` must continue its (user, domain, stream) watermark, checked
    here inside the reserve's transaction; the claim then goes into the reserve
    entry's detail and its replay signature (so it is in the hash chain).

    Raises:
        StreamContinuityError: a claim does not continue its stream (nothing written).
    """
    if not any(c is not None for c in cols.claims):
        return prices
    watermark.check_claims(con, call.release_id, cols.users, cols.domains, cols.streams,
                           cols.runs, cols.claims)
    details, signatures = watermark.with_claims(prices.details, prices.signatures, cols.claims)
    return replace(prices, details=details, signatures=signatures)


def reserve_tx(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, call: ReserveCall,
               cols: RequestColumns, *, write: bool = True) -> ReserveResult:
    """Reserve (or with ``write=False`` only plan) one call's requests in `con`'s transaction.

    Raises:
        ParameterError: unknown domain, bad amount or runs, a closed release.
        NotionMismatchError: a request's notion does not fit its domain.
        ReplayConflictError: a key was recorded earlier with a different request.
        LedgerIntegrityError: a domain row was changed outside privpipe.
    """
    now = storage.now()
    domains = storage.load_domains(con)
    prices = price_requests(cols, domains)
    storage.check_domain_macs(con, key, set(cols.domains))
    fault = history.domain_faults(con, set(cols.domains))
    if fault:
        raise LedgerIntegrityError(f"{fault}; nothing was charged. Run `privpipe ledger "
                                   "verify` and restore the ledger from backup.")
    prices = _with_stream_claims(con, call, cols, prices)
    if write:
        state = releases.touch(con, key.noise_key, call.release_id, now)
    else:
        state = releases.state(con, call.release_id)
    decisions: list[Decision | None] = [None] * len(cols)
    fresh, denied = list(range(len(cols))), set()
    if state is not None:
        fresh, denied = _replays(con, call.release_id, cols, prices, domains, decisions)
    if fresh and state == "closed":
        raise ParameterError(
            f"release {call.release_id!r} is closed; a new charge needs a new release id")
    if fresh:
        sub, sub_prices = cols.take(fresh), prices.take(fresh)
        batch = _batch(con, sub, sub_prices, domains, denied)
        out = admission.admit(batch.accounts, batch.charges)
        seqs = (_write(con, key, actor, call, now, sub, sub_prices, batch, out).tolist()
                if write else [0] * len(fresh))
        _decide(decisions, fresh, sub, sub_prices, out, seqs, domains)
    return ReserveResult(admitted=[d for d in decisions if d is not None and d.admitted],
                         denied=[d for d in decisions if d is not None and not d.admitted])


def _decide(decisions: list[Decision | None], fresh: Sequence[int], cols: RequestColumns,
            prices: Prices, out: Decisions, seqs: list[int],
            domains: dict[str, dict[str, Any]]) -> None:
    fractions = _Fractions()
    symbols = {name: units_text(dom) for name, dom in domains.items()}
    made = map(Decision, cols.users, cols.domains, cols.steps, cols.streams,
               out.admitted.tolist(), out.reasons,
               map(fractions.__getitem__, out.requested.tolist()),
               map(fractions.__getitem__, out.remaining.tolist()), seqs, repeat(False),
               prices.notions, map(symbols.__getitem__, cols.domains))
    for i, d in zip(fresh, made, strict=True):
        decisions[i] = d
