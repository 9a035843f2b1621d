"""What a release actually spent, computed from public parameters and what it published.

A mechanism task reports its costs, but a task may run on a worker the ledger
does not trust. These pure functions give the same costs from what the release
publishes and from public parameters only, so the flow (before it settles a
chunk) and an auditor (from the output directory, `privpipe ledger verify
--manifests`) call the same function and compare. A registry entry names its
function (`mechanisms.registry`, field ``charge``).

- Curves: every curve mechanism spends exactly its request per released curve:
  its sub-steps add up to ε (or ρ) because the last step (the final
  projection) takes the remainder. PrivFuncSeg's split between ``reduce_seg``
  and ``project`` depends on the data, its total does not, and no refund is
  ever due (`curve_cost`).
- Streams: each released sample costs ε/w unless its step repeats a range an
  earlier release published (the same bytes, charged by that release)
  (`wevent_cost`).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache

import numpy as np

from mechanisms.cost import Cost, CostItem, StepRun, WEventCost, epsilon_per_step

__all__ = ["curve_cost", "wevent_cost", "new_step_runs"]


@lru_cache(maxsize=1024)
def curve_cost(notion: str, amount: Fraction) -> Cost:
    """What one released curve costs: its whole request, ε (``gp``) or ρ (``cgp``).

    Privacy: every registered curve mechanism is ε-GP / ρ-CGP per curve at the
    request, whatever its data-dependent sub-step split; the ledger charges the
    total and refunds nothing. Cost: O(1), cached by value.

    Args:
        notion: ``"gp"`` or ``"cgp"``.
        amount: the exact ε or ρ requested per curve (> 0).

    Returns:
        A `Cost` whose single ``curve`` item is the whole request.
    """
    amount = Fraction(amount)
    if amount <= 0:
        raise ValueError(f"a curve's request must be > 0, got {amount}")
    return Cost(notion=notion, requested=amount, items=(CostItem("curve", notion, amount),))


def new_step_runs(steps: np.ndarray, repeated: Iterable[tuple[int, int]], per_step: Fraction
                  ) -> tuple[StepRun, ...]:
    """Runs [a, b) of the released `steps` outside every `repeated` range, each at `per_step`.

    Args:
        steps: the released steps of one stream (integers, increasing).
        repeated: inclusive (first, last) step ranges repeated from earlier releases.
        per_step: the exact cost of one new step.
    """
    arr = np.asarray(steps, dtype=np.int64)
    keep = np.ones(arr.size, dtype=bool)
    for first, last in repeated:
        keep &= ~((arr >= int(first)) & (arr <= int(last)))
    arr = arr[keep]
    if arr.size == 0:
        return ()
    if np.any(np.diff(arr) <= 0):
        raise ValueError("a stream's released steps must be strictly increasing")
    breaks = np.flatnonzero(np.diff(arr) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [arr.size]])
    return tuple(StepRun(int(arr[a]), int(arr[b - 1]) + 1, per_step)
                 for a, b in zip(starts.tolist(), stops.tolist(), strict=True))


def wevent_cost(steps: np.ndarray, *, epsilon: Fraction, w: int,
                repeated: Iterable[tuple[int, int]] = ()) -> WEventCost | None:
    """What one released stream costs under w-event LDP: ε/w per new released step.

    Privacy: each released report of a new step is ε/w-LDP for that step, so any
    w consecutive steps cost at most ε; a step inside a `repeated` range is
    the same report an earlier release published and charged, so it costs
    nothing here. Cost: O(steps · ranges).

    Args:
        steps: the released steps of one (user, stream), increasing.
        epsilon: ε per window of w steps, exact.
        w: the window length (>= 1).
        repeated: inclusive (first, last) ranges repeated from earlier releases.

    Returns:
        The stream's `WEventCost`, or None when it released no new step.
    """
    runs = new_step_runs(steps, repeated, epsilon_per_step(Fraction(epsilon), int(w)))
    return _wevent(Fraction(epsilon), int(w), runs) if runs else None


@lru_cache(maxsize=4096)
def _wevent(epsilon: Fraction, w: int, runs: tuple[StepRun, ...]) -> WEventCost:
    """One `WEventCost` per distinct (ε, w, runs): streams released over equal steps share it."""
    return WEventCost(epsilon, w, runs)
