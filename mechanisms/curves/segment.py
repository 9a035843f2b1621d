"""Algorithms 4/8 (PrivFuncSeg) and 5/9 (ReduceSeg) (spec §1.8, §1.9; paper Sec. 4.2).

PrivFuncSeg finds, by SVT over j = 0, 1, 2, …, the number 2^k̄ of equal
dyadic segments at which the projection error balances the noise, lets
ReduceSeg merge segments where the curve is flat, and ends with one
Project-and-Privatize on the resulting piecewise basis.

Batched: `privfuncseg_batch` runs every curve of a `CurveBatch` together.
All SVT queries come from one dyadic moment forest of the batch (`forest.py`,
linear in the samples), the SVTs are one comparison over a (curves, levels)
array, ReduceSeg runs level by level over all parts of all curves
(`reduce_seg.py`), and the final noise is one vector per curve. `privfuncseg`
on one curve is the batch of that curve.

Draws, per curve and from that curve's generator only, in this order:
``laplace(0, 3/ε_svt, top + 2)`` (the SVT's threshold and query slots), then
the ReduceSeg check slots (4 parts × (2^k₁ − 1), breadth-first; one block of
standard Laplace (GP) or normal (CGP) variates times each slot's level scale,
see `reduce_seg.draw_checks`), then the final noise (``standard_normal(D)``
and, for GP, ``gamma(D)``). Under GP the first two are one call, a standard
Laplace block of top + 2 + slots variates, the SVT's part times 3/ε_svt after:
the same doubles as the two calls (`_Round._draw_blocks`). Every slot is drawn
whether or not the SVT halts before it or the check runs (see `svt.py` and
`reduce_seg.py`): the law of the output is that of Algorithms 4/5, and the
number of draws depends only on public N, k₁ and on the released dimension D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from mechanisms.cost import Cost, CostItem, float_at_most, laplace_scale
from mechanisms.curves._budget import budget, check_beta, check_flag, check_rng, svt_epsilon
from mechanisms.curves._piecewise import check_curve, restrict
from mechanisms.curves.bases import LegendreBasis
from mechanisms.curves.batch import CurveBatch, generator_rounds
from mechanisms.curves.bounds import noise_scale
from mechanisms.curves.continuity import project_continuous
from mechanisms.curves.forest import DyadicForest
from mechanisms.curves.reduce_seg import (
    ReduceSegPlan,
    check_slots,
    draw_checks,
    reduce_seg_roots,
    slot_scales,
    spend_per_check,
)
from mechanisms.curves.result import PrivateFunction, PrivateFunctionBatch, concat_batches
from mechanisms.curves.samplers import gaussian_rows, noise_sampler, slap_rows
from mechanisms.curves.svt import first_crossing
from mechanisms.discrete_gaussian import cgp_lattice_rows
from mechanisms.errors import MechanismParameterError

__all__ = ["privfuncseg", "privfuncseg_batch", "reduce_seg", "DyadicTree", "ReduceSegOutcome",
           "SegOptions"]


class DyadicTree:
    """Exact least-squares fits of one piecewise-linear curve on all dyadic segments.

    Level j splits [lo, hi] into 2^j equal segments. For each level the tree
    holds the orthonormal-Legendre coefficients (2^j, m, n) of the LS fit on
    every segment and its squared residual (2^j,). Built in O(N + 2^J): it is
    the `DyadicForest` of one curve.

    Args:
        t: sample times (N,), increasing (duplicates allowed internally to
            encode a jump).
        values: samples (N, n).
        degree: polynomial degree of the local basis.
        max_level: finest level J.
        lo, hi: the domain (default [t[0], t[-1]]; inside the samples).
    """

    def __init__(self, t: np.ndarray, values: np.ndarray, degree: int, max_level: int,
                 lo: float | None = None, hi: float | None = None) -> None:
        ta = np.asarray(t, dtype=np.float64)
        va = np.asarray(values, dtype=np.float64).reshape(ta.size, -1)
        ta, va = restrict(ta, va, float(ta[0] if lo is None else lo),
                          float(ta[-1] if hi is None else hi))
        self.forest = DyadicForest(ta, va, np.array([0, ta.size]), degree, max_level)
        self.lo, self.hi = float(ta[0]), float(ta[-1])
        self.degree, self.m, self.n = self.forest.degree, self.forest.m, self.forest.n
        self.max_level = self.forest.max_level
        self.mean = self.forest.mean[0]
        self.res2 = [r[0] for r in self.forest.res2]
        self.level_dist = self.forest.level_dist[0]

    def level_coefficients(self, level: int) -> np.ndarray:
        """LS coefficients (2^level, m, n) of all segments of a level."""
        return self.forest.coef[level][0]

    def edges(self, nodes: list[tuple[int, int]]) -> np.ndarray:
        """Edges (k+1,) of consecutive dyadic nodes (depth, index)."""
        depth = np.array([d for d, _ in nodes])
        index = np.array([i for _, i in nodes])
        left = self.forest.segment_edges(depth, index, np.zeros(len(nodes), dtype=np.int64))
        return np.append(left, self.hi)

    def coefficients(self, nodes: list[tuple[int, int]]) -> np.ndarray:
        """LS coefficients (k, m, n) of consecutive dyadic nodes."""
        out = np.empty((len(nodes), self.m, self.n))
        for s, (d, i) in enumerate(nodes):
            out[s] = self.forest.coef[d][0, i]
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
    (1 − 2^{−k₁})·share. Paper Sec. 4.2, Algorithm 5/9; spec §1.9. It is
    `reduce_seg_roots` on one root; draws: ``check_slots(k1, level)``
    draws, in one call (`draw_checks`: Lap(scale) or N(0, scale²) per slot).

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
    check_rng(rng)
    plan = ReduceSegPlan(depth=int(node[0]), seg_depth=int(seg_depth), level=int(level),
                         k1=int(k1), beta=float(beta), big_b=Fraction(big_b),
                         share=Fraction(share), notion=notion, margin=bool(margin),
                         mn=tree.m * tree.n)
    noise = draw_checks(notion, rng, slot_scales(plan))
    out = reduce_seg_roots(tree.forest.res2, np.zeros(1, dtype=np.int64),
                           np.array([int(node[1])]), noise[None, :], plan)
    spend = spend_per_check(plan)
    spent = sum((int(n) * s for n, s in zip(out.checks[0], spend, strict=True)), Fraction(0))
    nodes = [(int(d), int(i)) for d, i in zip(out.depth, out.index, strict=True)]
    return ReduceSegOutcome(nodes, spent, int(out.checks.sum()), int(out.reductions[0]))


@dataclass(frozen=True)
class SegOptions:
    """The public parameters of a PrivFuncSeg run (validated).

    Attributes mirror `privfuncseg`'s keywords; `amount` is the exact ε or ρ.
    """

    notion: str
    amount: Fraction
    degree: int
    reduce: bool
    continuous: bool
    beta: float
    max_level: int
    k1: int
    margin: bool
    threshold: float
    noise: str | None = None  # the coefficient sampler (samplers.NOISES); None: the default


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


def seg_options(*, basis: str, epsilon: object, rho: object, reduce: bool, continuous: bool,
                degree: int | None, beta: float, max_level: int, k1: int, margin: bool,
                threshold: float, noise: str | None = None) -> SegOptions:
    """Validate PrivFuncSeg's public parameters (before any data is read)."""
    notion, amount = budget(epsilon, rho)
    deg = _basis_degree(basis, degree)
    deg, max_level, k1 = _check_options(deg, max_level, k1)
    beta = check_beta(beta)
    if isinstance(threshold, bool) or not isinstance(
            threshold, (int, float, np.integer, np.floating)) or not math.isfinite(threshold):
        raise MechanismParameterError(f"threshold must be a finite number, got {threshold!r}")
    return SegOptions(notion, amount, deg, check_flag("reduce", reduce),
                      check_flag("continuous", continuous), beta, max_level, k1,
                      check_flag("margin", margin), float(threshold),
                      noise_sampler(notion, noise))


