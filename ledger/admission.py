"""Admission: which requests of a reserve call are admitted. A pure function, no DuckDB.

`admit(accounts, charges)` takes the state of every account a call charges and
the call's new charges (in request order) and returns every decision, the
order their entries are written in, and the accounts' state afterwards.
`Ledger.reserve` and `Ledger.plan` both decide through it; it is tested
directly against an independent model (`tests/ledger/test_admission.py` and
the state machine in `tests/ledger/test_ledger_state_machine.py`).

The rule (the privacy filter of docs/design.md): a user is admitted iff, after all
of that user's charges in the call, every cap still holds: for a gp/cgp
account ``spent + Σ charges <= cap``; for a w-event account every window of w
consecutive steps, history included, sums to at most the cap. A w-event
account is (user, domain) in a ``per_user`` domain (a window sums the steps of
all of the user's streams: the caller gives every such request the same
account) and (user, domain, stream) in a ``per_stream`` one
(`ledger.wevent_budget`).
A user denied earlier in the same release is denied again, and so is one
with an account above a lowered cap (its cap was lowered below what it had
spent: it admits nothing, in any window). All or nothing per user: one
failing account denies all of the user's requests. Amounts are
exact integer quanta (``object`` arrays of Python ints); gp/cgp accounts are
decided column-wise with numpy, w-event accounts by the window sweep of
`ledger.accounting` (one sweep per account, never one per step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ledger import accounting
from ledger.accounting import Run
from ledger.amounts import format_units
from ledger.columns import group_first, group_running_sum

DENIED_EARLIER = "the user was denied earlier in this release"
ABOVE_CAP = "above a lowered cap"
TOGETHER = "denied together with the user's other requests: "


@dataclass(frozen=True)
class Accounts:
    """The accounts one call charges, one row per account (amounts in quanta).

    Attributes:
        cap: the domain's cap (``object`` array of ints).
        spent: the stored spend: the gp/cgp total, the w-event largest window.
        w: the window of a w-event account, 0 for gp/cgp (int64).
        history: each w-event account's net per-step cost as disjoint runs
            (`accounting.profile`); ``[]`` for gp/cgp.
        labels: the units text of each account's domain (for denial reasons).
        streams: each account's stream id (for w-event denial reasons); None for a
            per-user account, whose windows sum all of the user's streams.
    """

    cap: np.ndarray
    spent: np.ndarray
    w: np.ndarray
    history: Sequence[list[Run]]
    labels: Sequence[str]
    streams: Sequence[str | None]


@dataclass(frozen=True)
class Charges:
    """The new charges of one call, in request order.

    Attributes:
        user: the user of each request (int64 codes in ``[0, len(denied_before))``).
        account: the account of each request (int64 row of `Accounts`); every
            account belongs to one user and has at least one request.
        units: each request's charge in quanta (w-event: the total over steps).
        runs: each w-event request's per-step charges (``[]`` for gp/cgp).
        denied_before: per user code, True if the release denied the user earlier.
    """

    user: np.ndarray
    account: np.ndarray
    units: np.ndarray
    runs: Sequence[list[Run]]
    denied_before: np.ndarray


@dataclass(frozen=True)
class Decisions:
    """The outcome of `admit`.

    Attributes:
        order: request indices in the order their entries are written: users
            in order of first appearance; an admitted user's requests grouped
            by account (accounts in order of first appearance), a denied
            user's in request order.
        admitted: per request.
        reasons: per request: ``"admitted"`` or why it was denied.
        requested: per request, the charge in the domain's notion (w-event:
            its sum in the worst window).
        remaining: per request, the headroom after the charge (admitted) or
            before it (denied); w-event: in that worst window.
        balance: per request, the account's spend after its entry.
        spent: per account, the spend after the call.
        history: per account, the w-event runs after the call.
        changed: per account, True if admitted charges changed it.
    """

    order: np.ndarray
    admitted: np.ndarray
    reasons: list[str]
    requested: np.ndarray
    remaining: np.ndarray
    balance: np.ndarray
    spent: np.ndarray
    history: list[list[Run]]
    changed: np.ndarray


@dataclass
class _Window:
    """One w-event account's figures for the call."""

    peak: int  # largest window sum with the new charges
    combined: list[Run]  # history and the new charges
    failure: str  # why it fails the cap ('' if it does not)
    requested: int
    remaining: int


class _Sweeps(dict):
    """The window figures of (w, cap, history, new runs), swept once per distinct value.

    Accounts with equal history and equal new runs (the usual stream release:
    every user's stream covers the same steps) have equal figures; the key is
    their runs as tuples of ints, so equal keys mean equal inputs.
    """

    def __missing__(self, key: tuple) -> tuple[int, int, list[Run], int, int]:
        w, cap, history, new_runs = key
        combined = accounting.profile([*history, *new_runs])
        peak, start = accounting.max_window(combined, w)
        if peak <= cap:  # the request's own worst window, headroom left after it
            own = accounting.max_window(new_runs, w)[0]
            value = self[key] = (peak, start, combined, own, cap - peak)
            return value
        value = self[key] = (peak, start, combined,
                             accounting.window_sum(accounting.profile(new_runs), start, w),
                             cap - accounting.window_sum(history, start, w))
        return value


def _window(accounts: Accounts, a: int, new_runs: list[Run], sweeps: _Sweeps) -> _Window:
    """Decide one w-event account: its worst window with all of the call's new runs."""
    w, cap = int(accounts.w[a]), int(accounts.cap[a])
    peak, start, combined, requested, remaining = sweeps[
        (w, cap, tuple(accounts.history[a]), tuple(new_runs))]
    if peak <= cap:  # admitted: the request's own worst window, headroom left after it
        return _Window(peak, combined, "", requested, remaining)
    stream = accounts.streams[a]
    where = ("summed over all of the user's streams" if stream is None
             else f"of stream {stream!r}")
    failure = (f"window of steps [{start}, {start + w}) {where} would cost "
               f"{format_units(peak)} > cap {format_units(cap)} {accounts.labels[a]}")
    return _Window(peak, combined, failure, requested, remaining)


