"""`Ledger.release_charges`: what one release charged each account, net of refunds."""

from __future__ import annotations

from fractions import Fraction

from ledger import Request, Settlement
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost


def _gp(total: str, *parts: str) -> Cost:
    return Cost("gp", Fraction(total), tuple(CostItem(f"s{i}", "gp", Fraction(p))
                                             for i, p in enumerate(parts)))


def test_gp_charges_are_net_of_refunds_per_user_and_per_release(led):
    # u: two curves of 1/4 each, the second settles at 1/8 (refund 1/8): net 3/8.
    # v: one curve of 1/4, fully used. A second release charges u again: not counted here.
    led.reserve("r1", [Request("u", "ais", step="c1", amount=Fraction(1, 4)),
                       Request("u", "ais", step="c2", amount=Fraction(1, 4)),
                       Request("v", "ais", step="c1", amount=Fraction(1, 4))],
                mechanism="m", parameters={})
    led.settle("r1", [Settlement("u", "ais", "c1", _gp("1/4", "1/4")),
                      Settlement("u", "ais", "c2", _gp("1/4", "1/16", "1/16")),
                      Settlement("v", "ais", "c1", _gp("1/4", "1/4"))])
    led.reserve("r2", [Request("u", "ais", step="c3", amount=Fraction(1, 10))],
                mechanism="m", parameters={})
    rows = {r["user_id"]: r for r in led.release_charges("r1")}
    assert set(rows) == {"u", "v"}
    assert rows["u"]["net"] == Fraction(3, 8) and rows["u"]["items"] == 2
    assert rows["v"]["net"] == Fraction(1, 4) and rows["v"]["items"] == 1
    assert rows["u"]["window"] is None and rows["u"]["notion"] == "gp"
    assert [r["net"] for r in led.release_charges("r2")] == [Fraction(1, 10)]


def test_a_denied_user_is_not_charged(led):
    led.reserve("r1", [Request("u", "ais", amount=Fraction(9, 10))], mechanism="m",
                parameters={})
    res = led.reserve("r2", [Request("u", "ais", amount=Fraction(2, 10)),
                             Request("v", "ais", amount=Fraction(2, 10))],
                      mechanism="m", parameters={})
    assert [d.user_id for d in res.denied] == ["u"]
    assert [(r["user_id"], r["net"]) for r in led.release_charges("r2")] == [
        ("v", Fraction(1, 5))]


def test_wevent_window_is_the_largest_sum_over_w_steps_of_this_release(led):
    # power: w = 4, cap 1 per user (u has stream a, v stream b). Stream a: steps [0, 10)
    # at 1/4 each -> every full window 1, total 10/4. Stream b: steps [0, 2) at 1/4 and
    # [6, 8) at 1/4 -> a window holds at most 2 steps -> 1/2. A refund of steps [0, 5) of
    # stream a in the settle leaves steps [5, 10): window 1.
    q = Fraction(1, 4)
    led.reserve("r", [Request("u", "power", step="a", notion="wevent", stream_id="a",
                              runs=(StepRun(0, 10, q),)),
                      Request("v", "power", step="b", notion="wevent", stream_id="b",
                              runs=(StepRun(0, 2, q), StepRun(6, 8, q)))],
                mechanism="sw", parameters={})
    rows = {r["stream_id"]: r for r in led.release_charges("r")}
    assert rows["a"]["window"] == 1 and rows["a"]["net"] == Fraction(10, 4)
    assert rows["b"]["window"] == Fraction(1, 2) and rows["b"]["net"] == 1
    led.settle("r", [Settlement("u", "power", "a", WEventCost(Fraction(1), 4,
                                                             (StepRun(5, 10, q),)),
                                stream_id="a")])
    rows = {r["stream_id"]: r for r in led.release_charges("r")}
    assert rows["a"]["net"] == Fraction(5, 4) and rows["a"]["window"] == 1


def test_unknown_release_has_no_charges(led):
    assert led.release_charges("nope") == []
