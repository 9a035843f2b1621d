"""w-event budgeting and the Square Wave stream release.

Under w-event LDP (Kellaris et al. VLDB'14 in the local model; CPR paper
Sec. II-C) a user's stream x_1, x_2, … is protected if, for every window of w
consecutive time steps, the per-step budgets sum to at most ε. Spending
ε₀ = ε/w at every step meets this with equality. Spec: ``docs/mechanisms.md`` §2.1.

Costs are exact: the user's ε is read with `mechanisms.cost.exact`, the per-step
cost is the Fraction ε/w, and only the sampler sees float(ε/w).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from mechanisms.cost import (
    StepRun,
    WEventCost,
    compress_steps,
    epsilon_per_step,
    exact,
    float_at_most,
)
from mechanisms.errors import MechanismParameterError
from mechanisms.streams.square_wave import (
    _check_unit_interval,
    square_wave,
    square_wave_params,
)

__all__ = [
    "StreamRelease",
    "float_at_most",
    "check_wevent_params",
    "per_step_epsilon",
    "uniform_wevent_cost",
    "wevent_cost_from_steps",
    "release_stream",
]


@dataclass(frozen=True)
class StreamRelease:
    """What a stream mechanism releases and what it cost.

    Attributes:
        y: the released per-step reports (what leaves the device), float array.
        cost: exact per-step costs as a `WEventCost` (absolute step indices).
        mechanism: name of the randomizer, e.g. ``"square_wave"``.
        epsilon_per_step: float per-step budget used at each step (0 where a
            step released nothing new), aligned with `y`.
        published: boolean mask, True where the step drew fresh noise.
        start_step: absolute index of ``y[0]`` in the user's stream.
        info: plain JSON-able extras (e.g. the SW constants b, p, q).
    """

    y: np.ndarray
    cost: WEventCost
    mechanism: str
    epsilon_per_step: np.ndarray
    published: np.ndarray
    start_step: int = 0
    info: dict = field(default_factory=dict)


def check_wevent_params(epsilon: object, w: object, start_step: object = 0) -> Fraction:
    """Validate (ε, w, start_step) of a w-event release and return ε as a Fraction.

    Args:
        epsilon: total budget per window of w steps (> 0, finite).
        w: window length (integer >= 1).
        start_step: absolute index of the first released step (integer >= 0).

    Returns:
        The exact ε.

    Raises:
        MechanismParameterError: on any invalid value.
    """
    try:
        eps = exact(epsilon)  # type: ignore[arg-type]
    except ValueError as err:
        raise MechanismParameterError(f"epsilon: {err}") from err
    if eps <= 0:
        raise MechanismParameterError(f"epsilon must be > 0, got {epsilon!r}")
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or int(w) < 1:
        raise MechanismParameterError(f"w must be an integer >= 1, got {w!r}")
    if (
        isinstance(start_step, bool)
        or not isinstance(start_step, (int, np.integer))
        or int(start_step) < 0
    ):
        raise MechanismParameterError(f"start_step must be an integer >= 0, got {start_step!r}")
    if float(epsilon_per_step(eps, w)) > 700:
        raise MechanismParameterError("epsilon / w is too large (> 700) for e^ε")
    return eps


def per_step_epsilon(epsilon: object, w: int) -> Fraction:
    """Exact per-step budget ε/w of a uniform w-event allocation (spec §2.1).

    Args:
        epsilon: ε per window (read exactly).
        w: window length.

    Returns:
        Fraction ε/w.
    """
    return epsilon_per_step(check_wevent_params(epsilon, w), w)


def uniform_wevent_cost(epsilon: object, w: int, n: int, *, start_step: int = 0) -> WEventCost:
    """Cost of spending ε/w at each of n steps starting at `start_step` (one run).

    Every window of w consecutive steps then costs exactly ε.

    Args:
        epsilon: ε per window.
        w: window length.
        n: number of steps (>= 1).
        start_step: absolute index of the first step.

    Returns:
        `WEventCost(ε, w, (StepRun(start_step, start_step + n, ε/w),))`.
    """
    eps = check_wevent_params(epsilon, w, start_step)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) < 1:
        raise MechanismParameterError(f"n must be an integer >= 1, got {n!r}")
    run = StepRun(int(start_step), int(start_step) + int(n), epsilon_per_step(eps, w))
    return WEventCost(epsilon=eps, w=int(w), runs=(run,))


def wevent_cost_from_steps(
    epsilon: Fraction, w: int, per_step: list[Fraction], *, start_step: int = 0
) -> WEventCost:
    """Compress exact per-step costs into a `WEventCost` (runs of equal cost).

    Args:
        epsilon: ε per window (exact).
        w: window length.
        per_step: exact cost of each step, in order.
        start_step: absolute index of ``per_step[0]``.

    Returns:
        The cost; its constructor re-checks every window against ε.
    """
    return WEventCost(
        epsilon=epsilon, w=int(w), runs=compress_steps(per_step, offset=int(start_step))
    )


def _check_stream(x: object) -> np.ndarray:
    arr = _check_unit_interval(x)
    if arr.ndim != 1 or arr.size < 1:
        raise MechanismParameterError("the stream must be a non-empty 1-D array")
    return arr


def release_stream(
    x: object,
    *,
    epsilon: float | int | str | Fraction,
    w: int,
    rng: np.random.Generator,
    start_step: int = 0,
) -> StreamRelease:
    """Release a whole [0, 1]-normalised stream with the Square Wave at ε/w per step.

    Privacy: ε-w-event LDP. Neighbouring relation: two streams of the same user
    that differ at any set of steps inside one window of w consecutive steps
    (values anywhere in [0, 1]); each step is privatized with SW at ε₀ = ε/w
    (ε₀-LDP), so any w consecutive steps cost w·ε/w = ε by basic composition.
    Because costs are indexed by absolute step (`start_step`), a release that
    continues yesterday's stream continues its windows in the ledger.
    Cost: one run [start_step, start_step + n) at exactly Fraction(ε)/w per step.
    Reference: CPR paper (arXiv 2605.02724) Sec. II-C, III-A, Alg. 1 line 1;
    spec §2.1-§2.2.

    Args:
        x: 1-D stream with values in [0, 1] (normalised with a public range).
        epsilon: ε per window of w steps (read exactly; ``0.1`` means 1/10).
        w: window length (>= 1).
        rng: injected generator.
        start_step: absolute index of ``x[0]`` in the user's stream.

    Returns:
        `StreamRelease` with the SW reports in ``y`` and the exact cost.

    Raises:
        MechanismParameterError: invalid parameters (checked first), then a
            non-finite, empty or out-of-range stream (before any draw).
    """
    eps = check_wevent_params(epsilon, w, start_step)
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("rng must be a numpy.random.Generator")
    eps_step = epsilon_per_step(eps, w)
    eps_float = float_at_most(eps_step)
    if not math.isfinite(eps_float) or eps_float <= 0:
        raise MechanismParameterError("epsilon / w underflows to 0 as a float")
    b, p, q = square_wave_params(eps_float)
    arr = _check_stream(x)
    y = square_wave(arr, epsilon_per_step=eps_float, rng=rng)
    n = arr.size
    cost = WEventCost(
        epsilon=eps,
        w=int(w),
        runs=(StepRun(int(start_step), int(start_step) + n, eps_step),),
    )
    return StreamRelease(
        y=y,
        cost=cost,
        mechanism="square_wave",
        epsilon_per_step=np.full(n, eps_float),
        published=np.ones(n, dtype=bool),
        start_step=int(start_step),
        info={"b": b, "p": p, "q": q, "epsilon_per_step": str(eps_step)},
    )
