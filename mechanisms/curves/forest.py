"""One dyadic moment tree per curve, built for a whole batch of curves at once.

For every curve c of a `CurveBatch` and every level j ≤ J, level j splits the
curve's domain [lo_c, hi_c] into 2^j equal segments; the forest holds the
orthonormal-Legendre coefficients of the least-squares fit on every segment
and its squared residual. Spec §1.4 (exact integration) and §1.8 (the dyadic
queries of PrivFuncSeg).

How it is built (all curves together, linear in the samples):

1. Time is read in leaf units u = (t − lo)·2^J/(hi − lo), so leaf k is
   [k, k + 1). A data piece inside one leaf contributes to it directly; a
   piece over leaf edges is cut at them (the value at an edge is
   interpolated), one sub-piece per leaf it touches.
2. Per (sub-)piece, the exact moments ∫q·s^k dt (s = 2(u − k) − 1 ∈ [−1, 1]
   the leaf's local coordinate; closed forms for degree ≤ 1, Gauss-Legendre
   otherwise) and ∫‖q‖² dt, summed per leaf with segmented reductions. This
   runs block by block (about `BLOCK` samples, whole curves, a long curve cut
   at fixed offsets from its own start) so that the temporaries stay in cache.
3. Each coarser level from its two children by the exact binomial change of
   variables s_parent = s_child/2 ∓ ½.

Values are centred by each curve's sample mean first (constants lie in every
span, so residuals are unchanged; the mean is added back to the constant
coefficient). Every step is elementwise or a reduction within one curve, so a
curve's numbers do not depend on the other curves of the batch (tested: a
batch gives the bytes of each curve alone).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.special import comb

from mechanisms.curves._piecewise import gauss_legendre, nodes_for_degree

__all__ = ["DyadicForest"]


@lru_cache(maxsize=32)
def tree_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


def _combine(matrix: np.ndarray, parts: list[np.ndarray]) -> list[np.ndarray]:
    """[Σ_k matrix[l, k]·parts[k] for l], term by term (exact zeros skipped, fixed order)."""
    out = []
    for row in matrix:
        acc = None
        for coef, part in zip(row, parts, strict=True):
            if coef == 0.0:
                continue
            term = part if coef == 1.0 else coef * part
            acc = term if acc is None else acc + term
        out.append(np.zeros_like(parts[0]) if acc is None else acc)
    return out


#: Samples per block: the per-sample work runs block by block so that its
#: temporaries stay in cache (a block never splits a curve shorter than this).
BLOCK = 2**15


def _blocks(offsets: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(first curve, end curve, first row, end row) blocks of about BLOCK samples.

    Blocks hold whole curves; a curve longer than BLOCK is cut into blocks of
    BLOCK pieces counted from its own first sample (the last knot of a block
    is the first of the next), so a curve's sums never depend on its neighbours.
    """
    out: list[tuple[int, int, int, int]] = []
    count = offsets.size - 1
    c = 0
    while c < count:
        r0 = int(offsets[c])
        if int(offsets[c + 1]) - r0 > BLOCK:
            end = int(offsets[c + 1])
            for a in range(r0, end - 1, BLOCK):
                out.append((c, c + 1, a, min(a + BLOCK, end - 1) + 1))
            c += 1
            continue
        e = int(np.searchsorted(offsets, r0 + BLOCK, side="right")) - 1
        e = max(e, c + 1)
        while e > c + 1 and int(offsets[e]) - r0 > BLOCK:
            e -= 1
        out.append((c, e, r0, int(offsets[e])))
        c = e
    return out


def _sum_sorted(keys: np.ndarray, weights: list[np.ndarray], bins: int) -> list[np.ndarray]:
    """Sums of each weight array per key 0..bins−1, for non-decreasing keys (one pass each)."""
    starts = np.searchsorted(keys, np.arange(bins))
    used = int(np.searchsorted(starts, keys.size))  # bins from here on are empty
    empty = np.diff(np.append(starts[:used], keys.size)) == 0
    out = []
    for w in weights:
        total = np.zeros(bins)
        if used:
            total[:used] = np.add.reduceat(w, starts[:used])
            total[:used][empty] = 0.0
        out.append(total)
    return out