def svt_levels(sizes: np.ndarray, max_level: int) -> np.ndarray:
    """Top SVT level per curve: min(max_level, ⌈log₂ N⌉), N its size (distinct times)."""
    # ⌈log₂ N⌉ = bit length of N − 1: frexp's exponent, exact for N < 2^53
    ceil_log2 = np.frexp(np.asarray(sizes, dtype=np.int64) - 1.0)[1].astype(np.int64)
    return np.minimum(ceil_log2, max_level)


@lru_cache(maxsize=256)
def _split(amount: Fraction) -> tuple[Fraction, Fraction]:
    """PrivFuncSeg's split of `amount`: (ε/4 for SVT, ε/16 per ReduceSeg quarter)."""
    return amount / 4, amount / 16


@lru_cache(maxsize=4096)
def _cost(notion: str, amount: Fraction, ran_reduce: bool,
          spent: Fraction) -> tuple[Cost, Fraction, str]:
    """The cost of one curve (shared by all curves with the same spend) and its final step."""
    quarter, _ = _split(amount)
    final = amount - quarter - spent
    items = [CostItem("svt", notion, quarter)]
    if ran_reduce:
        items.append(CostItem("reduce_seg", notion, spent))
    items.append(CostItem("project", notion, final))
    return Cost(notion=notion, requested=amount, items=tuple(items)), final, str(final)


