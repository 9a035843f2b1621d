"""Exact amounts: the quantum, rounding directions, and the ledger's exact admissions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from ledger import (
    UNITS_PER_EPSILON,
    Request,
    cap_units,
    charge_units,
    format_fraction,
    from_units,
    is_exact,
)

Q = Fraction(1, UNITS_PER_EPSILON)  # one quantum


def test_quantum_is_the_documented_product():
    # lcm(1..32) computed independently by prime powers <= 32.
    lcm = 1
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31):
        lcm *= p ** int(math.log(32, p) + 1e-9)
    assert lcm == 144403552893600
    assert UNITS_PER_EPSILON == lcm * 10**6 * 2**12


@pytest.mark.parametrize("text", ["0.1", "0.000001", "0.123456", "3.5", "1e-6", "2"])
def test_decimals_up_to_six_places_are_exact(text):
    assert is_exact(text)
    assert from_units(charge_units(text)) == Fraction(text)
    assert from_units(cap_units(text)) == Fraction(text)


@pytest.mark.parametrize("w", range(1, 33))
def test_epsilon_over_w_is_exact(w):
    for eps in (Fraction(1), Fraction(1, 10), Fraction(3, 2)):
        assert from_units(charge_units(eps / w)) == eps / w


@pytest.mark.parametrize("k", [2, 3, 4, 12, 16, 3 * 2**20, 2**22, 5 * 2**22])
def test_budget_splits_are_exact(k):
    assert is_exact(Fraction(1, k))


def test_floats_go_through_their_shortest_repr():
    assert charge_units(0.1) == UNITS_PER_EPSILON // 10
    assert charge_units(0.1) == charge_units("0.1") == charge_units(Fraction(1, 10))


@pytest.mark.parametrize(
    "x", [Fraction(1, 37), Fraction(1, 2**24), Fraction(2, 3**5), Fraction(1, 5**9)]
)
def test_unrepresentable_amounts_round_conservatively(x):
    assert not is_exact(x)
    up, down = from_units(charge_units(x)), from_units(cap_units(x))
    assert down < x < up
    assert up - down == Q


def test_negative_and_garbage_amounts_are_rejected():
    for bad in (-0.1, float("nan"), float("inf"), "abc", True):
        with pytest.raises(ValueError):
            charge_units(bad)


def test_format_fraction():
    assert format_fraction(Fraction(1, 10)) == "0.1"
    assert format_fraction(Fraction(3)) == "3"
    assert format_fraction(Fraction(-1, 8)) == "-0.125"
    assert format_fraction(Fraction(1, 11)).startswith("1/11 (≈0.0909")


def _charge(led, release, user, amount, domain="ais", notion="gp"):
    r = led.reserve(release, [Request(user, domain, notion=notion, amount=amount)],
                    mechanism="test", parameters={})
    return (r.admitted + r.denied)[0]


def test_eleven_elevenths_fill_a_cap_of_one(led):
    decisions = [_charge(led, f"r{i}", "u", Fraction(1, 11)) for i in range(12)]
    assert [d.admitted for d in decisions] == [True] * 11 + [False]
    assert decisions[10].remaining == 0
    assert decisions[11].requested == Fraction(1, 11) and decisions[11].remaining == 0
    assert led.verify().ok


def test_ten_tenths_fill_a_cap_of_one_point_zero(led):
    decisions = [_charge(led, f"r{i}", "u", 0.1) for i in range(11)]
    assert [d.admitted for d in decisions] == [True] * 10 + [False]
    [bal] = led.balances("ais")
    assert bal["spent"] == 1 and bal["remaining"] == 0


def test_boundary_at_cap_and_one_quantum_either_side(led):
    # exactly the cap: admitted
    assert _charge(led, "a", "u1", Fraction(1)).admitted
    # cap + one quantum: denied
    d = _charge(led, "b", "u2", 1 + Q)
    assert not d.admitted and d.requested - d.remaining == Q
    # cap - one quantum, then one quantum (admitted), then one more quantum (denied)
    assert _charge(led, "c", "u3", 1 - Q).admitted
    assert _charge(led, "d", "u3", Q).admitted
    assert not _charge(led, "e", "u3", Q).admitted
    # below a quantum rounds up to a whole quantum: denied on a full account
    assert not _charge(led, "f", "u1", Q / 3).admitted
    assert led.verify().ok


def test_gp_charge_on_cgp_domain_costs_half_epsilon_squared(led):
    d = _charge(led, "r", "u", Fraction(1, 2), domain="ecg", notion="gp")
    assert d.admitted and d.requested == Fraction(1, 8) and d.remaining == Fraction(3, 8)
    # three more of ε = 1/2 fill ρ = 1/2 exactly; the fifth is denied
    got = [_charge(led, f"r{i}", "u", Fraction(1, 2), domain="ecg", notion="gp").admitted
           for i in range(4)]
    assert got == [True, True, True, False]
