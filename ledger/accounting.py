"""Composition and w-event accounting on exact integer quanta.

* **GP** accounts add ε; **CGP** accounts add ρ (basic composition; both are
  valid privacy filters, so adaptively chosen costs are fine as long as each
  request is admitted only if the cap still holds after it).
* An ε-GP charge on a CGP account costs ρ = ε²/2 (an ε-GP mechanism is
  ε²/2-CGP), computed exactly before rounding up to the quantum.
* A CGP mechanism cannot be charged to a GP account (ρ-CGP does not give a pure
  ε-GP guarantee): `NotionMismatchError`.
* **w-event** accounts (one per user, domain and stream) hold a cost per
  absolute time step, stored as runs ``(start, stop, quanta per step)``.
  Reserves add runs, refunds and closes subtract them. A request is admitted iff
  for every window of w consecutive steps the net sum, history included (so
  yesterday's release counts in today's windows), stays <= the cap. The window
  maximum is found by a sweep over run boundaries (`max_window`): the window sum
  is piecewise linear in the window start and only changes slope where a window
  edge crosses a boundary, so O(#runs) candidate starts suffice, never a loop
  per step.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from fractions import Fraction

from ledger.errors import LedgerInternalError, NotionMismatchError

Run = tuple[int, int, int]
"""A w-event run: steps [start, stop) each costing `quanta` (negative for refunds)."""

KIND_SIGN = {"reserve": 1, "refund": -1, "close": -1}
"""Signed contribution of an entry kind to its account's spend (other kinds: 0)."""


def charged_amount(account_notion: str, request_notion: str, amount: Fraction) -> Fraction:
    """The exact amount a request costs in the account's own notion.

    Args:
        account_notion: the domain's notion: ``gp``, ``cgp`` or ``wevent``.
        request_notion: the notion of the mechanism's guarantee.
        amount: ε for a ``gp`` request, ρ for a ``cgp`` request.

    Returns:
        ε for gp->gp, ρ for cgp->cgp, ε²/2 for gp->cgp.

    Raises:
        NotionMismatchError: a cgp request on a gp account, or mixing w-event with
            gp/cgp.
    """
    if account_notion == request_notion:
        return amount
    if account_notion == "cgp" and request_notion == "gp":
        return amount * amount / 2
    if account_notion == "gp" and request_notion == "cgp":
        raise NotionMismatchError(
            "a CGP (Gaussian, ρ) mechanism cannot be charged to a GP (ε) domain: ρ-CGP "
            "gives no pure ε-GP guarantee; use an ε-GP mechanism or a cgp domain"
        )
    raise NotionMismatchError(
        f"a {request_notion!r} charge cannot go to a {account_notion!r} domain "
        "(w-event streams and gp/cgp curves are budgeted separately)"
    )


def profile(runs: Iterable[Run]) -> list[Run]:
    """Net per-step cost as disjoint, sorted runs of equal non-zero level.

    Overlapping runs add up; negative runs (refunds) subtract.
    """
    events: dict[int, int] = {}
    for start, stop, q in runs:
        if q == 0 or stop <= start:
            continue
        events[start] = events.get(start, 0) + q
        events[stop] = events.get(stop, 0) - q
    out: list[Run] = []
    level = 0
    points = sorted(events)
    for i, x in enumerate(points[:-1]):
        level += events[x]
        nxt = points[i + 1]
        if level != 0:
            if out and out[-1][1] == x and out[-1][2] == level:
                out[-1] = (out[-1][0], nxt, level)
            else:
                out.append((x, nxt, level))
    return out


def total(runs: Iterable[Run]) -> int:
    """Sum over all steps of the per-step cost (quanta x steps)."""
    return sum(q * (stop - start) for start, stop, q in runs)


def max_window(runs: Sequence[Run], w: int) -> tuple[int, int]:
    """Largest net sum over any w consecutive steps, and a window start attaining it.

    Returns ``(0, 0)`` for an empty history. Sweep over the O(#runs) candidate
    starts ``b`` and ``b - w`` for every run boundary ``b``, each evaluated via
    prefix sums and binary search: O(R log R) for R runs, independent of the
    number of steps.
    """
    prof = profile(runs)
    if not prof:
        return 0, 0
    # Breakpoints of the cumulative cost C(x) = sum of costs of steps < x.
    points: list[int] = []
    cum: list[int] = []
    slopes: list[int] = []
    c = 0
    for start, stop, q in prof:
        if points and points[-1] == start:
            slopes[-1] = q
        else:
            points.append(start)
            cum.append(c)
            slopes.append(q)
        c += q * (stop - start)
        points.append(stop)
        cum.append(c)
        slopes.append(0)

    def cumulative(x: int) -> int:
        i = bisect.bisect_right(points, x) - 1
        if i < 0:
            return 0
        return cum[i] + slopes[i] * (x - points[i])

    best, best_s = None, 0
    for b in points:
        for s in (b, b - w):
            v = cumulative(s + w) - cumulative(s)
            if best is None or v > best or (v == best and s < best_s):
                best, best_s = v, s
    return int(best or 0), best_s


def window_sum(runs: Sequence[Run], start: int, w: int) -> int:
    """Net sum of the per-step cost over steps [start, start + w)."""
    lo, hi = start, start + w
    return sum(q * (min(stop, hi) - max(s, lo)) for s, stop, q in runs if s < hi and stop > lo)


def difference(reserved: Sequence[Run], actual: Sequence[Run]) -> list[Run]:
    """Per-step ``reserved - actual`` as runs (the part to refund).

    Raises:
        LedgerInternalError: the actual cost exceeds the reservation at some step.
    """
    diff = profile([*reserved, *((a, b, -q) for a, b, q in actual)])
    for start, stop, q in diff:
        if q < 0:
            raise LedgerInternalError(
                f"a stream's actual cost exceeds its reservation at steps [{start}, {stop})"
            )
    return diff