def privfuncseg_batch(
    batch: CurveBatch,
    *,
    rngs: list[np.random.Generator],
    basis: str = "linear",
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    reduce: bool = True,
    continuous: bool = False,
    degree: int | None = None,
    beta: float = 0.1,
    max_level: int = 20,
    k1: int = 4,
    margin: bool = True,
    threshold: float = 0.0,
    depth_from_samples: bool = True,
    public_sizes: object = None,
    noise: str | None = None,
) -> PrivateFunctionBatch:
    """PrivFuncSeg on every curve of a batch (each curve as `privfuncseg`, with its own rng).

    Privacy: per curve exactly as `privfuncseg` (ε-GP or ρ-CGP w.r.t. dist₂
    over that curve's domain, cost ε or ρ split into ``svt``, ``reduce_seg``
    and ``project``); curve c's noise comes only from ``rngs[c]``, and a
    generator given for several curves is drawn curve after curve, so the
    result equals calling `privfuncseg` on each curve in order. Cost: O(total
    samples + Σ 2^top) array work plus a few generator calls per curve.

    Args:
        batch: the curves.
        rngs: one generator per curve (a user's generator may repeat).
        basis: as `privfuncseg`.
        epsilon: ε (exactly one of epsilon / rho).
        rho: ρ.
        reduce: as `privfuncseg`.
        continuous: as `privfuncseg`.
        degree: as `privfuncseg`.
        beta: as `privfuncseg`.
        max_level: as `privfuncseg`.
        k1: as `privfuncseg`.
        margin: as `privfuncseg`.
        threshold: as `privfuncseg`.
        depth_from_samples: as `privfuncseg`.
        public_sizes: (C,) public sizes that cap each curve's SVT levels at
            ⌈log₂ size⌉ (e.g. a domain's public point count or output grid);
            they replace `depth_from_samples`.
        noise: as `privfuncseg`.

    Returns:
        The privatized functions; `function(c)` is curve c's `PrivateFunction`.
    """
    opts = seg_options(basis=basis, epsilon=epsilon, rho=rho, reduce=reduce,
                       continuous=continuous, degree=degree, beta=beta, max_level=max_level,
                       k1=k1, margin=margin, threshold=threshold, noise=noise)
    if not isinstance(batch, CurveBatch):
        raise MechanismParameterError("privfuncseg_batch takes a CurveBatch")
    if public_sizes is not None:
        sizes = np.asarray(public_sizes, dtype=np.int64)
        if sizes.shape != (len(batch),) or np.any(sizes < 1):
            raise MechanismParameterError("public_sizes needs one size >= 1 per curve")
        tops = svt_levels(sizes, opts.max_level)
    else:
        tops = _tops(batch, opts, depth_from_samples)
    return privfuncseg_core(batch, tops, list(rngs), opts)


def _tops(batch: CurveBatch, opts: SegOptions, depth_from_samples: bool) -> np.ndarray:
    """Top SVT level of every curve: capped by ⌈log₂ N⌉ only when N is public."""
    if depth_from_samples:
        return svt_levels(batch.distinct_times(), opts.max_level)
    return np.full(len(batch), opts.max_level, dtype=np.int64)


def privfuncseg_core(batch: CurveBatch, tops: np.ndarray, rngs: list[np.random.Generator],
                     opts: SegOptions) -> PrivateFunctionBatch:
    """PrivFuncSeg on validated curves with given top SVT levels (see `privfuncseg_batch`)."""
    rounds = generator_rounds(rngs, len(batch))
    if len(rounds) == 1:
        return _Round(batch, tops, rngs, opts).run()
    parts = [_Round(batch.take(idx), tops[idx], [rngs[i] for i in idx], opts).run()
             for idx in rounds]
    return concat_batches(parts, rounds)


