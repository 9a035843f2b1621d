"""Algorithm 5 / 9: ReduceSeg over many intervals at once (spec §1.9; paper Sec. 4.2).

A ReduceSeg call on a dyadic interval (a *root*) runs a check at level l on a
node, and on success halves the node's segments and recurses on its two
children at level l + 1 with half the share. The checks of a root therefore
form a binary tree of at most k₁ − l₀ + 1 levels, and which of them run
depends only on the outcomes above. This module runs that tree for many roots
(all parts of all curves of a batch) level by level, each level one set of
array operations.

Noise: every possible check of a root has its own pre-drawn slot, in
breadth-first order (slot 2^r − 1 + i for node i of relative level r),
drawn at that level's scale (`slot_scales`, `draw_checks`); a check that runs
reads its slot. Each check that runs gets an independent draw of the spec's law, so
the mechanism's output law is that of the recursive algorithm (whose draws
come in depth-first order of the checks that run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from mechanisms.curves.bounds import noise_scale

__all__ = ["ReduceSegPlan", "ReduceSegRoots", "reduce_seg_roots", "check_slots", "slot_scales",
           "draw_checks"]

_E_FACTOR = math.e / (math.e - 1.0)


def check_slots(k1: int, level: int) -> int:
    """Number of noise slots of one root at `level`: 2^(k₁ − level + 1) − 1 (0 if level > k₁)."""
    return 2 ** (k1 - level + 1) - 1 if level <= k1 else 0


@dataclass(frozen=True)
class ReduceSegPlan:
    """The public parameters shared by a set of roots.

    Attributes:
        depth: depth of every root node.
        seg_depth: depth of the uniform segments inside every root.
        level: the level l of the roots' checks (1 at the top).
        k1: maximum level k₁.
        beta: β of the margin term.
        big_b: B (ε/4 or ρ/4): the final step has at least 2B.
        share: ε' (or ρ') of each root.
        notion: ``"gp"`` or ``"cgp"``.
        margin: add the margin term (spec §1.9 line 8).
        mn: m·n of the local basis.
    """

    depth: int
    seg_depth: int
    level: int
    k1: int
    beta: float
    big_b: Fraction
    share: Fraction
    notion: str
    margin: bool
    mn: int


@dataclass(frozen=True)
class ReduceSegRoots:
    """Outcome for R roots.

    Attributes:
        depth, index: (S,) the covering dyadic segments of all roots, root after root,
            each root's in increasing position.
        offsets: (R + 1,) root r owns segments offsets[r]:offsets[r + 1].
        checks: (R, levels) number of checks run per relative level.
        reductions: (R,) number of checks that halved the segments.
    """

    depth: np.ndarray
    index: np.ndarray
    offsets: np.ndarray
    checks: np.ndarray
    reductions: np.ndarray


@lru_cache(maxsize=1024)
def _level_constants(plan: ReduceSegPlan, rel: int) -> tuple[float, float, float, Fraction]:
    """(noise scale, τ, margin, exact spend) of one check at relative level `rel`."""
    level = plan.level + rel
    step = plan.share / 2**rel / 2**level  # the check's exact spend ε'_l/2^l
    h_count = 2 ** (plan.seg_depth - plan.depth - 2 * rel)
    big_b = float(plan.big_b)
    log_term = math.log(2**plan.k1 / plan.beta)
    # Lap(2^l/ε'_l) = Lap(1/step) (GP), N(0,1)·√(2^l)/√(2ρ'_l) = N(0,1)/√(2·step) (CGP),
    # from the exact step, never below it
    scale = noise_scale(plan.notion, step)
    if plan.notion == "gp":
        tau = (h_count / 2) * _E_FACTOR * plan.mn / (2.0 * big_b)
        slack = scale * log_term if plan.margin else 0.0
    else:
        tau = (math.sqrt(h_count * plan.mn) - math.sqrt(h_count * plan.mn / 2)) / math.sqrt(
            2.0 * 2.0 * big_b)
        slack = scale * math.sqrt(2.0 * log_term) if plan.margin else 0.0
    return scale, tau, slack, step


def slot_scales(plan: ReduceSegPlan) -> np.ndarray:
    """Noise scale of each slot of one root, breadth-first (read-only, cached per plan)."""
    return _slot_scales(plan)


@lru_cache(maxsize=256)
def _slot_scales(plan: ReduceSegPlan) -> np.ndarray:
    levels = max(plan.k1 - plan.level + 1, 0)
    out = np.concatenate([np.full(2**r, _level_constants(plan, r)[0]) for r in range(levels)]
                         ) if levels else np.zeros(0)
    out.setflags(write=False)
    return out


def draw_checks(notion: str, rng: np.random.Generator, scales: np.ndarray) -> np.ndarray:
    """One draw per slot from `rng`: Lap(scale) (GP) or N(0, scale²) (CGP), in slot order.

    Drawn as one standard block times the slots' scales (the values numpy's
    ``laplace(0, scale)`` / ``normal(0, scale)`` give, one variate per slot).
    """
    if notion == "gp":
        return rng.laplace(0.0, 1.0, size=scales.size) * scales
    return rng.standard_normal(scales.size) * scales


def spend_per_check(plan: ReduceSegPlan) -> list[Fraction]:
    """Exact budget one check consumes at each relative level: (ε'/2^r)/2^(l₀+r)."""
    return [_level_constants(plan, r)[3] for r in range(max(plan.k1 - plan.level + 1, 0))]


def _node_residuals(res2: list[np.ndarray], rows: np.ndarray, index: np.ndarray,
                    plan: ReduceSegPlan, rel: int) -> np.ndarray:
    """dist₂ of the fit on the halved segments of every node at relative level `rel`, (R, 2^rel)."""
    half_depth = plan.seg_depth - rel - 1
    width = 2 ** (half_depth - plan.depth)  # res2 entries under one root
    cols = index[:, None] * width + np.arange(width)[None, :]
    block = res2[half_depth][rows[:, None], cols]
    return np.sqrt(block.reshape(rows.size, 2**rel, -1).sum(axis=2))


def reduce_seg_roots(res2: list[np.ndarray], rows: np.ndarray, index: np.ndarray,
                     noise: np.ndarray, plan: ReduceSegPlan) -> ReduceSegRoots:
    """ReduceSeg (Alg. 5, GP) / ReduceSegCGP (Alg. 9) on R roots that share a plan.

    Privacy: each check that runs releases d + noise, d the dist₂ of the
    least-squares fit on the halved segments (1-Lipschitz in dist₂), with
    Lap(2^l/ε'_l) noise (GP, consumes ε'_l/2^l) or N(0, 1)·√(2^l)/√(2ρ'_l)
    (CGP, consumes ρ'_l/2^l); ε'_l halves per level, so a root spends at
    most (1 − 2^{−(k₁−l₀+1)})·ε'. Cost: the checks that run (`checks` times
    `spend_per_check`). Paper Sec. 4.2, Algorithm 5/9; spec §1.9.

    Args:
        res2: squared residuals per level, each (rows, 2^level) (a forest's).
        rows: (R,) the forest row of each root.
        index: (R,) each root's node index at `plan.depth`.
        noise: (R, check_slots) draws per root (`draw_checks` with
            `slot_scales(plan)`), from the root's curve's own generator.
        plan: the shared public parameters.

    Returns:
        The covering segments and check counts of every root.
    """
    n_roots = rows.size
    levels = max(plan.k1 - plan.level + 1, 0)
    checks = np.zeros((n_roots, levels), dtype=np.int64)
    reductions = np.zeros(n_roots, dtype=np.int64)
    alive = np.ones((n_roots, 1), dtype=bool)
    passes = np.zeros((n_roots, 1), dtype=np.int64)
    rel = 0
    while rel < levels and plan.seg_depth - plan.depth - 2 * rel >= 1 and alive.any():
        _, tau, slack, _ = _level_constants(plan, rel)
        d = _node_residuals(res2, rows, index, plan, rel)
        err = d + noise[:, 2**rel - 1 : 2 ** (rel + 1) - 1]
        merged = alive & ~(err + slack > tau)
        checks[:, rel] = alive.sum(axis=1)
        reductions += merged.sum(axis=1)
        passes = np.repeat(passes + merged, 2, axis=1)
        alive = np.repeat(merged, 2, axis=1)
        rel += 1
    return _covering(index, passes, rel, plan, checks, reductions)


def _covering(index: np.ndarray, passes: np.ndarray, rel: int, plan: ReduceSegPlan,
              checks: np.ndarray, reductions: np.ndarray) -> ReduceSegRoots:
    """Segments from the passes above each region at depth plan.depth + rel."""
    n_roots, regions = passes.shape
    region_depth = plan.depth + rel
    seg_depth = plan.seg_depth - passes  # (R, Q): depth of the segments in each region
    region = index[:, None] * regions + np.arange(regions)[None, :]
    finer = np.maximum(seg_depth - region_depth, 0)
    coarser = np.maximum(region_depth - seg_depth, 0)
    first = (region & ((1 << coarser) - 1)) == 0  # a coarser segment is listed once
    count = np.where(seg_depth >= region_depth, 1 << finer, first.astype(np.int64)).ravel()
    total = int(count.sum())
    start = np.repeat(np.cumsum(count) - count, count)
    within = np.arange(total) - start
    depth = np.repeat(seg_depth.ravel(), count)
    base = np.where(seg_depth >= region_depth, region << finer, region >> coarser).ravel()
    per_root = count.reshape(n_roots, regions).sum(axis=1)
    offsets = np.zeros(n_roots + 1, dtype=np.int64)
    np.cumsum(per_root, out=offsets[1:])
    return ReduceSegRoots(depth=depth, index=np.repeat(base, count) + within, offsets=offsets,
                          checks=checks, reductions=reductions)
