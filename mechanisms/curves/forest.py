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
   otherwise) and ∫‖q‖² dt, summed per leaf. Steps 1 and 2 are the per-sample
   work: they run in C (`_forest.c`), one pass over the samples without the
   GIL, with the exact arithmetic of the numpy formulation they replaced
   (elementwise expressions in the same order, numpy's segment sums; the
   tests compare the two bit for bit). A curve longer than `BLOCK` samples is
   summed in blocks cut at fixed offsets from its own start.
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

try:
    from mechanisms.curves import _forest
except ImportError as err:  # a source tree whose C part was never built
    raise ImportError(
        "privpipe's compiled kernel (mechanisms/curves/_forest.c) is not built: install the "
        "project (`make test` or `make run` do; or `pip install -e .`), which compiles it "
        "with the machine's C compiler") from err

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


#: Pieces per block of a long curve: a curve of more samples is summed in blocks
#: cut every BLOCK pieces from its own first sample (so a curve's sums never
#: depend on its neighbours); shorter curves are summed whole.
BLOCK = 2**15

_NO_NODES = np.zeros(0)


def _leaf_sums(t: np.ndarray, values: np.ndarray, offsets: np.ndarray, lo: np.ndarray,
               width: np.ndarray, n_leaf: int,
               degree: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Centring means (C, n) and per leaf: μ_k = ∫(q − mean)·s^k dt (C, L, n), ∫‖q − mean‖² dt.

    Steps 1-2 of the module docstring run in `_forest.leaf_sums` (C, one pass
    over the samples, without the GIL); the result is in leaf units and is
    scaled to time units here.
    """
    n_curves, n = offsets.size - 1, values.shape[1]
    m = degree + 1
    acc = np.zeros((m * n + 1, n_curves * n_leaf))
    mean = np.empty((n_curves, n))
    x, w = gauss_legendre(nodes_for_degree(m)) if degree >= 2 else (_NO_NODES, _NO_NODES)
    _forest.leaf_sums(np.ascontiguousarray(t, dtype=np.float64),
                      np.ascontiguousarray(values, dtype=np.float64),
                      np.ascontiguousarray(offsets, dtype=np.int64),
                      np.ascontiguousarray(lo, dtype=np.float64),
                      np.ascontiguousarray(n_leaf / width, dtype=np.float64),
                      n_leaf, degree, BLOCK, x, w, acc, mean)
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
