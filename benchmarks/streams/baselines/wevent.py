"""w-event parameters, the `StreamRelease` record and the uniform ε/w releases.

The CPR paper's comparison methods (spec §2.7) release a stream at a per-step
budget under w-event LDP (Kellaris et al. VLDB'14 in the local model; CPR paper
Sec. II-C): for every window of w consecutive steps the per-step budgets sum to
at most ε. Spending ε₀ = ε/w at every step meets this with equality. The
product's stream release is the registry entry's randomizer called by
`tasks.privatize`; this module serves the benchmarks' baselines only.

Costs are exact: the user's ε is read with `mechanisms.cost.exact`, the per-step
cost is the Fraction ε/w, and only the sampler sees float(ε/w).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from mechanisms.cost import StepRun, WEventCost, epsilon_per_step, exact, float_at_most
from mechanisms.errors import MechanismParameterError
from mechanisms.streams.square_wave import _check_unit_interval, square_wave, square_wave_params

__all__ = ["StreamRelease", "check_wevent_params", "sw_release"]

#: Given (ε/w exact, its float, rng): the draw of the whole [0, 1] stream and the
#: release's info; it validates its constants before the stream is read.
Sampler = Callable[[Fraction, float, np.random.Generator],
                   tuple[Callable[[np.ndarray], np.ndarray], dict]]


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


def _check_stream(x: object) -> np.ndarray:
    arr = _check_unit_interval(x)
    if arr.ndim != 1 or arr.size < 1:
        raise MechanismParameterError("the stream must be a non-empty 1-D array")
    return arr


def _check_rng(rng: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("rng must be a numpy.random.Generator")


def _uniform_release(x: object, *, epsilon: float | int | str | Fraction, w: int,
                     rng: np.random.Generator, start_step: int, mechanism: str,
                     sampler: Sampler) -> StreamRelease:
    """Release the stream at exactly ε/w per step with `sampler` (one cost run).

    Parameters are checked first, then the sampler's constants, then the
    stream; nothing is drawn before all of them pass.
    """
    eps = check_wevent_params(epsilon, w, start_step)
    _check_rng(rng)
    eps_step = epsilon_per_step(eps, w)
    eps_float = float_at_most(eps_step)
    draw, info = sampler(eps_step, eps_float, rng)
    arr = _check_stream(x)
    n = arr.size
    y = draw(arr)
    cost = WEventCost(
        epsilon=eps, w=int(w), runs=(StepRun(int(start_step), int(start_step) + n, eps_step),)
    )
    return StreamRelease(
        y=y,
        cost=cost,
        mechanism=mechanism,
        epsilon_per_step=np.full(n, eps_float),
        published=np.ones(n, dtype=bool),
        start_step=int(start_step),
        info={**info, "epsilon_per_step": str(eps_step)},
    )


def _square_wave_sampler(eps_step: Fraction, eps_float: float,
                         rng: np.random.Generator) -> tuple[Callable, dict]:
    if not math.isfinite(eps_float) or eps_float <= 0:
        raise MechanismParameterError("epsilon / w underflows to 0 as a float")
    b, p, q = square_wave_params(eps_float)
    return (lambda arr: square_wave(arr, epsilon_per_step=eps_float, rng=rng),
            {"b": b, "p": p, "q": q})


def sw_release(
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
    Cost: one run [start_step, start_step + n) at exactly Fraction(ε)/w per step.
    The draws are those of the product's randomizer
    (`mechanisms.streams.square_wave` at ``float_at_most(ε/w)``).
    Reference: CPR paper (arXiv 2605.02724) Sec. II-C, III-A, Alg. 1 line 1;
    spec §2.1-§2.2, §2.7 "SW".

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
    return _uniform_release(x, epsilon=epsilon, w=w, rng=rng, start_step=start_step,
                            mechanism="square_wave", sampler=_square_wave_sampler)