def _part_sums(u0: np.ndarray, u1: np.ndarray, q0: list[np.ndarray], q1: list[np.ndarray],
               leaf: np.ndarray, gleaf: np.ndarray, bins: int, degree: int) -> list[np.ndarray]:
    """Per-leaf sums of the exact moments of sub-pieces [u0, u1] (leaf units, leaf = ⌊u⌋).

    Returns (degree + 1)·n + 1 arrays (bins,) summed by `gleaf` (the leaf's
    bin, non-decreasing): for each k the sums of ∫q·s^k du (per value
    column), then ∫‖q‖² du; s = 2(u − leaf) − 1.
    """
    h = u1 - u0
    total = [a + b for a, b in zip(q0, q1, strict=True)]
    diff = [b - a for a, b in zip(q0, q1, strict=True)]
    out: list[np.ndarray] = []
    if degree <= 1:
        half_h = 0.5 * h
        mom0 = [half_h * a for a in total]
        out.extend(mom0)
        if degree == 1:
            smid = (u0 + u1) - (2.0 * leaf + 1.0)
            h2 = h * h / 6.0
            out.extend(m0 * smid + h2 * d for m0, d in zip(mom0, diff, strict=True))
    else:
        x, w = gauss_legendre(nodes_for_degree(degree + 1))
        smid = (u0 + u1) - (2.0 * leaf + 1.0)
        s = smid[:, None] + h[:, None] * x[None, :]
        frac = 0.5 * (1.0 + x)
        weighted = [(0.5 * h)[:, None] * w[None, :] * (a[:, None] + d[:, None] * frac[None, :])
                    for a, d in zip(q0, diff, strict=True)]
        power = np.ones_like(s)
        for _ in range(degree + 1):
            out.extend(np.sum(power * wq, axis=1) for wq in weighted)
            power = power * s
    energy = 3.0 * total[0] * total[0] + diff[0] * diff[0]
    for a, d in zip(total[1:], diff[1:], strict=True):
        energy = energy + 3.0 * a * a + d * d
    out.append(h * energy / 12.0)
    return _sum_sorted(gleaf, out, bins)


def _block_sums(t: np.ndarray, cols: list[np.ndarray], cid: np.ndarray, lo: np.ndarray,
                scale: np.ndarray, n_leaf: int, degree: int, ends: tuple[np.ndarray, np.ndarray],
                whole_curves: bool) -> tuple[int, list[np.ndarray]]:
    """Leaf sums (see `_part_sums`) of the pieces of one block.

    Returns the block's first leaf (of its first curve) and the sums over the
    leaves it touches, curve after curve: every leaf of every curve for a block
    of whole curves, the run of leaves a long curve's block touches otherwise.
    """
    u = (t - lo[cid]) * scale[cid]
    np.minimum(u, float(n_leaf), out=u)
    first_knots, last_knots = ends
    u[first_knots] = 0.0
    u[last_knots] = float(n_leaf)
    u0, u1 = u[:-1], u[1:]
    same = cid[:-1] == cid[1:]
    leaf = np.minimum(np.floor(u0), n_leaf - 1.0)
    cross = same & (u1 > leaf + 1.0)
    whole = same & ~cross
    # bins: n_leaf + 1 per curve; the step from a curve to the next goes to the extra
    # bin, so every leaf sums exactly the pieces it would sum for the curve alone
    stride = n_leaf + 1
    slot = leaf.astype(np.int64)
    slot[~same] = n_leaf
    gleaf = cid[:-1] * stride + slot
    parts = _cut_at_edges(u0, u1, leaf, cross, cols)
    extra_keys = None if parts is None else cid[parts[0]] * stride + parts[1].astype(np.int64)
    if whole_curves:
        first, bins = 0, (int(cid[-1]) + 1) * stride
    else:  # keys are non-decreasing: sum only over the leaves this block touches
        first = int(gleaf[0])
        last = int(gleaf[-1]) if extra_keys is None else max(int(gleaf[-1]), int(extra_keys[-1]))
        bins = last - first + 1
    sums = _part_sums(np.where(whole, u0, 0.0), np.where(whole, u1, 0.0),
                      [c[:-1] for c in cols], [c[1:] for c in cols], leaf, gleaf - first, bins,
                      degree)
    if parts is not None:
        _, k, lft, rgt, q_l, q_r = parts
        extra = _part_sums(lft, rgt, q_l, q_r, k, extra_keys - first, bins, degree)
        sums = [x + y for x, y in zip(sums, extra, strict=True)]
    if whole_curves:  # drop the extra bins
        return 0, [x.reshape(-1, stride)[:, :n_leaf].ravel() for x in sums]
    return first, sums


