"""`Ledger.charge_summary`, `balance_summary`, `window_charge_summary`: exact spreads.

The expected figures are computed here from the per-account rows
(`release_charges`, `balances`) with Python's exact `Fraction` and
`statistics.median_low`, not from the code under test.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from fractions import Fraction

import pytest
from ledger_helpers import POLICY

from ledger import Ledger, Request, Settlement, summaries
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost
from schemas.policy import parse_policy


def _spread(values):
    v = sorted(values)
    c = Counter(v)
    return (len(v), v[0], statistics.median_low(v), v[-1],
            tuple(sorted(c.items())) if len(c) <= 12 else None)


def _got(s):
    return (s.n, s.low, s.median, s.high, s.counts)


def test_charge_spread_is_the_per_user_net_sum_with_refunds_and_a_lower_median(led):
    # four users (an even count: the lower middle is the median), 1/3, 1/7 and 1/4 amounts;
    # u1 has two curves, one refunded to 1/12; u3 is denied and charged nothing
    led.reserve("r0", [Request("u3", "ais", amount=Fraction(9, 10))], mechanism="m",
                parameters={})
    reqs = [Request("u0", "ais", step="c", amount=Fraction(1, 3)),
            Request("u1", "ais", step="c1", amount=Fraction(1, 4)),
            Request("u1", "ais", step="c2", amount=Fraction(1, 4)),
            Request("u2", "ais", step="c", amount=Fraction(1, 7)),
            Request("u3", "ais", step="c", amount=Fraction(1, 3)),
            Request("u4", "ais", step="c", amount=Fraction(1, 7))]
    res = led.reserve("r1", reqs, mechanism="m", parameters={})
    assert [d.user_id for d in res.denied] == ["u3"]
    led.settle("r1", [Settlement("u1", "ais", "c2", Cost("gp", Fraction(1, 4), (
        CostItem("s", "gp", Fraction(1, 12)),)))])
    per_user: dict[str, Fraction] = {}
    for r in led.release_charges("r1"):
        per_user[r["user_id"]] = per_user.get(r["user_id"], Fraction(0)) + r["net"]
    assert per_user["u1"] == Fraction(1, 4) + Fraction(1, 12)
    expected = _spread(per_user.values())
    assert _got(led.charge_summary("r1")) == expected
    assert expected[2] == Fraction(1, 7)  # n = 4: 1/7, 1/7, 1/3, 1/3: the lower middle
    assert led.charge_summary("no-such-release") is None


def test_balance_spread_and_near_cap_count_equal_the_rows(led):
    # 14 accounts with 14 distinct spends: more than 12 distinct values, so no counts
    for i in range(14):
        led.reserve(f"r{i}", [Request(f"u{i}", "ais", amount=Fraction(i + 1, 15))],
                    mechanism="m", parameters={})
    # at the edge of "within 10% of the cap": remaining exactly 1/10 counts, 21/200 does not
    led.reserve("edge", [Request("e0", "ais", amount=Fraction(9, 10)),
                         Request("e1", "ais", amount=Fraction(179, 200))],
                mechanism="m", parameters={})
    rows = led.balances("ais")
    got = led.balance_summary("ais")
    assert _got(got.spent) == _spread([r["spent"] for r in rows])
    assert _got(got.remaining) == _spread([r["remaining"] for r in rows])
    assert got.spent.counts is None
    cap = max(r["cap"] for r in rows)
    assert got.cap == cap and got.accounts == len(rows) == 16
    assert got.near == sum(1 for r in rows if r["remaining"] <= cap / 10) == 2
    assert led.balance_summary("power") is None  # a domain without accounts


def _window_expected(led, release_id):
    """Per-user window charges from the per-account rows of `release_charges`."""
    rows = led.release_charges(release_id)
    over_streams = any(r["user_window"] is not None for r in rows)
    per_user: dict[str, Fraction] = {}
    for r in rows:
        if over_streams:
            per_user[r["user_id"]] = r["user_window"]
        else:
            per_user[r["user_id"]] = max(per_user.get(r["user_id"], Fraction(0)), r["window"])
    return (_spread(per_user.values()) if per_user else None), over_streams


@pytest.mark.parametrize("budget", ["per_user", "per_stream"])
@pytest.mark.parametrize("fetch_rows", [1, 3, 50_000])
def test_window_spread_is_each_users_largest_window_swept_in_batches(tmp_path, monkeypatch,
                                                                     budget, fetch_rows):
    # 15 users with 1-3 streams each, 1/(16+i) per step (15 distinct values: no counts),
    # some with a gap that keeps a window from holding every step; u3 settles a refund;
    # fetch_rows 1 and 3 put one user's rows in several fetches
    monkeypatch.setattr(summaries, "FETCH_ROWS", fetch_rows)
    pol = json.loads(json.dumps(POLICY))
    pol["domains"]["power"]["wevent_budget"] = budget
    led = Ledger.init(tmp_path / "ledger.duckdb", actor="pytest")
    led.apply_policy(parse_policy(pol))
    reqs = []
    for i in range(15):
        q = Fraction(1, 16 + i)
        for k in range(1 + i % 3):
            runs = ((StepRun(0, 6, q),) if k != 1 else (StepRun(0, 2, q), StepRun(5, 7, q)))
            reqs.append(Request(f"u{i:02d}", "power", step=f"s{k}", notion="wevent",
                                stream_id=f"s{k}", runs=runs))
    res = led.reserve("r", reqs, mechanism="square_wave", parameters={})
    assert not res.denied
    q3 = Fraction(1, 19)
    led.settle("r", [Settlement("u03", "power", "s0",
                                WEventCost(Fraction(1), 4, (StepRun(4, 6, q3),)),
                                stream_id="s0")])
    spread, over_streams = led.window_charge_summary("r")
    expected, expected_over = _window_expected(led, "r")
    assert over_streams is expected_over is (budget == "per_user")
    assert _got(spread) == expected
    assert expected[4] is None  # more than 12 distinct windows
    # u01 (2 streams, 1/17): per user a window holds 4 + 2 steps, per stream only 4
    u1 = {r["stream_id"]: r for r in led.release_charges("r") if r["user_id"] == "u01"}
    assert u1["s0"]["window"] == Fraction(4, 17)
    if budget == "per_user":
        assert u1["s0"]["user_window"] == Fraction(6, 17)
    assert led.window_charge_summary("no-such-release") == (None, False)
