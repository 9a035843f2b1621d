"""Laplace mechanism per time step under w-event LDP (CPR baseline, spec §2.7)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from mechanisms.cost import StepRun, WEventCost, epsilon_per_step, laplace_scale
from mechanisms.errors import MechanismParameterError
from mechanisms.streams.wevent import (
    StreamRelease,
    _check_stream,
    check_wevent_params,
    float_at_most,
)

__all__ = ["laplace_release"]


def laplace_release(
    x: object,
    *,
    epsilon: float | int | str | Fraction,
    w: int,
    rng: np.random.Generator,
    start_step: int = 0,
) -> StreamRelease:
    """Release x_t + Lap(1/ε₀) at every step, with ε₀ = ε/w.

    Privacy: ε-w-event LDP for streams with values in [0, 1] (neighbouring
    relation: any change of the values inside one window of w steps). Each step
    is the Laplace mechanism with sensitivity 1 (the width of [0, 1]) at ε₀ = ε/w,
    so every w consecutive steps cost exactly ε by basic composition. Cost: one
    run at Fraction(ε)/w per step. The float scale is rounded up so the sampler
    never spends more than charged. Reference: Dwork & Roth 2014 (CPR paper
    [6], Sec. IV-A); spec §2.7 "Laplace".

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window (read exactly).
        w: window length.
        rng: injected generator.
        start_step: absolute index of ``x[0]``.

    Returns:
        `StreamRelease` whose ``y`` are the noisy values (unclipped).
    """
    eps = check_wevent_params(epsilon, w, start_step)
    if not isinstance(rng, np.random.Generator):
        raise MechanismParameterError("rng must be a numpy.random.Generator")
    eps_step = epsilon_per_step(eps, w)
    eps_float = float_at_most(eps_step)
    scale = laplace_scale(1, eps_step)  # the smallest float >= 1/(ε/w)
    arr = _check_stream(x)
    n = arr.size
    y = arr + rng.laplace(0.0, scale, size=n)
    cost = WEventCost(
        epsilon=eps, w=int(w), runs=(StepRun(int(start_step), int(start_step) + n, eps_step),)
    )
    return StreamRelease(
        y=y,
        cost=cost,
        mechanism="laplace",
        epsilon_per_step=np.full(n, eps_float),
        published=np.ones(n, dtype=bool),
        start_step=int(start_step),
        info={"scale": scale, "epsilon_per_step": str(eps_step)},
    )