class _Round:
    """PrivFuncSeg on curves whose generators are all distinct."""

    def __init__(self, batch: CurveBatch, tops: np.ndarray, rngs: list[np.random.Generator],
                 opts: SegOptions) -> None:
        self.batch, self.tops, self.rngs, self.opts = batch, tops, rngs, opts
        self.firsts = np.where(tops > 8, np.maximum(tops - 4, 0), tops)
        self.quarter, self.part_share = _split(opts.amount)
        self.m, self.n = opts.degree + 1, batch.n_outputs
        self.forests: list[DyadicForest] = []
        count = len(batch)
        self.tree = np.zeros(count, dtype=np.int64)  # forest of each curve
        self.row = np.zeros(count, dtype=np.int64)  # row in that forest

    def run(self) -> PrivateFunctionBatch:
        svt_noise, check_noise = self._draw_blocks()
        k_bar, halted = self._svt(svt_noise)
        depth, index, seg_off, checks, reductions = self._segments(k_bar, check_noise)
        return self._release(k_bar, halted, depth, index, seg_off, checks, reductions)

    def _plan(self, seg_depth: int) -> ReduceSegPlan:
        """ReduceSeg's public parameters for a curve with 2^seg_depth segments (Alg. 4 l. 5-9)."""
        opts = self.opts
        return ReduceSegPlan(depth=2, seg_depth=seg_depth, level=1, k1=opts.k1,
                             beta=opts.beta / 2, big_b=self.quarter, share=self.part_share,
                             notion=opts.notion, margin=opts.margin, mn=self.m * self.n)

    def _draw_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """Every curve's SVT slots (C, top + 2) and ReduceSeg check slots (C, 4·slots).

        GP: both are Laplace, drawn as one standard block per curve (one generator
        call) and scaled after: ``laplace(0, s)`` is ``0 ± s·log(·)`` and
        ``laplace(0, 1)·s`` is ``(0 ± log(·))·s``, the same double for s > 0, so the
        values are those of the two calls the module docstring lists.
        """
        count, opts = len(self.batch), self.opts
        self.svt_scale = laplace_scale(3, svt_epsilon(opts.notion, self.quarter))  # >= 3/ε
        scales = (np.tile(slot_scales(self._plan(3)), 4) if opts.reduce else np.zeros(0))
        sizes = self.tops + 2
        width = int(self.tops.max()) + 2
        columns = np.arange(width)
        inside = columns[None, :] < sizes[:, None]
        svt_noise = np.zeros((count, width))
        if opts.notion == "gp":
            block = sizes + scales.size
            flat = np.concatenate([rng.laplace(0.0, 1.0, size=n) for rng, n in
                                   zip(self.rngs, block.tolist(), strict=True)])
            starts = np.cumsum(block) - block
            svt_noise[inside] = flat[(starts[:, None] + columns[None, :])[inside]] * self.svt_scale
            checks = flat[(starts + sizes)[:, None] + np.arange(scales.size)] * scales
            return svt_noise, checks
        svt, rows = [], []
        for rng, n in zip(self.rngs, sizes.tolist(), strict=True):
            svt.append(rng.laplace(0.0, self.svt_scale, size=n))
            rows.append(draw_checks(opts.notion, rng, scales))
        starts = np.cumsum(sizes) - sizes
        svt_noise[inside] = np.concatenate(svt)[(starts[:, None] + columns[None, :])[inside]]
        return svt_noise, np.concatenate(rows).reshape(count, scales.size)

    def _build(self, curves: np.ndarray, levels: np.ndarray, dist: np.ndarray) -> None:
        """Forests for `curves`, one per distinct finest level; fill their level distances."""
        for level in np.unique(levels):
            members = curves[levels == level]
            sub = self.batch.take(members)
            forest = DyadicForest(sub.t, sub.values, sub.offsets, self.opts.degree, int(level))
            self.tree[members] = len(self.forests)
            self.row[members] = np.arange(members.size)
            self.forests.append(forest)
            dist[members, : int(level) + 1] = forest.level_dist

    def _svt(self, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        opts, count = self.opts, len(self.batch)
        levels = np.arange(int(self.tops.max()) + 1)
        if opts.notion == "gp":
            tau = (2.0**levels) * self.m * self.n / float(self.quarter)
        else:
            tau = np.sqrt((2.0**levels) * self.m * self.n) / math.sqrt(2.0 * float(self.quarter))
        dist = np.zeros((count, levels.size))
        everyone = np.arange(count)
        self._build(everyone, self.firsts, dist)
        k_bar, halted = first_crossing(tau[None, :] - dist, self.firsts + 1, noise,
                                       threshold=opts.threshold)
        deeper = everyone[~halted & (self.tops > self.firsts)]
        if deeper.size:  # the deepest levels are built only for curves the SVT takes there
            self._build(deeper, self.tops[deeper], dist)
            queries = tau[None, :] - dist[deeper]
            queries[levels[None, :] <= self.firsts[deeper, None]] = -np.inf  # already asked
            k2, h2 = first_crossing(queries, self.tops[deeper] + 1, noise[deeper],
                                    threshold=opts.threshold)
            k_bar[deeper], halted[deeper] = k2, h2
        return k_bar, halted

    def _segments(self, k_bar: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, ...]:
        """Final dyadic segments (depth, index, per-curve offsets) and ReduceSeg's counts."""
        opts, count = self.opts, len(self.batch)
        levels = max(opts.k1, 0)
        checks = np.zeros((count, levels), dtype=np.int64)
        reductions = np.zeros(count, dtype=np.int64)
        ran = (k_bar >= 3) & opts.reduce
        blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        plain = np.flatnonzero(~ran)
        if plain.size:
            counts = 2 ** k_bar[plain]
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            blocks.append((plain, counts, np.repeat(k_bar[plain], counts), within))
        slots = check_slots(opts.k1, 1)
        for tree_id, kb in _pairs(self.tree[ran], k_bar[ran]):
            curves = np.flatnonzero(ran & (self.tree == tree_id) & (k_bar == kb))
            out = reduce_seg_roots(self.forests[tree_id].res2, np.repeat(self.row[curves], 4),
                                   np.tile(np.arange(4), curves.size),
                                   noise[curves].reshape(-1, slots), self._plan(kb))
            checks[curves] = out.checks.reshape(curves.size, 4, -1).sum(axis=1)
            reductions[curves] = out.reductions.reshape(curves.size, 4).sum(axis=1)
            per_curve = out.offsets[4::4] - out.offsets[:-4:4]
            blocks.append((curves, per_curve, out.depth, out.index))
        return (*_in_curve_order(blocks, count), checks, reductions)

    def _release(self, k_bar: np.ndarray, halted: np.ndarray, depth: np.ndarray,
                 index: np.ndarray, seg_off: np.ndarray, checks: np.ndarray,
                 reductions: np.ndarray) -> PrivateFunctionBatch:
        opts, count = self.opts, len(self.batch)
        segments = np.diff(seg_off)
        curve = np.repeat(np.arange(count), segments)
        coef = np.empty((depth.size, self.m, self.n))
        for tree_id, d in _pairs(self.tree[curve], depth):
            sel = (self.tree[curve] == tree_id) & (depth == d)
            coef[sel] = self.forests[tree_id].coef[d][self.row[curve[sel]], index[sel]]
        lo, hi = self.batch.lo, self.batch.hi
        left = lo[curve] + (hi - lo)[curve] * (index / np.exp2(depth))
        edges = np.empty(depth.size + count)
        bp_pos = np.arange(depth.size) + curve
        edges[bp_pos] = left
        edges[seg_off[1:] + np.arange(count)] = hi
        ran = (k_bar >= 3) & opts.reduce
        spend = spend_per_check(self._plan(3))
        costs, scales, finals, texts, exact = _costs(opts, ran, checks, spend)
        dims = segments * self.m * self.n
        if noise_sampler(opts.notion, opts.noise) == "discrete_gaussian":
            noisy = cgp_lattice_rows(coef.ravel(), dims, exact, self.rngs).reshape(coef.shape)
        else:
            z = slap_rows(dims, self.rngs) if opts.notion == "gp" else gaussian_rows(dims,
                                                                                     self.rngs)
            noisy = coef + (np.repeat(scales, dims) * z).reshape(coef.shape)
        factors = np.ones(count)
        if opts.continuous:
            basis = LegendreBasis(opts.degree)
            for c in range(count):
                a, b = int(seg_off[c]), int(seg_off[c + 1])
                noisy[a:b] = project_continuous(edges[a + c : b + c + 1], noisy[a:b], basis)
            factors[:] = 2.0
        params = LegendreBasis(opts.degree).params()
        diagnostics: dict[str, list[Any]] = {
            "k_bar": k_bar.tolist(),
            "svt_halted": halted.tolist(),
            "max_level": self.tops.tolist(),
            "segments_before_reduce": (2**k_bar).tolist(),
            "segments": segments.tolist(),
            "reduce_seg_ran": ran.tolist(),
            "reduce_seg_checks": checks.sum(axis=1).tolist(),
            "reduce_seg_reductions": reductions.tolist(),
            "final_budget": texts,
            "continuous": [opts.continuous] * count,
        }
        return PrivateFunctionBatch(
            breakpoints=edges, coefficients=noisy, seg_offsets=seg_off, basis_name="legendre",
            basis_params=(params,) * count, costs=tuple(costs), dims=dims,
            noise_notion=opts.notion, noise_budgets=finals,
            diagnostics=diagnostics, error_factors=factors)


def _in_curve_order(blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                    count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate per-curve blocks of segments (curves, counts, depth, index) in curve order."""
    curves = np.concatenate([b[0] for b in blocks])
    counts = np.concatenate([b[1] for b in blocks])
    depth = np.concatenate([b[2] for b in blocks])
    index = np.concatenate([b[3] for b in blocks])
    src_start = np.cumsum(counts) - counts
    seg_counts = np.zeros(count, dtype=np.int64)
    seg_counts[curves] = counts
    seg_off = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(seg_counts, out=seg_off[1:])
    order = np.argsort(curves, kind="stable")
    take = np.repeat(src_start[order] - seg_off[curves[order]], counts[order]) + np.arange(
        int(counts.sum()))
    return depth[take], index[take], seg_off


def _pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """The distinct (a, b) pairs of two non-negative int arrays, sorted."""
    if a.size == 0:
        return []
    width = int(b.max()) + 1
    keys = np.flatnonzero(np.bincount(a * width + b))
    return [(int(k) // width, int(k) % width) for k in keys]


def _costs(opts: SegOptions, ran: np.ndarray, checks: np.ndarray, spend: list[Fraction]
           ) -> tuple[list[Cost], np.ndarray, np.ndarray, list[str], list[Fraction]]:
    """Per curve: cost, final scale, final budget (float, rounded down), text, exact final budget.

    Computed once per distinct (ran, checks) row: curves with equal counts share them.
    """
    table = np.column_stack([ran, checks]).astype(np.int64)
    base = int(table.max()) + 1
    key = table @ (base ** np.arange(table.shape[1], dtype=np.int64))
    keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rows = table[first]
    costs, scales, finals, texts, exact = [], [], [], [], []
    for row in rows.tolist():
        spent = sum((n * s for n, s in zip(row[1:], spend, strict=False)), Fraction(0))
        cost, final, text = _cost(opts.notion, opts.amount, bool(row[0]), spent)
        costs.append(cost)
        scales.append(noise_scale(opts.notion, final))  # from the exact amount, never below
        finals.append(float_at_most(final))
        texts.append(text)
        exact.append(final)
    pick = inverse.tolist()
    return ([costs[i] for i in pick], np.array(scales)[inverse], np.array(finals)[inverse],
            [texts[i] for i in pick], [exact[i] for i in pick])


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
    noise: str | None = None,
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
    4/5 (GP) and 8/9 (CGP); spec §1.8, §1.9. It is `privfuncseg_batch` on
    one curve (draws: see the module docstring).

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
        noise: the final projection's sampler (`samplers.NOISES`): under CGP
            the exact discrete Gaussian on a lattice at the final step's ρ
            (default, `mechanisms.discrete_gaussian.cgp_lattice_rows`) or
            ``"gaussian"`` in floating point.
        depth_from_samples: cap the SVT levels by ⌈log₂ N⌉ (N treated as public).

    Returns:
        A PrivateFunction (Legendre basis per segment). Diagnostics: ``k_bar``,
        ``svt_halted``, ``segments_before_reduce``, ``segments``,
        ``reduce_seg_checks``, ``reduce_seg_reductions``, ``final_budget``
        are functions of the private SVT/ReduceSeg outputs (privatized,
        safe to release, but outputs); ``max_level``, ``reduce_seg_ran``
        (given k̄) and ``continuous`` are public parameters.
    """
    opts = seg_options(basis=basis, epsilon=epsilon, rho=rho, reduce=reduce,
                       continuous=continuous, degree=degree, beta=beta, max_level=max_level,
                       k1=k1, margin=margin, threshold=threshold, noise=noise)
    check_rng(rng)
    ta, va = check_curve(t, values)
    batch = CurveBatch(ta, va, np.array([0, ta.size], dtype=np.int64))
    return privfuncseg_core(batch, _tops(batch, opts, bool(depth_from_samples)), [rng],
                            opts).function(0)
