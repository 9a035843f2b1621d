"""Curves on an unbounded domain (spec §1.10; paper Sec. 4.3).

q ∈ C(R) ∩ L²(R) is given by samples and read as the piecewise-linear
interpolant on [t₀, t_N] and zero outside. An SVT over the 2-Lipschitz
queries g_T(q) = ‖q·1_[−T,T]‖₂ − ‖q‖₂, T_j = 2^j (j ≥ 1), with threshold
−1/ε finds T̄; PrivFuncSeg then privatizes q·1_[−T̄,T̄] and the output is
extended by zero.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np

from mechanisms.cost import Cost, CostItem
from mechanisms.curves._budget import budget, check_rng, svt_epsilon
from mechanisms.curves._piecewise import SubPieces, check_curve, restrict
from mechanisms.curves.batch import CurveBatch
from mechanisms.curves.result import PrivateFunction
from mechanisms.curves.segment import SegOptions, privfuncseg_core, seg_options, svt_levels
from mechanisms.curves.svt import SVTResult, svt
from mechanisms.errors import MechanismParameterError

__all__ = ["privfuncseg_unbounded"]


def _zero_extended(t: np.ndarray, v: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, ...]:
    """Samples of q with zeros appended out to [lo, hi]; jumps are duplicated knots.

    The dyadic tree then integrates over [lo, hi] only (cutting inside the data
    when lo > t₀ or hi < t_N).
    """
    zero = np.zeros((2, v.shape[1]))
    tt, vv = [t], [v]
    if lo < t[0]:
        tt.insert(0, np.array([lo, t[0]]))
        vv.insert(0, zero)
    if hi > t[-1]:
        tt.append(np.array([t[-1], hi]))
        vv.append(zero)
    return np.concatenate(tt), np.concatenate(vv)


def privfuncseg_unbounded(
    t: object,
    values: object,
    *,
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    rng: np.random.Generator,
    basis: str = "linear",
    degree: int | None = None,
    reduce: bool = True,
    continuous: bool = False,
    svt_share: Fraction = Fraction(1, 4),
    max_power: int = 40,
    beta: float = 0.1,
) -> PrivateFunction:
    """Privatize a curve on R (zero outside its samples) by SVT for T̄, then PrivFuncSeg.

    Privacy: ε-GP (ρ-CGP) w.r.t. dist₂ over R. Budget [PROPOSED split]:
    ``svt_domain`` = svt_share·ε (default ε/4; SVT with K = 2 over
    g_{T_j}, T_j = 2^j, threshold −1/ε; CGP: at √(2·svt_share·ρ), threshold
    −1/√(2ρ)), then PrivFuncSeg with the rest on q·1_[−T̄,T̄] (its own
    ``svt``, ``reduce_seg`` and ``project`` steps, prefixed ``seg_``). The
    output is zero outside [−T̄, T̄]. Paper Sec. 4.3; spec §1.10.

    Args:
        t: sample times (N,), strictly increasing (may be negative).
        values: samples (N,) or (N, n); q is zero outside [t[0], t[-1]].
        epsilon: ε (exactly one of epsilon / rho).
        rho: ρ.
        rng: injected generator.
        basis: as for `privfuncseg`.
        degree: as for `privfuncseg`.
        reduce: run ReduceSeg.
        continuous: continuity projection inside [−T̄, T̄].
        svt_share: fraction of the budget for the domain SVT (0 < share < 1).
        max_power: largest j tried (T_j = 2^j).
        beta: as for `privfuncseg`.

    Returns:
        A PrivateFunction on [−T̄, T̄], zero outside. Diagnostics add
        ``t_bar`` and ``domain_svt_halted`` (private outputs).
    """
    notion, amount = budget(epsilon, rho)
    check_rng(rng)
    share = _check_domain_options(svt_share, max_power)
    opts = seg_options(basis=basis, epsilon=epsilon, rho=rho, reduce=reduce,
                       continuous=continuous, degree=degree, beta=beta, max_level=20, k1=4,
                       margin=True, threshold=0.0)
    ta, va = check_curve(t, values)
    svt_amount = amount * share
    rest = amount - svt_amount
    res = _domain_svt(ta, va, notion, amount, svt_amount, max_power, rng)
    t_bar = 2.0 ** (res.index + 1)
    inner_opts = SegOptions(notion, rest, opts.degree, opts.reduce, opts.continuous, opts.beta,
                            20, 4, True, 0.0, opts.noise)
    inner_fn = _inside(ta, va, t_bar, inner_opts, rng)
    assert inner_fn.cost is not None
    items = (CostItem("svt_domain", notion, svt_amount),) + tuple(
        CostItem("seg_" + i.step, notion, i.amount) for i in inner_fn.cost.items
    )
    diag = dict(inner_fn.diagnostics)
    diag.update({"t_bar": t_bar, "domain_svt_halted": bool(res.halted)})
    return replace(
        inner_fn,
        cost=Cost(notion=notion, requested=amount, items=items),
        diagnostics=diag,
        outside="zero",
    )


def _check_domain_options(svt_share: Fraction, max_power: int) -> Fraction:
    """The SVT's share of the budget, once it and `max_power` are valid."""
    share = Fraction(svt_share)
    if not 0 < share < 1:
        raise MechanismParameterError("svt_share must be in (0, 1)")
    if isinstance(max_power, bool) or not isinstance(max_power, int) or not 1 <= max_power <= 60:
        raise MechanismParameterError("max_power must be an integer in [1, 60]")
    return share


def _domain_svt(ta: np.ndarray, va: np.ndarray, notion: str, amount: Fraction,
                svt_amount: Fraction, max_power: int, rng: np.random.Generator) -> SVTResult:
    """The SVT over g_{T_j}(q) = ‖q·1_[−T_j,T_j]‖₂ − ‖q‖₂, T_j = 2^j: its index gives T̄."""
    threshold = -1.0 / float(amount) if notion == "gp" else -1.0 / math.sqrt(2.0 * float(amount))
    total = math.sqrt(float(SubPieces(ta, va, np.array([ta[0], ta[-1]])).squared_norms()[0]))

    def query(i: int) -> float:
        big_t = 2.0 ** (i + 1)
        lo, hi = max(-big_t, float(ta[0])), min(big_t, float(ta[-1]))
        if lo >= hi:
            inner = 0.0
        elif lo == ta[0] and hi == ta[-1]:
            inner = total
        else:
            inner = math.sqrt(float(SubPieces(ta, va, np.array([lo, hi])).squared_norms()[0]))
        return inner - total

    return svt(
        query,
        threshold=threshold,
        epsilon=svt_epsilon(notion, svt_amount),
        rng=rng,
        sensitivity=2.0,
        n_queries=max_power,
    )


def _inside(ta: np.ndarray, va: np.ndarray, t_bar: float, inner_opts: SegOptions,
            rng: np.random.Generator) -> PrivateFunction:
    """PrivFuncSeg of q·1_[−T̄,T̄] (zero-extended out to ±T̄, the tree's levels from that)."""
    zt, zv = _zero_extended(ta, va, -t_bar, t_bar)
    tops = svt_levels(CurveBatch(zt, zv, np.array([0, zt.size])).distinct_times(), 20)
    zt, zv = restrict(zt, zv, -t_bar, t_bar)
    return privfuncseg_core(CurveBatch(zt, zv, np.array([0, zt.size])), tops, [rng],
                            inner_opts).function(0)
