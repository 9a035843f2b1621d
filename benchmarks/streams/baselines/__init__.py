"""The CPR paper's comparison methods for the streams benchmarks (spec §2.7).

Laplace, SW, SW_moving, SW_filter and LBD under w-event LDP, each a release
with its exact per-step cost followed by free post-processing. No product
release uses them (the product's stream release is the registry entry's
randomizer, called by `tasks.privatize`); the benchmarks compare CPR against
them and the tests check their w-event budgets and noise laws.
"""

from benchmarks.streams.baselines.laplace import laplace_release
from benchmarks.streams.baselines.lbd import LBD_VARIANCES, lbd_release
from benchmarks.streams.baselines.methods import (
    BASELINES,
    BaselineResult,
    laplace_baseline,
    lbd_baseline,
    run_baseline,
    sw_baseline,
    sw_filter_baseline,
    sw_moving_baseline,
)
from benchmarks.streams.baselines.wevent import StreamRelease, check_wevent_params, sw_release

__all__ = [
    "BASELINES",
    "LBD_VARIANCES",
    "BaselineResult",
    "StreamRelease",
    "check_wevent_params",
    "laplace_baseline",
    "laplace_release",
    "lbd_baseline",
    "lbd_release",
    "run_baseline",
    "sw_baseline",
    "sw_filter_baseline",
    "sw_moving_baseline",
    "sw_release",
]
