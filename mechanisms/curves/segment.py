"""Algorithms 4/8 (PrivFuncSeg) and 5/9 (ReduceSeg) (spec §1.8, §1.9; paper Sec. 4.2).

PrivFuncSeg finds, by SVT over j = 0, 1, 2, …, the number 2^k̄ of equal
dyadic segments at which the projection error balances the noise, lets
ReduceSeg merge segments where the curve is flat, and ends with one
Project-and-Privatize on the resulting piecewise basis.

Speed: every query (the least-squares residual of all 2^j dyadic segments,
and of the merged segments ReduceSeg tries) comes from one *dyadic moment
tree*. One pass over the samples computes, on the finest level J, the moments
∫ q·s^k dt (s the segment's local coordinate in [−1, 1]) and ∫‖q‖² per
segment (exact Gauss-Legendre per sub-piece); every coarser level follows by
an exact binomial change of variables from its two children. So the whole
mechanism costs O(N + 2^J) with 2^J ≤ 2N: linear in N, no pass per SVT level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.special import comb

from mechanisms.cost import Cost, CostItem, float_at_most
from mechanisms.curves._budget import budget, check_beta, check_rng, svt_epsilon
from mechanisms.curves._piecewise import SubPieces, check_curve, nodes_for_degree
from mechanisms.curves.bases import LegendreBasis
from mechanisms.curves.bounds import noise_scale
from mechanisms.curves.continuity import continuity_projection
from mechanisms.curves.project_and_privatize import privatize_coefficients
from mechanisms.curves.result import PrivateFunction
from mechanisms.curves.svt import svt
from mechanisms.errors import MechanismParameterError

__all__ = ["privfuncseg", "reduce_seg", "DyadicTree", "ReduceSegOutcome"]

_E_FACTOR = math.e / (math.e - 1.0)


@lru_cache(maxsize=32)
def _tree_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Child-to-parent moment shifts, Legendre monomial coefficients and norms for m terms.

    s_parent = s_child/2 + δ (δ = −½ left child, +½ right child), so
    μ^parent_k = Σ_i C(k, i) 2^{−i} δ^{k−i} μ^child_i; P_l(s) = Σ_k leg[l, k] s^k.
    """
    kk = np.arange(m)
    binom = comb(kk[:, None], kk[None, :])
    shifts = []
    for delta in (-0.5, 0.5):
        power = np.where(
            kk[:, None] >= kk[None, :],
            delta ** np.maximum(kk[:, None] - kk[None, :], 0),
            0.0,
        )
        shifts.append(binom * power * (0.5 ** kk[None, :]))
    leg = np.zeros((m, m))
    for ell in range(m):
        c = np.zeros(ell + 1)
        c[ell] = 1.0
        leg[ell, : ell + 1] = np.polynomial.legendre.leg2poly(c)
    norm = np.sqrt(2.0 * kk + 1.0)
    for arr in (*shifts, leg, norm):
        arr.setflags(write=False)
    return shifts[0], shifts[1], leg, norm


