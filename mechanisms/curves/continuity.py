"""Continuity post-processing of piecewise functions (spec §1.7; paper Sec. 4.1.2).

The G-orthogonal (i.e. L²) projection of f_ã onto the continuous piecewise
functions of the same segments and local basis:

    minimise ½ yᵀGy − ãᵀGy  s.t.  C y = 0,
    y* = ã − G⁻¹Cᵀ(C G⁻¹ Cᵀ)⁻¹ C ã,

with one row of C per interior breakpoint (and per output coordinate: the
coordinates decouple since G = I_n ⊗ G₀). C G⁻¹ Cᵀ is tridiagonal and is
solved sparsely (scipy.sparse), so thousands to millions of segments are fine.
It is post-processing: it costs no privacy budget.

Utility. The continuous functions C are a subspace of the piecewise space U
and the map is the orthogonal projection P onto C, so P is non-expansive and
P f_a = P_C q: dist₂(f_â, P_C q) ≤ dist₂(f_ã, f_a). Hence the spec's seed
bound dist₂(f_â, f_a) ≤ 2·dist₂(f_ã, f_a) holds whenever f_a is continuous
(in fact with factor 1); when the least-squares fit f_a has jumps it need not
hold, and dist₂(f_â, f_a) ≤ dist₂(f_ã, f_a) + dist₂(P_C q, f_a) instead (both
checked in tests/mechanisms/curves/test_utility.py). The reported noise bound
keeps the spec's conservative factor 2.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy import sparse
from scipy.linalg import cho_factor, cho_solve
from scipy.sparse.linalg import spsolve

from mechanisms.curves.bases import LocalBasis, SincBasis
from mechanisms.curves.result import PrivateFunction
from mechanisms.errors import MechanismParameterError

__all__ = ["continuity_projection", "project_continuous"]


def project_continuous(
    edges: np.ndarray, coefficients: np.ndarray, basis: LocalBasis
) -> np.ndarray:
    """Coefficients of the L² projection onto continuous piecewise functions.

    Post-processing (no privacy cost). Paper Sec. 4.1.2; spec §1.7 (KKT closed
    form, sparse tridiagonal solve).

    Args:
        edges: (k+1,) segment edges.
        coefficients: (k, m, n) coefficients in `basis` per segment.
        basis: the local basis of every segment.

    Returns:
        (k, m, n) coefficients y* of the continuous projection.
    """
    edges = np.asarray(edges, dtype=np.float64)
    a = np.asarray(coefficients, dtype=np.float64)
    k, m, n = a.shape
    if k < 2:
        return a.copy()
    inner = edges[1:-1]
    right_vals = basis.values(inner, edges[:-2], inner)  # segment r at its right end, (k-1, m)
    left_vals = basis.values(inner, inner, edges[2:])  # segment r+1 at its left end
    if basis.orthonormal:
        ginv_right = right_vals
        ginv_left = left_vals
    else:
        ginv_right = np.empty_like(right_vals)
        ginv_left = np.empty_like(left_vals)
        factors = [cho_factor(basis.gram(edges[r], edges[r + 1]), lower=True) for r in range(k)]
        for r in range(k - 1):
            ginv_right[r] = cho_solve(factors[r], right_vals[r])
            ginv_left[r] = cho_solve(factors[r + 1], left_vals[r])
    # C x for x of shape (k, m, n): row r = R_r·x_r − L_r·x_{r+1}
    cx = np.einsum("rm,rmn->rn", right_vals, a[:-1]) - np.einsum("rm,rmn->rn", left_vals, a[1:])
    # M = C G^{-1} C^T: diagonal R_r G_r^{-1} R_r + L_r G_{r+1}^{-1} L_r, off-diagonal
    # between rows r and r+1 (sharing segment r+1): −L_r G_{r+1}^{-1} R_{r+1}.
    diag = np.einsum("rm,rm->r", right_vals, ginv_right) + np.einsum(
        "rm,rm->r", left_vals, ginv_left
    )
    off = -np.einsum("rm,rm->r", left_vals[:-1], ginv_right[1:])
    mat = sparse.diags([off, diag, off], [-1, 0, 1], shape=(k - 1, k - 1), format="csc")
    lam = spsolve(mat, cx)
    lam = np.asarray(lam).reshape(k - 1, n)
    # y = a − G^{-1} Cᵀ λ: segment r gets −G_r^{-1}R_r λ_r (r < k−1) and +G_r^{-1}L_{r−1} λ_{r−1}
    y = a.copy()
    y[:-1] -= ginv_right[:, :, None] * lam[:, None, :]
    y[1:] += ginv_left[:, :, None] * lam[:, None, :]
    return y


def continuity_projection(fn: PrivateFunction) -> PrivateFunction:
    """Return the continuous version of a piecewise PrivateFunction ("PrivFuncSeg (continuous)").

    Post-processing of a private output: costs nothing, keeps the cost
    breakdown, and doubles the reported noise bound (the spec's conservative
    factor; the distance to the continuous least-squares fit P_C q is at most
    the original noise distance, see the module docstring). Paper Sec. 4.1.2;
    spec §1.7.

    Args:
        fn: a piecewise function with a local basis (not sinc).

    Returns:
        A new PrivateFunction with continuous coefficients.
    """
    basis = fn.basis()
    if isinstance(basis, SincBasis):
        raise MechanismParameterError("the continuity projection needs a piecewise local basis")
    y = project_continuous(fn.breakpoints, fn.coefficients, basis)
    diag = dict(fn.diagnostics)
    diag["continuous"] = True
    return replace(fn, coefficients=y, diagnostics=diag, error_factor=2.0 * fn.error_factor)
