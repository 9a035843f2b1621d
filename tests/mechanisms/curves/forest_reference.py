"""The numpy formulation of the dyadic forest's leaf sums: the reference for `_forest.c`.

Until the compiled kernel replaced it, this was `mechanisms/curves/forest.py`'s
`_leaf_sums` (git history: 27ead2c). It is kept here, unchanged, as an
independent statement of the arithmetic the kernel must reproduce bit for bit:
elementwise numpy expressions and `np.add.reduceat` segment sums, block by block.
`tests/mechanisms/curves/test_forest_kernel.py` compares the two for exact equality.
"""

from __future__ import annotations

import numpy as np

from mechanisms.curves._piecewise import gauss_legendre, nodes_for_degree

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