class DyadicTree:
    """Exact least-squares fits of a piecewise-linear curve on all dyadic segments.

    Level j splits [lo, hi] into 2^j equal segments. For each level the tree
    holds the orthonormal-Legendre coefficients (2^j, m, n) of the LS fit on
    every segment and its squared residual (2^j,). Built in O(N + 2^J).

    Args:
        t: sample times (N,), strictly increasing (duplicates allowed
            internally to encode a jump).
        values: samples (N, n).
        degree: polynomial degree of the local basis.
        max_level: finest level J.
        lo, hi: the domain (default [t[0], t[-1]]).
    """

    def __init__(
        self,
        t: np.ndarray,
        values: np.ndarray,
        degree: int,
        max_level: int,
        lo: float | None = None,
        hi: float | None = None,
    ) -> None:
        self.lo = float(t[0] if lo is None else lo)
        self.hi = float(t[-1] if hi is None else hi)
        self.degree = int(degree)
        self.m = self.degree + 1
        self.n = values.shape[1]
        self.max_level = int(max_level)
        m = self.m
        mean = values.mean(axis=0)
        vc = values - mean  # constants are in every span: residuals are unchanged
        n_leaf = 2**self.max_level
        edges = self.lo + (self.hi - self.lo) * (np.arange(n_leaf + 1) / n_leaf)
        edges[-1] = self.hi
        pieces = SubPieces(t, vc, edges)
        seg = pieces.segment
        centre = 0.5 * (edges[seg] + edges[seg + 1])
        half = 0.5 * (edges[seg + 1] - edges[seg])
        if m <= 2:
            # closed forms: ∫q dt = h(q0+q1)/2, ∫q s dt = h(q0(2sl+sr) + q1(sl+2sr))/6
            h = (pieces.right - pieces.left)[:, None]
            q0, q1 = pieces.q_left, pieces.q_right
            per = np.empty((h.shape[0], m, self.n))
            per[:, 0, :] = 0.5 * h * (q0 + q1)
            if m == 2:
                sl = ((pieces.left - centre) / half)[:, None]
                sr = ((pieces.right - centre) / half)[:, None]
                per[:, 1, :] = h * (q0 * (2.0 * sl + sr) + q1 * (sl + 2.0 * sr)) / 6.0
        else:
            nodes, weights, qv = pieces.quadrature(nodes_for_degree(self.degree + 1))
            s = (nodes - centre[:, None]) / half[:, None]
            wq = weights[:, :, None] * qv  # (P, g, n)
            per = np.empty((s.shape[0], m, self.n))
            sk = np.ones_like(s)
            for k in range(m):
                per[:, k, :] = np.sum(sk[:, :, None] * wq, axis=1)
                sk = sk * s
        mu = np.ascontiguousarray(np.moveaxis(pieces.reduce(per), 1, 0))  # (m, S, n)
        sq = pieces.squared_norms()
        shift_left, shift_right, leg, norm = _tree_matrices(m)
        self.mean = mean
        self._coef: list[np.ndarray] = [np.empty(0)] * (self.max_level + 1)
        self.res2: list[np.ndarray] = [np.empty(0)] * (self.max_level + 1)
        n = self.n
        for j in range(self.max_level, -1, -1):
            length = (self.hi - self.lo) / 2**j
            count = mu.shape[1]
            c = (leg @ mu.reshape(m, -1)).reshape(m, count, n)
            c *= (norm / math.sqrt(length))[:, None, None]
            self.res2[j] = np.maximum(sq - np.sum(c * c, axis=(0, 2)), 0.0)
            c[0] += mean[None, :] * math.sqrt(length)
            self._coef[j] = c
            if j:
                left = mu[:, 0::2, :].reshape(m, -1)
                right = mu[:, 1::2, :].reshape(m, -1)
                mu = (shift_left @ left + shift_right @ right).reshape(m, count // 2, n)
                sq = sq[0::2] + sq[1::2]
        self.level_dist = np.array([math.sqrt(float(np.sum(r))) for r in self.res2])

    def level_coefficients(self, level: int) -> np.ndarray:
        """LS coefficients (2^level, m, n) of all segments of a level."""
        return np.moveaxis(self._coef[level], 0, 1)

    def range_dist(self, depth: int, start: int, stop: int) -> float:
        """dist₂ of the LS fit on dyadic segments [start, stop) of level `depth` to q there."""
        return math.sqrt(float(np.sum(self.res2[depth][start:stop])))

    def edges(self, nodes: list[tuple[int, int]]) -> np.ndarray:
        """Edges (k+1,) of consecutive dyadic nodes (depth, index)."""
        width = self.hi - self.lo
        left = [self.lo + width * i / 2**d for d, i in nodes]
        return np.array(left + [self.hi])

    def coefficients(self, nodes: list[tuple[int, int]]) -> np.ndarray:
        """LS coefficients (k, m, n) of consecutive dyadic nodes."""
        depth = np.array([d for d, _ in nodes])
        index = np.array([i for _, i in nodes])
        out = np.empty((len(nodes), self.m, self.n))
        for d in np.unique(depth):
            sel = depth == d
            out[sel] = np.moveaxis(self._coef[d][:, index[sel], :], 0, 1)
        return out


@dataclass
class ReduceSegOutcome:
    """Result of ReduceSeg on one interval.

    Attributes:
        nodes: the dyadic segments (depth, index) covering the interval.
        spent: exact budget consumed by the checks that ran.
        checks: number of noisy checks run.
        reductions: number of checks that halved the segments.
    """

    nodes: list[tuple[int, int]]
    spent: Fraction
    checks: int
    reductions: int


# Exact budget arithmetic that is the same for every curve of a release (it
# depends only on the public ε or ρ, never on data): computed once per value
# and reused. The results are the same exact Fractions as computing them inline.
@lru_cache(maxsize=1024)
def _check_budget(share: Fraction, level: int) -> tuple[Fraction, Fraction]:
    """(share / 2^level, share / 2) of one ReduceSeg check."""
    return share / 2**level, share / 2


@lru_cache(maxsize=1024)
def _as_float(value: Fraction) -> float:
    return float(value)


@lru_cache(maxsize=256)
def _split(amount: Fraction) -> tuple[Fraction, Fraction]:
    """PrivFuncSeg's split of `amount`: (ε/4 for SVT, ε/16 per ReduceSeg quarter)."""
    return amount / 4, amount / 16


@lru_cache(maxsize=4096)
def _final(amount: Fraction, quarter: Fraction, spent: Fraction) -> tuple[Fraction, str, float]:
    """The projection step's exact budget amount − quarter − spent, its text and float (≤)."""
    final = amount - quarter - spent
    return final, str(final), float_at_most(final)


def reduce_seg(
    tree: DyadicTree,
    *,
    node: tuple[int, int],
    seg_depth: int,
    k1: int,
    level: int,
    beta: float,
    big_b: Fraction,
    share: Fraction,
    notion: str,
    rng: np.random.Generator,
    margin: bool = True,
) -> ReduceSegOutcome:
    """ReduceSeg (Algorithm 5, GP) / ReduceSegCGP (Algorithm 9) on one dyadic interval.

    Privacy: each check releases d + noise where d = dist₂ of the LS fit on
    the halved segments (1-Lipschitz in dist₂): Lap(2^l/ε') at level l
    consumes ε'/2^l (GP); N(0,1)·√(2^l)/√(2ρ') consumes ρ'/2^l (CGP). The
    share halves at each recursion, so one call spends at most
    (1 − 2^{−k₁})·share. Paper Sec. 4.2, Algorithm 5/9; spec §1.9.

    Args:
        tree: the dyadic moment tree of q.
        node: the interval [t_s, t_e) as a dyadic node (depth, index).
        seg_depth: depth of the current (uniform) segments inside the node.
        k1: maximum recursion level k₁.
        level: current level l (1 at the top).
        beta: β of the margin term (β_RS).
        big_b: B (ε/4 or ρ/4): the final step has at least 2B.
        share: ε' (or ρ') allocated to this interval.
        notion: ``"gp"`` or ``"cgp"``.
        rng: injected generator.
        margin: add the margin (2^l/ε')·ln(2^{k₁}/β) to the noisy error.

    Returns:
        The covering segments, the exact budget spent and check counts.
    """
    depth, index = node
    uniform = [(seg_depth, index * 2 ** (seg_depth - depth) + i)
               for i in range(2 ** (seg_depth - depth))]
    if level > k1:
        return ReduceSegOutcome(uniform, Fraction(0), 0, 0)
    h_count = 2 ** (seg_depth - depth)
    if h_count < 2:
        return ReduceSegOutcome(uniform, Fraction(0), 0, 0)
    half_depth = seg_depth - 1
    span = 2 ** (half_depth - depth)
    d = tree.range_dist(half_depth, index * span, (index + 1) * span)
    mn = tree.m * tree.n
    step, half_share = _check_budget(share, level)
    big_b_float = _as_float(big_b)
    # Lap(2^l/ε') = Lap(1/step) (GP), N(0,1)·√(2^l)/√(2ρ') = N(0,1)/√(2·step) (CGP)
    scale = noise_scale(notion, step)
    if notion == "gp":
        err = d + rng.laplace(0.0, scale)
        tau = (h_count / 2) * _E_FACTOR * mn / (2.0 * big_b_float)
        slack = scale * math.log(2**k1 / beta) if margin else 0.0
    else:
        err = d + scale * rng.standard_normal()
        tau = (math.sqrt(h_count * mn) - math.sqrt(h_count * mn / 2)) / math.sqrt(
            2.0 * 2.0 * big_b_float
        )
        slack = scale * math.sqrt(2.0 * math.log(2**k1 / beta)) if margin else 0.0
    if err + slack > tau:
        return ReduceSegOutcome(uniform, step, 1, 0)
    if half_depth <= depth:  # the merged interval is one segment: children hold < 1 each
        return ReduceSegOutcome([(depth, index)], step, 1, 1)
    out_nodes: list[tuple[int, int]] = []
    spent = step
    checks, reductions = 1, 1
    for child in (2 * index, 2 * index + 1):
        sub = reduce_seg(
            tree,
            node=(depth + 1, child),
            seg_depth=half_depth,
            k1=k1,
            level=level + 1,
            beta=beta,
            big_b=big_b,
            share=half_share,
            notion=notion,
            rng=rng,
            margin=margin,
        )
        out_nodes.extend(sub.nodes)
        spent += sub.spent
        checks += sub.checks
        reductions += sub.reductions
    return ReduceSegOutcome(out_nodes, spent, checks, reductions)


def _check_options(degree: object, max_level: object, k1: object) -> tuple[int, int, int]:
    for name, value, low, high in (
        ("degree", degree, 0, 16),
        ("max_level", max_level, 0, 24),
        ("k1", k1, 1, 8),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise MechanismParameterError(f"{name} must be an integer")
        if not low <= int(value) <= high:
            raise MechanismParameterError(f"{name} must be in [{low}, {high}], got {value}")
    return int(degree), int(max_level), int(k1)  # type: ignore[arg-type]


def _basis_degree(basis: object, degree: int | None) -> int:
    if not isinstance(basis, str):
        raise MechanismParameterError("privfuncseg takes a basis name")
    key = basis.lower()
    if key == "linear":
        if degree not in (None, 1):
            raise MechanismParameterError("the 'linear' basis has degree 1")
        return 1
    if key == "constant":
        return 0
    if key in ("legendre", "monomial", "polynomial"):
        return 1 if degree is None else degree  # type: ignore[return-value]
    raise MechanismParameterError(
        f"privfuncseg basis must be linear, constant, legendre or monomial, got {basis!r}"
    )


def privfuncseg_core(
    t: np.ndarray,
    v: np.ndarray,
    *,
    notion: str,
    amount: Fraction,
    rng: np.random.Generator,
    degree: int,
    reduce: bool,
    continuous: bool,
    beta: float,
    max_level: int,
    k1: int,
    margin: bool,
    threshold: float,
    lo: float | None = None,
    hi: float | None = None,
    depth_from_samples: bool = True,
) -> PrivateFunction:
    """PrivFuncSeg on validated arrays (see `privfuncseg`); lo/hi may extend the domain."""
    top = max_level
    if depth_from_samples:
        n_samples = int(np.sum(np.diff(t) > 0)) + 1
        top = min(max_level, max(0, math.ceil(math.log2(n_samples))))
    first = max(0, top - 4) if top > 8 else top
    trees = [DyadicTree(t, v, degree, first, lo, hi)]
    m, n = trees[0].m, trees[0].n
    quarter, part_share = _split(amount)
    eps_svt = svt_epsilon(notion, quarter)
    levels = np.arange(top + 1)
    if notion == "gp":
        tau = (2.0**levels) * m * n / _as_float(quarter)
    else:
        tau = np.sqrt((2.0**levels) * m * n) / math.sqrt(2.0 * _as_float(quarter))

    def query(j: int) -> float:
        # the deepest levels are built (one more linear pass) only if SVT reaches them
        if j > trees[-1].max_level:
            trees.append(DyadicTree(t, v, degree, top, lo, hi))
        return float(tau[j] - trees[-1].level_dist[j])

    res = svt(query, threshold=threshold, epsilon=eps_svt, rng=rng, n_queries=top + 1)
    tree = trees[-1]
    k_bar = res.index
    nodes = [(k_bar, i) for i in range(2**k_bar)]
    items = [CostItem("svt", notion, quarter)]
    spent = Fraction(0)
    checks = reductions = 0
    ran_reduce = reduce and 2**k_bar >= 8
    if ran_reduce:
        nodes = []
        for part in range(4):
            out = reduce_seg(
                tree,
                node=(2, part),
                seg_depth=k_bar,
                k1=k1,
                level=1,
                beta=beta / 2,
                big_b=quarter,
                share=part_share,
                notion=notion,
                rng=rng,
                margin=margin,
            )
            nodes.extend(out.nodes)
            spent += out.spent
            checks += out.checks
            reductions += out.reductions
        items.append(CostItem("reduce_seg", notion, spent))
    final, final_text, final_float = _final(amount, quarter, spent)
    items.append(CostItem("project", notion, final))
    cost = Cost(notion=notion, requested=amount, items=tuple(items))
    edges = tree.edges(nodes)
    noisy = privatize_coefficients(
        tree.coefficients(nodes), notion=notion, amount=final, rng=rng
    )
    diagnostics: dict[str, Any] = {
        "k_bar": int(k_bar),
        "svt_halted": bool(res.halted),
        "max_level": int(top),
        "segments_before_reduce": int(2**k_bar),
        "segments": int(len(nodes)),
        "reduce_seg_ran": bool(ran_reduce),
        "reduce_seg_checks": int(checks),
        "reduce_seg_reductions": int(reductions),
        "final_budget": final_text,
        "continuous": False,
    }
    fn = PrivateFunction(
        breakpoints=edges,
        coefficients=noisy,
        basis_name="legendre",
        basis_params=LegendreBasis(degree).params(),
        cost=cost,
        dim=int(noisy.size),
        noise_notion=notion,
        noise_budget=final_float,
        diagnostics=diagnostics,
    )
    return continuity_projection(fn) if continuous else fn


def privfuncseg(
    t: object,
    values: object,
    *,
    basis: str = "linear",
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    rng: np.random.Generator,
    reduce: bool = True,
    continuous: bool = False,
    degree: int | None = None,
    beta: float = 0.1,
    max_level: int = 20,
    k1: int = 4,
    margin: bool = True,
    threshold: float = 0.0,
    depth_from_samples: bool = True,
) -> PrivateFunction:
    """PrivFuncSeg: privatize a curve with an adaptively segmented piecewise basis.

    Privacy: ε-GP (or ρ-CGP) w.r.t. dist₂ over the curve's domain [t₀, t_N]
    (units of t and of the values). Budget split (exact Fractions):
    ``svt`` ε/4 (SVT over the dyadic levels, g_j = τ_j − dist₂(P_j q, q),
    τ_j = 2^j·m·n/(ε/4); CGP: ρ/4, SVT at √(2ρ/4), τ_j = √(2^j m n)/√(2ρ/4)),
    ``reduce_seg`` at most ε/4 (4 parts × ε/16, actual use settled), and
    ``project`` the remainder (≥ ε/2) for one joint Project-and-Privatize on
    the final segments (privacy filter, [FZ21]). With `depth_from_samples`
    the number of samples N caps the SVT levels (N is then released through
    the SVT's depth: only if N is public); without it the SVT runs over exactly
    `max_level` + 1 levels, a public parameter. Paper Sec. 4.2, Algorithms
    4/5 (GP) and 8/9 (CGP); spec §1.8, §1.9.

    Error: dist₂(f̃, f_a) ≤ η(β; D, p)/ε_fin w.p. 1 − β (`error_bound`),
    D = segments·m·n; doubled when `continuous`.

    Args:
        t: sample times (N,), strictly increasing, any interval.
        values: samples (N,) or (N, n), read as the piecewise-linear interpolant.
        basis: ``"linear"`` (the paper's Example 3: span{1, t} per segment),
            ``"constant"``, or ``"legendre"`` / ``"monomial"`` with `degree`
            (same span, implemented in the orthonormal Legendre basis: the
            output distribution is basis invariant, spec §1.2).
        epsilon: ε for ε-GP (exactly one of epsilon / rho).
        rho: ρ for ρ-CGP.
        rng: injected numpy Generator.
        reduce: run ReduceSeg (skipped anyway when 2^k̄ < 8).
        continuous: apply the continuity projection (post-processing).
        degree: polynomial degree for ``legendre`` / ``monomial``.
        beta: β of the analysis; ReduceSeg uses β/2 in its margin.
        max_level: cap on the SVT levels (also capped at ⌈log₂ N⌉ with
            `depth_from_samples`).
        k1: ReduceSeg depth k₁.
        margin: ReduceSeg's margin term (spec §1.9 line 8).
        threshold: the SVT threshold (0, spec §1.8 [PROPOSED]).
        depth_from_samples: cap the SVT levels by ⌈log₂ N⌉ (N treated as public).

    Returns:
        A PrivateFunction (Legendre basis per segment). Diagnostics: ``k_bar``,
        ``svt_halted``, ``segments_before_reduce``, ``segments``,
        ``reduce_seg_checks``, ``reduce_seg_reductions``, ``final_budget``
        are functions of the private SVT/ReduceSeg outputs (privatized,
        safe to release, but outputs); ``max_level``, ``reduce_seg_ran``
        (given k̄) and ``continuous`` are public parameters.
    """
    notion, amount = budget(epsilon, rho)
    check_rng(rng)
    deg = _basis_degree(basis, degree)
    deg, max_level, k1 = _check_options(deg, max_level, k1)
    beta = check_beta(beta)
    if not math.isfinite(float(threshold)):
        raise MechanismParameterError("threshold must be finite")
    ta, va = check_curve(t, values)
    return privfuncseg_core(
        ta,
        va,
        notion=notion,
        amount=amount,
        rng=rng,
        degree=deg,
        reduce=bool(reduce),
        continuous=bool(continuous),
        beta=beta,
        max_level=max_level,
        k1=k1,
        margin=bool(margin),
        threshold=float(threshold),
        depth_from_samples=bool(depth_from_samples),
    )