def _cut_at_edges(u0: np.ndarray, u1: np.ndarray, leaf: np.ndarray, cross: np.ndarray,
                  cols: list[np.ndarray]) -> tuple[np.ndarray, ...] | None:
    """The pieces over leaf edges cut into one sub-piece per leaf they touch.

    Returns (piece index, leaf, left, right, values at left, values at right) of
    the sub-pieces in order (values interpolated, exact at the piece's own ends),
    or None when no piece crosses an edge.
    """
    at = np.flatnonzero(cross)
    if not at.size:
        return None
    a, b = u0[at], u1[at]
    k0 = leaf[at]
    parts = (np.ceil(b) - k0).astype(np.int64)
    rep = np.repeat(np.arange(at.size), parts)
    k = k0[rep] + (np.arange(rep.size) - np.repeat(np.cumsum(parts) - parts, parts))
    a, b = a[rep], b[rep]
    lft = np.maximum(a, k)
    rgt = np.minimum(b, k + 1.0)
    at = at[rep]
    q_l, q_r = [], []
    for col in cols:
        v0, v1 = col[at], col[at + 1]
        slope = (v1 - v0) / (b - a)
        q_l.append(np.where(lft == a, v0, v0 + slope * (lft - a)))
        q_r.append(np.where(rgt == b, v1, v0 + slope * (rgt - a)))
    return at, k, lft, rgt, q_l, q_r


