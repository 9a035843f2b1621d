"""Periodic streams under w-event LDP: Square Wave, Laplace, LBD and smoothing.

Spec: ``docs/mechanisms.md`` §2.1, §2.2, §2.7. Paper: CPR (arXiv 2605.02724).
"""

from mechanisms.streams.baselines import (
    BASELINES,
    BaselineResult,
    laplace_baseline,
    lbd_baseline,
    run_baseline,
    sw_baseline,
    sw_filter_baseline,
    sw_moving_baseline,
)
from mechanisms.streams.laplace import laplace_release
from mechanisms.streams.lbd import LBD_VARIANCES, lbd_release
from mechanisms.streams.smoothing import FILTER_KINDS, filter_smooth, moving_average
from mechanisms.streams.square_wave import (
    square_wave,
    square_wave_cdf,
    square_wave_estimate,
    square_wave_estimate_variance,
    square_wave_moments,
    square_wave_params,
    square_wave_pdf,
    square_wave_worst_variance,
)
from mechanisms.streams.wevent import (
    StreamRelease,
    check_wevent_params,
    float_at_most,
    per_step_epsilon,
    release_stream,
    uniform_wevent_cost,
    wevent_cost_from_steps,
)

__all__ = [
    "BASELINES",
    "FILTER_KINDS",
    "LBD_VARIANCES",
    "BaselineResult",
    "StreamRelease",
    "check_wevent_params",
    "filter_smooth",
    "float_at_most",
    "laplace_baseline",
    "laplace_release",
    "lbd_baseline",
    "lbd_release",
    "moving_average",
    "per_step_epsilon",
    "release_stream",
    "run_baseline",
    "square_wave",
    "square_wave_cdf",
    "square_wave_estimate",
    "square_wave_estimate_variance",
    "square_wave_moments",
    "square_wave_params",
    "square_wave_pdf",
    "square_wave_worst_variance",
    "sw_baseline",
    "sw_filter_baseline",
    "sw_moving_baseline",
    "uniform_wevent_cost",
    "wevent_cost_from_steps",
]
