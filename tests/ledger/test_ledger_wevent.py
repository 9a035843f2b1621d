"""w-event accounting: windows across releases, compact runs, per-step refunds."""

from __future__ import annotations

import random
from fractions import Fraction

import duckdb
import pytest

from ledger import Request, Settlement, accounting
from ledger.amounts import UNITS_PER_EPSILON
from mechanisms.cost import StepRun, WEventCost, max_window_sum

Q = UNITS_PER_EPSILON


def _w(led, release, runs, user="u", stream="s", step="release"):
    res = led.reserve(release, [Request(user, "power", step=step, notion="wevent",
                                        stream_id=stream, runs=tuple(runs))],
                      mechanism="sw", parameters={})
    return (res.admitted + res.denied)[0]


def _brute(runs, w, lo=-10, hi=60):
    per = {}
    for a, b, q in runs:
        for t in range(a, b):
            per[t] = per.get(t, 0) + q
    return max(sum(per.get(t, 0) for t in range(s, s + w)) for s in range(lo, hi))


def test_max_window_matches_brute_force_and_the_core():
    rng = random.Random(7)
    for _ in range(500):
        runs = []
        for _ in range(rng.randint(1, 6)):
            a = rng.randint(0, 30)
            runs.append((a, a + rng.randint(1, 12), rng.randint(-2, 6)))
        w = rng.randint(1, 9)
        m, s = accounting.max_window(runs, w)
        assert m == max(_brute(runs, w), 0)
        if m:
            assert accounting.window_sum(accounting.profile(runs), s, w) == m
        if all(q >= 0 for *_, q in runs):
            assert m == max_window_sum([StepRun(a, b, Fraction(q)) for a, b, q in runs], w)


def test_windows_straddle_two_releases(led):
    # cap 1 per window of w = 4. Yesterday: steps 0..9 at 1/4 -> every window full.
    assert _w(led, "day1", [StepRun(0, 10, Fraction(1, 4))]).admitted
    # Today continues at step 10: window [7, 11) would hold 3/4 + 1/4 = 1 -> ok for 1/4 ...
    assert _w(led, "day2", [StepRun(10, 12, Fraction(1, 4))]).admitted
    # ... but 1/2 at step 12 makes window [9, 13) = 1/4 * 3 + 1/2 > 1: denied.
    d = _w(led, "day3", [StepRun(12, 14, Fraction(1, 2))])
    assert not d.admitted
    assert "window of steps" in d.reason
    # requested / remaining in the worst window: [10, 14) holds 1/2 of history + 1 new.
    assert d.requested - d.remaining == Fraction(1, 4) * 2 + Fraction(1, 2) * 2 - 1
    # after a gap of w steps the budget is free again
    assert _w(led, "day4", [StepRun(16, 20, Fraction(1, 4))]).admitted
    # a different stream of the same user adds to the same (per-user) windows
    other = _w(led, "day5", [StepRun(12, 14, Fraction(1, 2))], stream="other")
    assert not other.admitted and "over all of the user's streams" in other.reason
    assert led.verify().ok


def test_an_admitted_request_never_overfills_any_window(led):
    rng = random.Random(3)
    admitted = []
    for i in range(25):
        a = rng.randint(0, 40)
        run = StepRun(a, a + rng.randint(1, 6), Fraction(rng.randint(1, 4), 8))
        if _w(led, f"r{i}", [run]).admitted:
            admitted.append((run.start, run.stop, run.epsilon))
    per_window = max_window_sum([StepRun(a, b, e) for a, b, e in admitted], 4)
    assert 0 < per_window <= 1
    # the stored account balance is that maximum, exactly
    [bal] = led.balances("power")
    assert bal["spent"] == per_window
    assert led.verify().ok


def test_million_step_history_is_a_handful_of_rows(led, ledger_path):
    assert _w(led, "big", [StepRun(0, 1_000_000, Fraction(1, 4))]).admitted
    assert _w(led, "next", [StepRun(1_000_000, 2_000_000, Fraction(1, 8)),
                            StepRun(2_000_000, 2_000_004, Fraction(1, 4))]).admitted
    # window [2_000_001, 2_000_005) would hold 3 x 1/4 + 1/2 > 1
    assert not _w(led, "over", [StepRun(2_000_004, 2_000_005, Fraction(1, 2))]).admitted
    assert _w(led, "fits", [StepRun(2_000_004, 2_000_005, Fraction(1, 4))]).admitted
    con = duckdb.connect(str(ledger_path))
    n = con.execute("SELECT count(*) FROM step_runs").fetchall()[0][0]
    con.close()
    assert n <= 5
    assert led.verify().ok


def test_settle_refunds_per_step_and_frees_windows(led):
    assert _w(led, "r", [StepRun(0, 8, Fraction(1, 4))]).admitted
    assert not _w(led, "r2", [StepRun(4, 5, Fraction(1, 4))]).admitted
    # the mechanism actually released only steps 0..3
    led.settle("r", [Settlement("u", "power", "release",
                                WEventCost(Fraction(1), 4, (StepRun(0, 4, Fraction(1, 4)),)),
                                stream_id="s")])
    assert [h["kind"] for h in led.history("u")] == ["reserve", "deny", "settle", "refund"]
    assert led.history("u")[-1]["amount"] == 1  # 4 steps x 1/4 refunded
    assert _w(led, "r3", [StepRun(4, 8, Fraction(1, 4))]).admitted
    assert led.verify().ok


def test_settle_above_reservation_at_any_step_is_a_bug(led):
    from ledger import LedgerInternalError

    assert _w(led, "r", [StepRun(0, 4, Fraction(1, 8))]).admitted
    with pytest.raises(LedgerInternalError):
        led.settle("r", [Settlement("u", "power", "release",
                                    WEventCost(Fraction(1), 4, (StepRun(3, 5, Fraction(1, 8)),)),
                                    stream_id="s")])


def test_close_frees_the_reserved_steps(led):
    assert _w(led, "r", [StepRun(0, 4, Fraction(1, 4))]).admitted
    led.close("r", "abandoned before any output")
    assert _w(led, "r2", [StepRun(0, 4, Fraction(1, 4))]).admitted
    assert led.verify().ok


def test_profile_merges_and_cancels():
    assert accounting.profile([(0, 5, 2), (5, 10, 2)]) == [(0, 10, 2)]
    assert accounting.profile([(0, 5, 2), (0, 5, -2)]) == []
    assert accounting.profile([(0, 10, 1), (3, 6, 1)]) == [(0, 3, 1), (3, 6, 2), (6, 10, 1)]
    assert accounting.total([(0, 10, Q)]) == 10 * Q