def _leaf_sums(t: np.ndarray, values: np.ndarray, offsets: np.ndarray, lo: np.ndarray,
               width: np.ndarray, n_leaf: int,
               degree: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Centring means (C, n) and per leaf: μ_k = ∫(q − mean)·s^k dt (C, L, n), ∫‖q − mean‖² dt."""
    n_curves, n = offsets.size - 1, values.shape[1]
    m = degree + 1
    acc = [np.zeros(n_curves * n_leaf) for _ in range(m * n + 1)]
    mean = np.empty((n_curves, n))
    scale = n_leaf / width
    for c0, c1, r0, r1 in _blocks(offsets):
        whole = int(offsets[c0]) == r0 and int(offsets[c1]) == r1
        if whole:
            local = offsets[c0 : c1 + 1] - r0
            mean[c0:c1] = np.add.reduceat(values[r0:r1], local[:-1], axis=0) / np.diff(local)[
                :, None]
            cid = np.repeat(np.arange(c1 - c0), np.diff(local))
            ends = (local[:-1], local[1:] - 1)
        else:  # a block of one long curve
            if r0 == int(offsets[c0]):
                a, b = int(offsets[c0]), int(offsets[c0 + 1])
                mean[c0] = np.add.reduceat(values[a:b], [0], axis=0)[0] / (b - a)
            cid = np.zeros(r1 - r0, dtype=np.int64)
            ends = (np.array([0] if r0 == int(offsets[c0]) else [], dtype=np.int64),
                    np.array([r1 - r0 - 1] if r1 == int(offsets[c1]) else [], dtype=np.int64))
        cols = [values[r0:r1, j] - mean[c0:c1, j][cid] for j in range(n)]
        first, sums = _block_sums(t[r0:r1], cols, cid, lo[c0:c1], scale[c0:c1], n_leaf, degree,
                                  ends, whole)
        at = c0 * n_leaf + first
        for total, part in zip(acc, sums, strict=True):
            total[at : at + part.size] += part
    factor = np.repeat(width / n_leaf, n_leaf)
    mu = [np.stack([acc[k * n + j] * factor for j in range(n)], axis=1).reshape(
        n_curves, n_leaf, n) for k in range(m)]
    return mu, (acc[-1] * factor).reshape(n_curves, n_leaf), mean


class DyadicForest:
    """Least-squares fits of every curve of a batch on all its dyadic segments.

    Attributes:
        lo, hi: (C,) each curve's domain.
        degree, m, n: local polynomial degree, m = degree + 1, value columns.
        max_level: the finest level J.
        mean: (C, n) the centring means.
        res2: per level j, (C, 2^j) squared residuals of the segment fits.
        coef: per level j, (C, 2^j, m, n) orthonormal-Legendre coefficients.
        level_dist: (C, J + 1) dist₂ of the level-j fit to the curve.
    """

    def __init__(self, t: np.ndarray, values: np.ndarray, offsets: np.ndarray, degree: int,
                 max_level: int) -> None:
        """Build the forest of the curves t[offsets[c]:offsets[c+1]] (domain: first to last t).

        Args:
            t: (P,) times, non-decreasing within a curve (duplicates encode jumps).
            values: (P, n) samples.
            offsets: (C + 1,) curve boundaries.
            degree: local polynomial degree.
            max_level: finest level J.
        """
        self.lo = t[offsets[:-1]]
        self.hi = t[offsets[1:] - 1]
        self.degree = int(degree)
        self.m = self.degree + 1
        self.n = values.shape[1]
        self.max_level = int(max_level)
        n_leaf, m, n = 2**self.max_level, self.m, self.n
        width = self.hi - self.lo
        mu, sq, self.mean = _leaf_sums(t, values, offsets, self.lo, width, n_leaf, self.degree)
        shift_left, shift_right, leg, norm = tree_matrices(m)
        self.res2: list[np.ndarray] = [np.empty(0)] * (self.max_level + 1)
        self.coef: list[np.ndarray] = [np.empty(0)] * (self.max_level + 1)
        for j in range(self.max_level, -1, -1):
            root = np.sqrt(width / 2**j)[:, None, None]
            c = _combine(leg, mu)
            err = sq
            for ell in range(m):
                c[ell] = c[ell] * (norm[ell] / root)
                for col in range(n):
                    err = err - c[ell][:, :, col] * c[ell][:, :, col]
            self.res2[j] = np.maximum(err, 0.0)
            c[0] = c[0] + self.mean[:, None, :] * root
            self.coef[j] = np.stack(c, axis=2)
            if j:
                lft = [part[:, 0::2, :] for part in mu]
                rgt = [part[:, 1::2, :] for part in mu]
                mu = [a + b for a, b in zip(_combine(shift_left, lft), _combine(shift_right, rgt),
                                            strict=True)]
                sq = sq[:, 0::2] + sq[:, 1::2]
        self.level_dist = np.sqrt(np.stack([r.sum(axis=1) for r in self.res2], axis=1))

    def __len__(self) -> int:
        return int(self.lo.size)

    def segment_edges(self, depth: np.ndarray, index: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Left edges of dyadic segments (depth, index) of curves `rows` (all arrays alike)."""
        width = self.hi[rows] - self.lo[rows]
        return self.lo[rows] + width * (index / np.exp2(depth))