def _user_failures(fails: np.ndarray, acc_first: np.ndarray, acc_user: np.ndarray,
                   n_users: int) -> np.ndarray:
    """Per user, the failing account met first in request order (-1: none)."""
    out = np.full(n_users, -1, np.int64)
    bad = np.flatnonzero(fails)
    if len(bad):
        bad = bad[np.argsort(acc_first[bad], kind="stable")]
        users, pos = np.unique(acc_user[bad], return_index=True)
        out[users] = bad[pos]
    return out


def _reasons(charges: Charges, denied: np.ndarray, fail_of: np.ndarray, texts: dict[int, str]
             ) -> list[str]:
    reasons = ["admitted"] * len(charges.units)
    for i in np.flatnonzero(denied).tolist():
        u = int(charges.user[i])
        if charges.denied_before[u]:
            reasons[i] = DENIED_EARLIER
            continue
        fa = int(fail_of[u])
        own = int(charges.account[i]) == fa
        reasons[i] = texts[fa] if own else TOGETHER + texts[fa]
    return reasons


def admit(accounts: Accounts, charges: Charges) -> Decisions:
    """Decide every request of one call, all or nothing per user.

    Privacy guarantee: an admitted request never makes any account exceed its
    cap (gp/cgp total, any w-event window, history included), so the filter of
    basic composition holds. Cost: O(n log n) array operations for n requests
    plus one window sweep per w-event account; nothing is read or written.

    Args:
        accounts: the state of every account the call charges.
        charges: the call's new charges.

    Returns:
        The decisions, their entry order and the accounts' new state.
    """
    n, n_acc = len(charges.units), len(accounts.cap)
    acc = charges.account
    wev = accounts.w > 0
    running, added = group_running_sum(acc, np.where(wev[acc], 0, charges.units), n_acc)
    total = accounts.spent + added
    acc_first = group_first(acc, n_acc)
    acc_user = np.zeros(n_acc, np.int64)
    acc_user[acc] = charges.user
    rows_of: dict[int, list[int]] = {}  # w-event account -> its requests, in order
    for i in np.flatnonzero(wev[acc]).tolist():
        rows_of.setdefault(int(acc[i]), []).append(i)
    sweeps = _Sweeps()
    windows = {a: _window(accounts, a, [r for i in rows for r in charges.runs[i]], sweeps)
               for a, rows in rows_of.items()}
    fails = (total > accounts.cap).astype(bool) & ~wev
    texts: dict[int, str] = {}
    for a in np.flatnonzero(fails).tolist():
        texts[a] = (f"spent {format_units(accounts.spent[a])} + requested "
                    f"{format_units(added[a])} > cap {format_units(accounts.cap[a])} "
                    f"{accounts.labels[a]}")
    for a, win in windows.items():
        fails[a] = bool(win.failure)
        if win.failure:
            texts[a] = win.failure
    above = (accounts.spent > accounts.cap).astype(bool)  # a cap lowered below the spend
    for a in np.flatnonzero(above).tolist():
        texts[a] = (f"{ABOVE_CAP}: spent {format_units(accounts.spent[a])} > cap "
                    f"{format_units(accounts.cap[a])} {accounts.labels[a]}; it admits nothing")
    fails |= above
    fail_of = _user_failures(fails, acc_first, acc_user, len(charges.denied_before))
    user_denied = charges.denied_before | (fail_of >= 0)
    denied = user_denied[charges.user]
    changed = ~user_denied[acc_user]
    cap_r, spent_r = accounts.cap[acc], accounts.spent[acc]
    after = spent_r + running
    requested = charges.units.copy()
    remaining = np.where(denied, cap_r - spent_r, cap_r - after)
    balance = np.where(denied, spent_r, after)
    history = list(accounts.history)
    new_spent = np.where(changed, total, accounts.spent)
    for a, win in windows.items():
        _window_rows(accounts, charges.runs, rows_of[a], a, win, bool(changed[a]),
                     (requested, remaining, balance))
        if changed[a]:
            new_spent[a], history[a] = win.peak, win.combined
    user_first = group_first(charges.user, len(charges.denied_before))
    secondary = np.where(denied, 0, acc_first[acc])
    order = np.lexsort((np.arange(n), secondary, user_first[charges.user]))
    return Decisions(order, ~denied, _reasons(charges, denied, fail_of, texts), requested,
                     remaining, balance, new_spent, history, changed)


def _window_rows(accounts: Accounts, runs: Sequence[list[Run]], rows: list[int], a: int,
                 win: _Window, admitted: bool, out: tuple[np.ndarray, ...]) -> None:
    """Fill (requested, remaining, balance) of the requests `rows` of w-event account `a`."""
    requested, remaining, balance = out
    w = int(accounts.w[a])
    cur = accounts.history[a]
    if len(rows) == 1:  # the account's one request: its balance is the call's peak
        requested[rows[0]], remaining[rows[0]] = win.requested, win.remaining
        balance[rows[0]] = win.peak if admitted else (
            accounting.max_window(cur, w)[0] if cur else 0)
        return
    denied_balance = 0 if admitted else accounting.max_window(cur, w)[0]
    for i in rows:
        requested[i], remaining[i] = win.requested, win.remaining
        if admitted:  # entry by entry, as `verify` replays them
            cur = accounting.profile([*cur, *runs[i]])
            balance[i] = accounting.max_window(cur, w)[0]
        else:
            balance[i] = denied_balance
