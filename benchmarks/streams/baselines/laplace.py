"""Laplace mechanism per time step under w-event LDP (CPR baseline, spec §2.7)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from benchmarks.streams.baselines.wevent import StreamRelease, _uniform_release
from mechanisms.cost import laplace_scale

__all__ = ["laplace_release"]


def _laplace_sampler(eps_step: Fraction, eps_float: float,
                     rng: np.random.Generator) -> tuple[Callable, dict]:
    scale = laplace_scale(1, eps_step)  # the smallest float >= 1/(ε/w)
    return (lambda arr: arr + rng.laplace(0.0, scale, size=arr.size)), {"scale": scale}


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
    return _uniform_release(x, epsilon=epsilon, w=w, rng=rng, start_step=start_step,
                            mechanism="laplace", sampler=_laplace_sampler)
