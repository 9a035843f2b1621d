"""`Ledger.near_cap_users`: how many users a release left at 90% of the cap or more.

The count behind the ``privpipe.budget.near-cap`` event (flows/signals.py). Domain
``ais`` has cap 1; amounts are exact, so 9/10 is the boundary and one quantum
below it is not near.
"""

from __future__ import annotations

from fractions import Fraction

from ledger import UNITS_PER_EPSILON, Request

Q = Fraction(1, UNITS_PER_EPSILON)  # one quantum


def _reserve(led, release, amounts):
    led.reserve(release, [Request(u, "ais", notion="gp", amount=a) for u, a in amounts.items()],
                mechanism="test", parameters={})


def test_counts_the_release_users_at_or_above_ninety_percent(led):
    _reserve(led, "r0", {"early": Fraction(95, 100)})
    _reserve(led, "r1", {"at": Fraction(9, 10), "below": Fraction(9, 10) - Q,
                         "half": Fraction(1, 2), "early": Fraction(1, 2)})  # early: denied
    assert led.near_cap_users("r1", "ais") == 1  # only "at": "early" was not charged by r1
    assert led.near_cap_users("r0", "ais") == 1
    _reserve(led, "r2", {"below": Q})  # exactly 9/10 now
    assert led.near_cap_users("r2", "ais") == 1
    assert led.near_cap_users("r2", "ecg") == 0  # another domain's accounts
    assert led.near_cap_users("nope", "ais") == 0
