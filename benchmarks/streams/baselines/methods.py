"""The CPR paper's comparison methods as one call each (spec §2.7).

Each baseline = a w-event LDP release (SW, Laplace or LBD) followed by free
server-side post-processing. `BaselineResult.release.cost` carries the exact
per-step costs; `reconstruction` is the estimate of the [0, 1] stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from benchmarks.streams.baselines.laplace import laplace_release
from benchmarks.streams.baselines.lbd import lbd_release
from benchmarks.streams.baselines.wevent import StreamRelease, sw_release
from mechanisms.errors import MechanismParameterError
from mechanisms.streams.smoothing import filter_smooth, moving_average
from mechanisms.streams.square_wave import square_wave_estimate

__all__ = [
    "BaselineResult",
    "BASELINES",
    "laplace_baseline",
    "sw_baseline",
    "sw_moving_baseline",
    "sw_filter_baseline",
    "lbd_baseline",
    "run_baseline",
]

Eps = float | int | str | Fraction


@dataclass(frozen=True)
class BaselineResult:
    """A baseline's reconstruction together with the release it post-processes.

    Attributes:
        name: baseline name (``"laplace"``, ``"sw"``, ``"sw_moving"``, ``"sw_filter"``, ``"lbd"``).
        reconstruction: float array, same length as the input stream.
        release: the underlying `StreamRelease` (reports and exact cost).
    """

    name: str
    reconstruction: np.ndarray
    release: StreamRelease


def _sw_values(release: StreamRelease, debias: bool) -> np.ndarray:
    if not debias:
        return release.y
    return square_wave_estimate(release.y, epsilon_per_step=float(release.epsilon_per_step[0]))


def laplace_baseline(
    x: object,
    *,
    epsilon: Eps,
    w: int,
    rng: np.random.Generator,
    window: int = 5,
    start_step: int = 0,
) -> BaselineResult:
    """Laplace at ε/w per step, centred moving average (window 5), clipped to [0, 1].

    Privacy: ε-w-event LDP (see `laplace_release`); smoothing and clipping are
    post-processing. Cost: ε/w per step. Spec §2.7 "Laplace"; CPR paper Sec. IV-A.

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window.
        w: window length.
        rng: injected generator.
        window: moving-average length.
        start_step: absolute index of ``x[0]``.

    Returns:
        `BaselineResult`.
    """
    moving_average(np.zeros(1), window=window)  # validates `window` before any draw
    rel = laplace_release(x, epsilon=epsilon, w=w, rng=rng, start_step=start_step)
    rec = np.clip(moving_average(rel.y, window=window), 0.0, 1.0)
    return BaselineResult("laplace", rec, rel)


def sw_baseline(
    x: object,
    *,
    epsilon: Eps,
    w: int,
    rng: np.random.Generator,
    debias: bool = False,
    start_step: int = 0,
) -> BaselineResult:
    """Raw Square Wave reports as the reconstruction (optionally debiased).

    Privacy: ε-w-event LDP (see `sw_release`). Cost: ε/w per step.
    Spec §2.7 "SW".

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window.
        w: window length.
        rng: injected generator.
        debias: use the unbiased estimates x̂_t instead of y_t.
        start_step: absolute index of ``x[0]``.

    Returns:
        `BaselineResult`.
    """
    rel = sw_release(x, epsilon=epsilon, w=w, rng=rng, start_step=start_step)
    return BaselineResult("sw", _sw_values(rel, debias).copy(), rel)


def sw_moving_baseline(
    x: object,
    *,
    epsilon: Eps,
    w: int,
    rng: np.random.Generator,
    window: int = 5,
    debias: bool = False,
    start_step: int = 0,
) -> BaselineResult:
    """Square Wave reports smoothed by a centred moving average (window 5).

    Privacy: ε-w-event LDP; smoothing is post-processing. Cost: ε/w per step.
    Spec §2.7 "SW_moving".

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window.
        w: window length.
        rng: injected generator.
        window: moving-average length.
        debias: smooth the unbiased estimates instead of y_t.
        start_step: absolute index of ``x[0]``.

    Returns:
        `BaselineResult`.
    """
    moving_average(np.zeros(1), window=window)
    rel = sw_release(x, epsilon=epsilon, w=w, rng=rng, start_step=start_step)
    return BaselineResult("sw_moving", moving_average(_sw_values(rel, debias), window=window), rel)


def sw_filter_baseline(
    x: object,
    *,
    epsilon: Eps,
    w: int,
    rng: np.random.Generator,
    kind: str = "savgol",
    window: int = 11,
    order: int = 2,
    cutoff: float = 0.1,
    debias: bool = False,
    start_step: int = 0,
) -> BaselineResult:
    """Square Wave reports smoothed by a filter (Savitzky-Golay 11/2 by default).

    Privacy: ε-w-event LDP; filtering is post-processing. Cost: ε/w per step.
    Spec §2.7 "SW_filter".

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window.
        w: window length.
        rng: injected generator.
        kind: ``"savgol"``, ``"median"`` or ``"butterworth"`` (see `filter_smooth`).
        window: filter length.
        order: savgol / Butterworth order.
        cutoff: Butterworth cutoff.
        debias: filter the unbiased estimates instead of y_t.
        start_step: absolute index of ``x[0]``.

    Returns:
        `BaselineResult`.
    """
    opts = {"kind": kind, "window": window, "order": order, "cutoff": cutoff}
    filter_smooth(np.zeros(64), **opts)  # validates the options before any draw
    rel = sw_release(x, epsilon=epsilon, w=w, rng=rng, start_step=start_step)
    return BaselineResult("sw_filter", filter_smooth(_sw_values(rel, debias), **opts), rel)


def lbd_baseline(
    x: object,
    *,
    epsilon: Eps,
    w: int,
    rng: np.random.Generator,
    clip: bool = True,
    variance: str = "worst_case",
    start_step: int = 0,
) -> BaselineResult:
    """LBD adapted to one numeric stream; the published r_t, clipped to [0, 1].

    Privacy: ε-w-event LDP (see `lbd_release`); clipping is post-processing.
    Cost: ε/(2w) + ε_{t,2} per step, varying. Spec §2.7 "LBD".

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window.
        w: window length.
        rng: injected generator.
        clip: clip the estimates to [0, 1].
        variance: see `lbd_release`.
        start_step: absolute index of ``x[0]``.

    Returns:
        `BaselineResult`.
    """
    rel = lbd_release(x, epsilon=epsilon, w=w, rng=rng, variance=variance, start_step=start_step)
    rec = np.clip(rel.y, 0.0, 1.0) if clip else rel.y.copy()
    return BaselineResult("lbd", rec, rel)


BASELINES: dict[str, Callable[..., BaselineResult]] = {
    "laplace": laplace_baseline,
    "sw": sw_baseline,
    "sw_moving": sw_moving_baseline,
    "sw_filter": sw_filter_baseline,
    "lbd": lbd_baseline,
}


def run_baseline(
    name: str, x: object, *, epsilon: Eps, w: int, rng: np.random.Generator, **options: object
) -> BaselineResult:
    """Run the baseline called `name` (one of `BASELINES`) with its options.

    Privacy and cost: those of the named baseline (all ε-w-event LDP).

    Args:
        name: baseline name.
        x: 1-D stream in [0, 1].
        epsilon: ε per window.
        w: window length.
        rng: injected generator.
        **options: keyword options of that baseline.

    Returns:
        `BaselineResult`.
    """
    if name not in BASELINES:
        raise MechanismParameterError(f"unknown baseline {name!r}; choose from {sorted(BASELINES)}")
    return BASELINES[name](x, epsilon=epsilon, w=w, rng=rng, **options)
