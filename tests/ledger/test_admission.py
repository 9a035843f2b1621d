"""The pure admission function against an independent model (no DuckDB).

The model expands every w-event account to one cost per step and slides every
window by brute force; gp/cgp accounts add up. It states the rule of
docs/design.md directly: a user is admitted iff after all of its charges in the call
every account stays within its cap (and it was not denied earlier in the
release); all or nothing per user.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.accounting import profile
from ledger.admission import Accounts, Charges, admit
from ledger.amounts import format_units


def _per_step(runs):
    out = {}
    for a, b, q in runs:
        for t in range(a, b):
            out[t] = out.get(t, 0) + q
    return out


def _windows(per, w):
    """{start: window sum} for every start that can hold a non-zero step."""
    if not per:
        return {0: 0}
    lo, hi = min(per) - w + 1, max(per)
    return {s: sum(per.get(t, 0) for t in range(s, s + w)) for s in range(lo, hi + 1)}


def _peak(runs, w):
    win = _windows(_per_step(runs), w)
    best = max(win.values())
    return best, min(s for s, v in win.items() if v == best)


def _model(acc_rows, reqs, denied_before):
    """Expected (order, admitted, reasons, requested, remaining, balance) per request."""
    n = len(reqs)
    users = list(dict.fromkeys(r[0] for r in reqs))
    admitted, reasons = [True] * n, ["admitted"] * n
    requested, remaining, balance = [0] * n, [0] * n, [0] * n
    order = []
    for u in users:
        mine = [i for i, r in enumerate(reqs) if r[0] == u]
        accs = list(dict.fromkeys(reqs[i][1] for i in mine))
        failure, blamed = ("the user was denied earlier in this release", None) \
            if denied_before[u] else ("", None)
        for a in accs:
            cap, spent, w, hist, label, stream = acc_rows[a]
            rows = [i for i in mine if reqs[i][1] == a]
            if spent > cap:  # a cap lowered below the spend: nothing is admitted
                if not failure:
                    failure, blamed = (f"above a lowered cap: spent {format_units(spent)} > cap "
                                       f"{format_units(cap)} {label}; it admits nothing"), a
                continue
            if w:
                new = [run for i in rows for run in reqs[i][3]]
                peak, s = _peak(hist + new, w)
                if peak > cap and not failure:
                    failure, blamed = (f"window of steps [{s}, {s + w}) of stream {stream!r} "
                                       f"would cost {format_units(peak)} > cap "
                                       f"{format_units(cap)} {label}"), a
            else:
                add = sum(reqs[i][2] for i in rows)
                if spent + add > cap and not failure:
                    failure, blamed = (f"spent {format_units(spent)} + requested "
                                       f"{format_units(add)} > cap {format_units(cap)} {label}"), a
        ok = not failure
        for a in accs:
            cap, spent, w, hist, label, stream = acc_rows[a]
            rows = [i for i in mine if reqs[i][1] == a]
            new = [run for i in rows for run in reqs[i][3]]
            cur, total = list(hist), spent
            for i in rows:
                if w:
                    peak, s = _peak(hist + new, w)
                    if ok or peak <= cap:
                        requested[i] = _peak(new, w)[0]
                        remaining[i] = cap - peak
                    else:
                        per_new, per_old = _per_step(new), _per_step(hist)
                        requested[i] = sum(per_new.get(t, 0) for t in range(s, s + w))
                        remaining[i] = cap - sum(per_old.get(t, 0) for t in range(s, s + w))
                    if ok:
                        cur = cur + list(reqs[i][3])
                        balance[i] = _peak(cur, w)[0]
                    else:
                        balance[i] = _peak(hist, w)[0]
                else:
                    requested[i] = reqs[i][2]
                    if ok:
                        total += reqs[i][2]
                        remaining[i], balance[i] = cap - total, total
                    else:
                        remaining[i], balance[i] = cap - spent, spent
                if not ok:
                    admitted[i] = False
                    together = blamed is not None and a != blamed
                    reasons[i] = ("denied together with the user's other requests: " + failure
                                  if together else failure)
        order += [i for a in accs for i in mine if reqs[i][1] == a] if ok else mine
    return order, admitted, reasons, requested, remaining, balance


_RUN = st.tuples(st.integers(0, 12), st.integers(1, 5), st.integers(1, 4)).map(
    lambda t: (t[0], t[0] + t[1], t[2]))


@st.composite
def _calls(draw):
    n_users = draw(st.integers(1, 4))
    acc_rows, owner = [], []
    for u in range(n_users):
        for _ in range(draw(st.integers(1, 3))):
            w = draw(st.sampled_from([0, 0, 1, 2, 4]))
            hist = profile(draw(st.lists(_RUN, max_size=3))) if w else []
            spent = _peak(hist, w)[0] if w else draw(st.integers(0, 12))
            acc_rows.append((draw(st.integers(0, 16)), spent, w, hist, f"units-{len(acc_rows)}",
                             f"s{len(acc_rows)}"))
            owner.append(u)
    reqs = []
    for _ in range(draw(st.integers(1, 8))):
        a = draw(st.integers(0, len(acc_rows) - 1))
        if acc_rows[a][2]:
            runs = profile(draw(st.lists(_RUN, min_size=1, max_size=3)))
            reqs.append((owner[a], a, sum(q * (b - s) for s, b, q in runs), runs))
        else:
            reqs.append((owner[a], a, draw(st.integers(1, 8)), []))
    used = sorted({r[1] for r in reqs})  # every account of `Accounts` has a request
    remap = {a: k for k, a in enumerate(used)}
    acc_rows = [acc_rows[a] for a in used]
    reqs = [(u, remap[a], q, runs) for u, a, q, runs in reqs]
    denied = draw(st.lists(st.booleans(), min_size=n_users, max_size=n_users))
    return acc_rows, reqs, denied


def _objects(values):
    out = np.empty(len(values), object)
    out[:] = list(values)
    return out


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_calls())
def test_admit_matches_the_model(call):
    acc_rows, reqs, denied = call
    accounts = Accounts(cap=_objects([r[0] for r in acc_rows]),
                        spent=_objects([r[1] for r in acc_rows]),
                        w=np.array([r[2] for r in acc_rows], np.int64),
                        history=[r[3] for r in acc_rows], labels=[r[4] for r in acc_rows],
                        streams=[r[5] for r in acc_rows])
    charges = Charges(user=np.array([r[0] for r in reqs], np.int64),
                      account=np.array([r[1] for r in reqs], np.int64),
                      units=_objects([r[2] for r in reqs]), runs=[r[3] for r in reqs],
                      denied_before=np.array(denied, bool))
    out = admit(accounts, charges)
    order, admitted, reasons, requested, remaining, balance = _model(acc_rows, reqs, denied)
    assert out.order.tolist() == order
    assert out.admitted.tolist() == admitted
    assert out.reasons == reasons
    assert out.requested.tolist() == requested
    assert out.remaining.tolist() == remaining
    assert out.balance.tolist() == balance
    for a, (cap, spent, w, hist, *_) in enumerate(acc_rows):
        rows = [i for i, r in enumerate(reqs) if r[1] == a]
        changed = all(admitted[i] for i in rows)
        assert out.changed[a] == changed
        if not changed:
            assert out.spent[a] == spent and out.history[a] == hist
        elif w:
            assert out.spent[a] == _peak(hist + [x for i in rows for x in reqs[i][3]], w)[0]
            assert out.spent[a] <= cap  # the privacy filter: no admitted window over the cap
        else:
            assert out.spent[a] == spent + sum(reqs[i][2] for i in rows) <= cap


def test_exact_at_the_cap_and_one_quantum_above():
    cap = 10**24 + 7  # beyond int64: exact integer arithmetic
    accounts = Accounts(cap=_objects([cap, cap]), spent=_objects([cap - 3, cap - 3]),
                        w=np.zeros(2, np.int64), history=[[], []], labels=["ε", "ε"],
                        streams=["", ""])
    charges = Charges(user=np.array([0, 1]), account=np.array([0, 1]), units=_objects([3, 4]),
                      runs=[[], []], denied_before=np.zeros(2, bool))
    out = admit(accounts, charges)
    assert out.admitted.tolist() == [True, False]
    assert out.remaining.tolist() == [0, 3] and out.spent.tolist() == [cap, cap - 3]
    assert Fraction(out.requested[1] - out.remaining[1]) == 1


def test_an_admitted_users_entries_are_grouped_by_account_a_denied_users_are_not():
    # user 0: accounts 0, 1, 0 (admitted); user 1: accounts 2, 3, 2 (account 3 over its cap)
    accounts = Accounts(cap=_objects([10, 10, 10, 1]), spent=_objects([0, 0, 0, 0]),
                        w=np.zeros(4, np.int64), history=[[]] * 4, labels=["ε"] * 4,
                        streams=[""] * 4)
    charges = Charges(user=np.array([0, 0, 1, 1, 0, 1]), account=np.array([0, 1, 2, 3, 0, 2]),
                      units=_objects([1, 1, 1, 2, 1, 1]), runs=[[]] * 6,
                      denied_before=np.zeros(2, bool))
    out = admit(accounts, charges)
    assert out.order.tolist() == [0, 4, 1, 2, 3, 5]
    assert out.admitted.tolist() == [True, True, False, False, True, False]
    assert out.balance.tolist() == [1, 1, 0, 0, 2, 0]
    assert out.reasons[3] == (f"spent {format_units(0)} + requested {format_units(2)} > cap "
                              f"{format_units(1)} ε")
    assert out.reasons[2] == "denied together with the user's other requests: " + out.reasons[3]
