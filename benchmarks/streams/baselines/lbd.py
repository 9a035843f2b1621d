"""LBD (LDP-IDS budget distribution) adapted to one numeric stream (spec §2.7).

Ren et al., "LDP-IDS: Local Differential Privacy for Infinite Data Streams",
SIGMOD'22 (arXiv 2204.00526), Sec. 5 (LBD); public code
``pumpkinbo/LDP-IDS/budget_division/LBD.py``. Frequency oracles are replaced by
the Square Wave unbiased estimator on [0, 1].

At step t (half of ε per window is for dissimilarity, half for publication):
  - M_{t,1}: c_t = x̂ from SW at ε_{t,1} = ε/(2w); dis = (c_t − r_{t−1})² − Var₁.
  - ε_rm = ε/2 − Σ_{i=t−w+1}^{t−1} ε_{i,2};  candidate ε_{t,2} = ε_rm / 2.
  - err = Var₂ = variance of the SW estimate at ε_{t,2}.
  - if dis > err: publish r_t = x̂ from SW at ε_{t,2}; else r_t = r_{t−1}, ε_{t,2} = 0.
  - t = 1 always publishes with ε_{1,2} = ε/4.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from benchmarks.streams.baselines.wevent import (
    StreamRelease,
    _check_rng,
    _check_stream,
    check_wevent_params,
)
from mechanisms.cost import StepRun, WEventCost, float_at_most
from mechanisms.errors import MechanismParameterError
from mechanisms.streams.square_wave import (
    _inverse_cdf,
    square_wave_estimate,
    square_wave_params,
    square_wave_worst_variance,
)

__all__ = ["lbd_release", "LBD_VARIANCES"]

LBD_VARIANCES = ("worst_case", "laplace")

_DEFAULT_QUANTUM = Fraction(1, 10**6)


def _variance(eps: float, kind: str) -> float:
    if kind == "laplace":
        return 2.0 / eps**2
    return square_wave_worst_variance(eps)


def lbd_release(
    x: object,
    *,
    epsilon: float | int | str | Fraction,
    w: int,
    rng: np.random.Generator,
    start_step: int = 0,
    variance: str = "worst_case",
    quantum: Fraction | None = _DEFAULT_QUANTUM,
) -> StreamRelease:
    """Release a [0, 1] stream with LBD: adaptive publication budgets under w-event LDP.

    Privacy: ε-w-event LDP (neighbouring relation: any change of the values
    inside one window of w steps). Every step spends ε/(2w) on the dissimilarity
    report, so any w consecutive steps spend ε/2 on those; the publication
    budget ε_{t,2} is at most half of what the last w − 1 steps left of ε/2, so
    the publication budgets of any window sum to at most ε/2 (LDP-IDS Thm 5.2).
    Per-step cost ε/(2w) + ε_{t,2}, exact; it varies by step and is returned as
    runs of a `WEventCost` whose every window is ≤ ε. The decisions depend only
    on already-released reports, so the adaptive choice is itself private.
    The windows are those of this release (`start_step` only shifts the indices);
    the ledger checks windows that straddle earlier releases.
    Reference: Ren et al. SIGMOD'22 Alg. 3 (LBD) and code ``LBD.py``; spec §2.7.

    Args:
        x: 1-D stream in [0, 1].
        epsilon: ε per window (read exactly).
        w: window length.
        rng: injected generator.
        start_step: absolute index of ``x[0]``.
        variance: ``"worst_case"`` (SW estimate variance maximised over x, the
            default) or ``"laplace"`` (2/ε², the single-series alternative), used
            for Var₁ and Var₂.
        quantum: ε_{t,2} is rounded *down* to a multiple of this exact amount so
            that costs stay short rationals the ledger stores exactly (the
            mechanism only gets more private); the first step keeps exactly ε/4.
            None keeps exact halving everywhere.

    Returns:
        `StreamRelease`: ``y`` holds r_t (published or carried over, unclipped
        SW estimates), ``published`` marks fresh publications, the per-step float
        budgets are in ``epsilon_per_step``, and ``info`` counts publications.
    """
    eps, quantum = _check_options(epsilon, w, start_step, variance, quantum, rng)
    w = int(w)
    eps1 = eps / (2 * w)
    eps1_f = float_at_most(eps1)
    b1, p1, q1 = square_wave_params(eps1_f)
    var1 = _variance(eps1_f, variance)
    arr = _check_stream(x)
    n = arr.size

    # All dissimilarity reports use a constant budget: draw them at once.
    c = square_wave_estimate(_inverse_cdf(arr, rng.random(n), b1, p1, q1), epsilon_per_step=eps1_f)
    u2 = rng.random(n)  # uniforms for the publication reports (used only if published)
    units = _Units.of(eps, quantum)
    r, published, eps2 = _publish(arr, c, u2, w=w, var1=var1, variance=variance, units=units)
    runs, eps_float = _cost_runs(eps2, eps1, units.unit, int(start_step))
    cost = WEventCost(epsilon=eps, w=w, runs=tuple(runs))
    return StreamRelease(
        y=r,
        cost=cost,
        mechanism="lbd",
        epsilon_per_step=eps_float,
        published=published,
        start_step=int(start_step),
        info={
            "publications": int(published.sum()),
            "variance": variance,
            "epsilon_dissimilarity": str(eps1),
            "quantum": None if quantum is None else str(quantum),
        },
    )


def _check_options(epsilon: float | int | str | Fraction, w: int, start_step: int,
                   variance: str, quantum: Fraction | None,
                   rng: np.random.Generator) -> tuple[Fraction, Fraction | None]:
    """The exact ε and quantum, once every parameter is valid (before the data is read)."""
    eps = check_wevent_params(epsilon, w, start_step)
    if variance not in LBD_VARIANCES:
        raise MechanismParameterError(f"variance must be one of {LBD_VARIANCES}, got {variance!r}")
    if quantum is not None:
        quantum = Fraction(quantum)
        if quantum <= 0:
            raise MechanismParameterError("quantum must be > 0 or None")
    _check_rng(rng)
    return eps, quantum


class _Units(NamedTuple):
    """Exact budgets as integers in units of 1/D, or as Fractions (exact halving).

    Quantum mode: D makes ε/4, ε/2 and the quantum whole numbers.
    """

    quantized: bool
    unit: Fraction
    half: int | Fraction  # ε/2
    first: int | Fraction  # ε/4, the first step's publication budget
    quantum: int  # the quantum (0 without one)

    @classmethod
    def of(cls, eps: Fraction, quantum: Fraction | None) -> _Units:
        """The units of the budgets of a release at ε with this quantum."""
        if quantum is not None:
            den = math.lcm((eps / 4).denominator, quantum.denominator)
            return cls(True, Fraction(1, den), int(eps / 2 * den), int(eps / 4 * den),
                       int(quantum * den))
        return cls(False, Fraction(1), eps / 2, eps / 4, 0)


def _publish(arr: np.ndarray, c: np.ndarray, u2: np.ndarray, *, w: int, var1: float,
             variance: str, units: _Units) -> tuple[np.ndarray, np.ndarray, list]:
    """LBD's adaptive loop: (r_t, published, exact ε_{t,2} in `units`) for every step."""
    n = arr.size
    floats: dict = {}

    def _budget(v: int | Fraction) -> tuple[float, float, tuple[float, float, float]]:
        """(float budget, its variance, SW constants) for an exact amount, memoised."""
        if v not in floats:
            f = float_at_most(v * units.unit)
            floats[v] = (f, _variance(f, variance), square_wave_params(f)) if f > 0 else None
        return floats[v]

    half_u, first_u, qu = units.half, units.first, units.quantum
    zero = 0 if units.quantized else Fraction(0)
    eps2: list = [zero] * n
    r = np.empty(n)
    published = np.zeros(n, dtype=bool)
    window_sum = zero  # Σ ε_{i,2} over the previous w − 1 steps (units of 1/D)
    for t in range(n):
        if t >= w:
            window_sum -= eps2[t - w]
        # window_sum now covers steps t−w+1 .. t−1
        if t == 0:
            cand = first_u
        elif units.quantized:
            cand = ((half_u - window_sum) // (2 * qu)) * qu
        else:
            cand = (half_u - window_sum) / 2
        budget = _budget(cand) if cand > 0 else None
        publish = False
        if budget is not None and math.isfinite(budget[0]):
            publish = t == 0 or (c[t] - r[t - 1]) ** 2 - var1 > budget[1]
        if publish:
            cand_f, _, (b2, p2, q2) = budget
            y2 = _inverse_cdf(arr[t : t + 1], u2[t : t + 1], b2, p2, q2)
            r[t] = square_wave_estimate(y2, epsilon_per_step=cand_f)[0]
            eps2[t] = cand
            published[t] = True
        else:
            r[t] = r[t - 1] if t > 0 else 0.5
        window_sum += eps2[t]
    return r, published, eps2


def _cost_runs(eps2: list, eps1: Fraction, unit: Fraction,
               start_step: int) -> tuple[list[StepRun], np.ndarray]:
    """Runs of equal publication budget as exact per-step cost runs, and the float budgets."""
    n = len(eps2)
    runs = []
    eps_float = np.empty(n)
    amounts: dict = {}
    start = 0
    while start < n:
        stop = start + 1
        while stop < n and eps2[stop] == eps2[start]:
            stop += 1
        key = eps2[start]
        if key not in amounts:
            amount = eps1 + key * unit
            amounts[key] = (amount, float_at_most(amount))
        amount, amount_f = amounts[key]
        runs.append(StepRun(start_step + start, start_step + stop, amount))
        eps_float[start:stop] = amount_f
        start = stop
    return runs, eps_float
