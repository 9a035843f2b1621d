"""Privacy cost descriptions that mechanisms return and the ledger charges.

A mechanism never touches the ledger. It reports what it spent as a `Cost`: a
notion (``gp``, ``cgp`` or ``wevent``) and a breakdown into named sub-steps.
Amounts are exact rationals (`fractions.Fraction`): budget splits such as
ε/4 + ε/12 + ε/6 + … must add back to the request exactly, so that the ledger
(which stores exact integer quanta) never sees a rounding excess.

w-event costs are per time step and stored as runs of equal per-step cost
(`StepRun`), so a 10^6-step stream at a constant ε/w is one run.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Rational

NOTIONS = ("gp", "cgp", "wevent")


def exact(x: float | int | str | Fraction) -> Fraction:
    """Return the exact rational a user meant by `x`.

    Floats are read through their shortest decimal repr, so ``0.1`` is 1/10 and
    not the binary double nearest to it; strings may be decimals or ratios
    (``"1/11"``). Raises ValueError for non-finite or non-numeric input.
    """
    if isinstance(x, bool):
        raise ValueError(f"a privacy parameter must be a number, got {x!r}")
    if isinstance(x, Fraction):
        return x
    if isinstance(x, Rational):
        return Fraction(int(x.numerator), int(x.denominator))
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            raise ValueError(f"a privacy parameter must be finite, got {x!r}")
        return Fraction(repr(x))
    if isinstance(x, str):
        try:
            return Fraction(x.strip())
        except (ValueError, ZeroDivisionError) as err:
            raise ValueError(f"not a number or ratio: {x!r}") from err
    try:
        return exact(float(x))  # numpy scalars
    except (TypeError, ValueError) as err:
        raise ValueError(f"a privacy parameter must be a number, got {type(x).__name__}") from err


def float_at_most(value: Fraction) -> float:
    """Largest float that does not exceed the exact budget `value`.

    Samplers must never use more budget than the ledger charges, so the float
    handed to them is rounded down, never to nearest. The same few public
    amounts are converted for every curve of a release, so results are cached
    (by exact value and type).
    """
    try:
        return _float_at_most(value)
    except TypeError:  # unhashable: compute directly
        return _float_at_most.__wrapped__(value)


@functools.lru_cache(maxsize=4096, typed=True)
def _float_at_most(value: Fraction) -> float:
    f = float(value)
    if Fraction(f) > value:
        f = math.nextafter(f, 0.0)
    return f


def epsilon_per_step(epsilon: Fraction, w: int) -> Fraction:
    """The exact per-step budget ε/w of a uniform w-event allocation (spec §2.1).

    The one place ε/w is computed: the registry's reservation, the stream
    randomizers, the de-biasing of released reports and the reconstructions
    all read it from here, exactly; only a sampler converts it to a float
    (`float_at_most`, so the float never exceeds what the ledger charges).

    Args:
        epsilon: ε per window of w steps, exact (`exact` reads a user's value).
        w: window length (>= 1).

    Returns:
        Fraction ε/w.
    """
    return Fraction(epsilon) / int(w)


def _exact_number(x: Fraction | float | int, name: str) -> Fraction:
    """`x` as an exact positive rational; a float is read as its exact binary value.

    Unlike `exact` (which reads a user's ``0.1`` as 1/10), a float here is an
    internal value such as ``float_at_most(ε/4)``, and only its binary value
    is known to be <= the charged amount.
    """
    if isinstance(x, bool) or not isinstance(x, Rational | float):
        raise ValueError(f"{name} must be a number, got {type(x).__name__}")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    v = Fraction(x)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return v


def float_at_least(value: Fraction) -> float:
    """Smallest float that is not below the exact `value` (> 0).

    Raises:
        ValueError: the value is not positive or overflows a float.
    """
    f = float(value)
    if math.isinf(f):
        raise ValueError(f"{value} overflows a float")
    if Fraction(f) < value:
        f = math.nextafter(f, math.inf)
    return f


@functools.lru_cache(maxsize=4096)
def laplace_scale(sensitivity: Fraction | float | int, epsilon: Fraction | float) -> float:
    """The float noise scale of a Laplace-type draw: the smallest float >= Δ/ε.

    Privacy: noise of scale ``Δ/ε`` on a Δ-Lipschitz statistic is ε-GP/DP; the
    returned float is never below the exact Δ/ε, so the draw never spends
    more than the ledger charged. Floats are read as their exact binary values
    (pass ε exactly or as ``float_at_most(ε)``). Cached by value.

    Args:
        sensitivity: Δ (> 0), e.g. 1, 2^l (ReduceSeg) or 3K (SVT).
        epsilon: ε (> 0) the step is charged.

    Returns:
        The smallest double ``s`` with ``s >= Δ/ε`` (exact comparison).
    """
    return float_at_least(_exact_number(sensitivity, "sensitivity")
                          / _exact_number(epsilon, "epsilon"))


@functools.lru_cache(maxsize=4096)
def gaussian_scale(sensitivity: Fraction | float | int, rho: Fraction | float) -> float:
    """The float standard deviation of a zCDP/CGP Gaussian draw: >= Δ/√(2ρ), exactly checked.

    Privacy: N(0, σ²) with σ = Δ/√(2ρ) on a Δ-Lipschitz statistic is ρ-zCDP
    (ρ-CGP for the Euclidean metric); the returned σ satisfies σ²·2ρ >= Δ²
    in exact rational arithmetic, so it is never below the exact one. It is
    the smallest double that does (the square root is irrational, so a
    floating-point ``Δ/sqrt(2ρ)`` can land on either side). Cached by value.

    Args:
        sensitivity: Δ (> 0).
        rho: ρ (> 0) the step is charged.

    Returns:
        The smallest double ``s`` with ``s²·2ρ >= Δ²``.
    """
    delta = _exact_number(sensitivity, "sensitivity")
    r = _exact_number(rho, "rho")
    s = float(delta) / math.sqrt(2.0 * float(r)) if float(r) > 0 else math.inf
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"Δ/√(2ρ) for Δ = {delta}, ρ = {r} is outside the float range")
    target = delta * delta
    while Fraction(s) ** 2 * 2 * r < target:
        s = math.nextafter(s, math.inf)
    while Fraction(below := math.nextafter(s, 0.0)) ** 2 * 2 * r >= target:
        s = below
    return s


@functools.lru_cache(maxsize=4096)
def sqrt_at_most(value: Fraction | float | int) -> float:
    """Largest float whose square does not exceed the exact `value` (> 0).

    Used for the ε = √(2ρ) at which an SVT step of a ρ-CGP budget runs
    (paper Lemma C.1): the float ε never exceeds the exact one.
    """
    v = _exact_number(value, "value")
    r = math.sqrt(float(v))
    while Fraction(r) ** 2 > v:
        r = math.nextafter(r, 0.0)
    while Fraction(above := math.nextafter(r, math.inf)) ** 2 <= v:
        r = above
    return r


@dataclass(frozen=True)
class CostItem:
    """One sub-step of a mechanism's spend.

    Attributes:
        step: sub-step name, e.g. ``"svt"``, ``"reduce_seg"``, ``"project"``.
        notion: ``"gp"`` (amount is ε) or ``"cgp"`` (amount is ρ).
        amount: exact amount spent by this sub-step.
    """

    step: str
    notion: str
    amount: Fraction

    def __post_init__(self) -> None:
        if self.notion not in ("gp", "cgp"):
            raise ValueError(f"CostItem notion must be 'gp' or 'cgp', got {self.notion!r}")
        if self.amount < 0:
            raise ValueError(f"CostItem amount must be >= 0, got {self.amount}")


@dataclass(frozen=True)
class Cost:
    """The cost of one curve mechanism run: a notion and its sub-step breakdown.

    `requested` is what the caller asked for (what the ledger reserves);
    `total` is what the sub-steps actually consumed (what the ledger settles),
    which is never more than `requested`.
    """

    notion: str
    requested: Fraction
    items: tuple[CostItem, ...]

    def __post_init__(self) -> None:
        if self.notion not in ("gp", "cgp"):
            raise ValueError(f"Cost notion must be 'gp' or 'cgp', got {self.notion!r}")
        for item in self.items:
            if item.notion != self.notion:
                raise ValueError("all cost items must share the cost's notion")
        if self.total > self.requested:
            raise AssertionError(
                f"this is a bug: sub-steps spend {self.total} > requested {self.requested}"
            )

    @functools.cached_property
    def total(self) -> Fraction:
        """Exact sum of the sub-step amounts (computed once: items are frozen)."""
        return sum((i.amount for i in self.items), Fraction(0))

    def breakdown(self) -> list[dict[str, str]]:
        """JSON-friendly breakdown (amounts as exact ``"p/q"`` strings)."""
        return [{"step": i.step, "notion": i.notion, "amount": str(i.amount)} for i in self.items]


@dataclass(frozen=True)
class StepRun:
    """A run of time steps [start, stop) that each cost `epsilon` (w-event)."""

    start: int
    stop: int
    epsilon: Fraction

    def __post_init__(self) -> None:
        if not (0 <= self.start < self.stop):
            raise ValueError(f"StepRun needs 0 <= start < stop, got [{self.start}, {self.stop})")
        if self.epsilon < 0:
            raise ValueError("StepRun epsilon must be >= 0")


@dataclass(frozen=True)
class WEventCost:
    """Per-step cost of a stream release under w-event LDP.

    `runs` cover the released steps (stream-local indices, possibly offset by
    the stream's start step) with their per-step ε; any window of `w`
    consecutive steps must sum to at most `epsilon`.
    """

    epsilon: Fraction
    w: int
    runs: tuple[StepRun, ...]

    def __post_init__(self) -> None:
        if self.w < 1:
            raise ValueError("w must be >= 1")
        if self.max_window_sum() > self.epsilon:
            raise AssertionError(
                f"this is a bug: a window of {self.w} steps costs {self.max_window_sum()} "
                f"> ε = {self.epsilon}"
            )

    def per_step(self, n: int | None = None) -> list[Fraction]:
        """Expand the runs to a per-step list (for tests and small streams)."""
        end = max((r.stop for r in self.runs), default=0) if n is None else n
        out = [Fraction(0)] * end
        for r in self.runs:
            for t in range(r.start, min(r.stop, end)):
                out[t] += r.epsilon
        return out

    def max_window_sum(self) -> Fraction:
        """Largest sum of per-step costs over any w consecutive steps (sweep over runs)."""
        return max_window_sum(self.runs, self.w)


def max_window_sum(runs: tuple[StepRun, ...] | list[StepRun], w: int) -> Fraction:
    """Maximum over all windows of w consecutive steps of the summed per-step cost.

    The window sum is piecewise linear in the window's start position and changes
    slope only where a window edge crosses a run boundary, so its maximum is
    attained at a start s with s = b or s + w = b for some boundary b. The sweep
    evaluates those O(#runs) candidates, each in O(log #runs) via prefix sums.
    Overlapping runs add up.
    """
    if not runs:
        return Fraction(0)
    # Cumulative cost function C(x) = cost of steps < x, piecewise linear with
    # breakpoints at run boundaries; window sum W(s) = C(s + w) - C(s).
    events: dict[int, Fraction] = {}
    for r in runs:
        events[r.start] = events.get(r.start, Fraction(0)) + r.epsilon
        events[r.stop] = events.get(r.stop, Fraction(0)) - r.epsilon
    points = sorted(events)
    # slope on [points[i], points[i+1]) and C at each point
    slopes: list[Fraction] = []
    cum: list[Fraction] = []
    slope = Fraction(0)
    c = Fraction(0)
    for i, x in enumerate(points):
        if i:
            c += slope * (x - points[i - 1])
        cum.append(c)
        slope += events[x]
        slopes.append(slope)

    def cumulative(x: int) -> Fraction:
        i = bisect.bisect_right(points, x) - 1
        if i < 0:
            return Fraction(0)
        return cum[i] + slopes[i] * (x - points[i])

    candidates = set()
    for b in points:
        candidates.add(b)
        candidates.add(b - w)
    return max(cumulative(s + w) - cumulative(s) for s in candidates)
