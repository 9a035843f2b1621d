"""A ledger of many users built through the real Ledger API, for the audit page's tests.

One curves domain ``ais`` (GP, cap 1). Release ``bulk`` charges every user:
even users 1/10, odd users 1/100, in batches (reserve, then settle, per
batch). Release ``top-up`` asks 19/20 of the first `denied_pool` users: the
even ones are denied (1/10 + 19/20 > 1), the odd ones admitted. Then the cap
is raised to 2 with a reason. The figures a test expects follow from these
rules (see `expected_spent`), not from the code under test.
"""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

POLICY = {"kind": "curves", "public": {"duration": True, "points": True}, "notion": "gp"}
EVEN, ODD, TOP_UP = Fraction(1, 10), Fraction(1, 100), Fraction(19, 20)
CHANGE_REASON = "raise the cap for the winter survey (board decision 12)"


def user_id(i: int) -> str:
    """The id of user number `i`."""
    return f"user-{i:07d}"


def expected_spent(i: int, denied_pool: int) -> Fraction:
    """What user `i` has spent once `build` is done (from the rules above)."""
    first = EVEN if i % 2 == 0 else ODD
    return first + (TOP_UP if i < denied_pool and i % 2 == 1 else 0)


def _policy(cap: str):  # noqa: ANN202 - schemas.policy.Policy
    from schemas.policy import parse_policy

    return parse_policy({"domains": {"ais": {**POLICY, "cap": cap}}})


def _charge(led, release: str, users: list[int], amount_of) -> int:  # noqa: ANN001
    """Reserve then settle `users` in `release`; returns how many were admitted."""
    from ledger import Request, Settlement
    from mechanisms.cost import Cost, CostItem

    ids = [user_id(i) for i in users]  # made once: a third of the build was these strings
    amounts = [amount_of(i) for i in users]
    reqs = [Request(u, "ais", amount=a) for u, a in zip(ids, amounts, strict=True)]
    res = led.reserve(release, reqs, mechanism="privfuncseg",
                      parameters={"epsilon": "per user", "basis": "linear"})
    admitted = {d.user_id for d in res.admitted}
    costs: dict[Fraction, Cost] = {}   # one frozen Cost per amount, shared by its users

    def cost(amount: Fraction) -> Cost:
        if amount not in costs:
            costs[amount] = Cost("gp", amount, (CostItem("svt", "gp", amount / 2),
                                                CostItem("project", "gp", amount / 2)))
        return costs[amount]

    sets = [Settlement(u, "ais", "release", cost(a))
            for u, a in zip(ids, amounts, strict=True) if u in admitted]
    if sets:
        led.settle(release, sets)
    return len(sets)


def build(path: Path, users: int, *, batch: int = 50_000, denied_pool: int = 20_000,
          log=print) -> dict[str, float]:  # noqa: ANN001
    """Create the ledger at `path` (must not exist); returns seconds per phase."""
    from ledger import Ledger

    t0 = time.perf_counter()
    led = Ledger.init(path, actor="bench-operator")
    led.apply_policy(_policy("1"), reason="initial policy")
    for start in range(0, users, batch):
        _charge(led, "bulk", list(range(start, min(users, start + batch))),
                lambda i: EVEN if i % 2 == 0 else ODD)
        log(f"  bulk: {min(users, start + batch):,} users ({time.perf_counter() - t0:.0f} s)")
    t1 = time.perf_counter()
    _charge(led, "top-up", list(range(min(users, denied_pool))), lambda i: TOP_UP)
    led.apply_policy(_policy("2"), reason=CHANGE_REASON)
    t2 = time.perf_counter()
    return {"bulk": t1 - t0, "top_up_and_policy": t2 - t1, "total": t2 - t0}
