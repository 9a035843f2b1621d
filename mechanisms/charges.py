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

from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np

from mechanisms.cost import Cost, CostItem, StepRun, WEventCost, epsilon_per_step

__all__ = ["curve_cost", "wevent_cost", "wevent_costs", "new_step_runs"]


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


def wevent_costs(steps: np.ndarray, offsets: np.ndarray, *, epsilon: Fraction, w: int,
                 repeated: Sequence[Iterable[tuple[int, int]]] = ()
                 ) -> list[WEventCost | None]:
    """`wevent_cost` of many streams at once: stream k is ``steps[offsets[k]:offsets[k + 1]]``.

    Privacy: the same costs as `wevent_cost` called stream by stream (ε/w per
    new released step, nothing for a step inside a repeated range); streams
    released over equal runs share one `WEventCost`. Cost: one numpy pass over
    the steps and O(1) Python per stream; a stream with repeated ranges, or
    whose steps do not increase (which `wevent_cost` refuses, with its
    error), takes `wevent_cost` itself.

    Args:
        steps: the released steps of every stream, stream after stream.
        offsets: k + 1 increasing row offsets, from 0 to ``steps.size``.
        epsilon: ε per window of w steps, exact.
        w: the window length (>= 1).
        repeated: per stream, its inclusive (first, last) repeated ranges
            (empty, or shorter than the streams: none for the rest).
    """
    steps = np.asarray(steps, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    eps, w = Fraction(epsilon), int(w)
    per_step = epsilon_per_step(eps, w)
    n = steps.size
    gap = np.diff(steps)
    cut = np.zeros(n + 1, dtype=bool)
    cut[1:n] = gap != 1
    cut[offsets] = True
    inner = np.ones(gap.size, dtype=bool)  # pairs of rows inside one stream
    edges = offsets[(offsets > 0) & (offsets < n)]
    inner[edges - 1] = False
    unordered = set((np.searchsorted(offsets, np.flatnonzero((gap <= 0) & inner),
                                     side="right") - 1).tolist())
    starts = np.flatnonzero(cut)[:-1]
    firsts, stops = steps[starts].tolist(), (steps[np.flatnonzero(cut)[1:] - 1] + 1).tolist()
    at = np.searchsorted(starts, offsets).tolist()
    shared: dict[tuple[int, ...], WEventCost] = {}
    out: list[WEventCost | None] = []
    for k in range(offsets.size - 1):
        ranges = tuple(repeated[k]) if k < len(repeated) else ()
        if ranges or k in unordered:
            out.append(wevent_cost(steps[offsets[k]:offsets[k + 1]], epsilon=eps, w=w,
                                   repeated=ranges))
            continue
        i, j = at[k], at[k + 1]
        key = (*firsts[i:j], *stops[i:j])
        if i == j:
            out.append(None)
        elif key in shared:
            out.append(shared[key])
        else:
            runs = tuple(StepRun(a, b, per_step)
                         for a, b in zip(firsts[i:j], stops[i:j], strict=True))
            out.append(shared.setdefault(key, _wevent(eps, w, runs)))
    return out


@lru_cache(maxsize=4096)
def _wevent(epsilon: Fraction, w: int, runs: tuple[StepRun, ...]) -> WEventCost:
    """One `WEventCost` per distinct (ε, w, runs): streams released over equal steps share it."""
    return WEventCost(epsilon, w, runs)
