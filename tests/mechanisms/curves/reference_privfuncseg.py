"""A straightforward transcription of PrivFuncSeg (spec §1.8/§1.9) for one curve.

It shares nothing with the batched core but the documented draw order (see
`mechanisms/curves/segment.py`): one ``laplace(0, 1, top + 2 [+ 60])`` call
(W, ν_0..ν_top, then for GP the ReduceSeg slots, four parts of 15 in
breadth-first order), for CGP ``standard_normal(60)``, then the final noise
(under CGP by default the exact lattice sampler `cgp_lattice` at the final ρ,
whose law its own tests check; ``noise="gaussian"`` the float Gaussian).
Least-squares fits and distances come from `least_squares` / `l2_error`
(SubPieces + Gauss-Legendre per segment), not from the dyadic forest.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mechanisms.cost import laplace_scale
from mechanisms.curves import least_squares, noise_scale
from mechanisms.curves._budget import svt_epsilon
from mechanisms.discrete_gaussian import cgp_lattice
from mechanisms.metrics import l2_error

E = math.e / (math.e - 1.0)


def _fit_dist(t, v, degree, edges):
    fit = least_squares(t, v, "legendre", degree=degree, breakpoints=edges)
    return fit, l2_error(t, v, fit)


def _part_dist(t, v, degree, lo, width, depth, index, seg_depth):
    """dist₂ over node (depth, index) of the LS fit on its dyadic segments at seg_depth."""
    a = lo + width * index / 2**depth
    b = lo + width * (index + 1) / 2**depth
    inside = (t > a) & (t < b)
    ends = [np.array([[np.interp(x, t, v[:, j]) for j in range(v.shape[1])]]) for x in (a, b)]
    tt = np.concatenate([[a], t[inside], [b]])
    vv = np.concatenate([ends[0], v[inside], ends[1]])
    k = 2 ** (seg_depth - depth)
    return _fit_dist(tt, vv, degree, a + (b - a) * np.arange(k + 1) / k)[1]


def reference(t, v, *, notion, amount, rng, degree=1, reduce=True, beta=0.1, max_level=20,
              k1=4, margin=True, threshold=0.0, noise=None):
    """Returns (k̄, halted, nodes, cost dict, coefficients, final budget)."""
    amount = Fraction(amount)
    v = np.asarray(v, dtype=float).reshape(len(t), -1)
    m, n = degree + 1, v.shape[1]
    lo, hi = float(t[0]), float(t[-1])
    width = hi - lo
    top = min(max_level, math.ceil(math.log2(len(t))))
    quarter, share = amount / 4, amount / 16
    slots = 15 * 4 if reduce else 0
    z = rng.laplace(0.0, 1.0, top + 2 + (slots if notion == "gp" else 0))
    checks_noise = z[top + 2:] if notion == "gp" else rng.standard_normal(slots)
    # SVT (Algorithm 1 with ε/4; CGP at √(2ρ/4))
    q = float(quarter)
    scale = laplace_scale(3, svt_epsilon(notion, quarter))  # the floats rule: >= 3/ε exactly
    thr = threshold + scale * z[0]
    k_bar, halted = top, False
    for j in range(top + 1):
        edges = lo + width * np.arange(2**j + 1) / 2**j
        dist = _fit_dist(t, v, degree, edges)[1]
        tau = 2**j * m * n / q if notion == "gp" else math.sqrt(2**j * m * n) / math.sqrt(2 * q)
        if tau - dist + scale * z[1 + j] >= thr:
            k_bar, halted = j, True
            break
    spent = Fraction(0)
    ran = reduce and 2**k_bar >= 8
    nodes = [(k_bar, i) for i in range(2**k_bar)]
    if ran:
        nodes = []
        for part in range(4):
            slot = checks_noise[15 * part: 15 * (part + 1)]

            def rs(depth, index, seg_depth, level, sh, rel, pos, slot=slot):
                nonlocal spent
                uniform = [(seg_depth, index * 2 ** (seg_depth - depth) + i)
                           for i in range(2 ** (seg_depth - depth))]
                h = 2 ** (seg_depth - depth)
                if level > k1 or h < 2:
                    return uniform
                d = _part_dist(t, v, degree, lo, width, depth, index, seg_depth - 1)
                s = noise_scale(notion, sh / 2**level)  # Lap(2^l/ε') or √(2^l)/√(2ρ')
                if notion == "gp":
                    tau = (h / 2) * E * m * n / (2 * float(quarter))
                    slack = s * math.log(2**k1 / (beta / 2)) if margin else 0.0
                else:
                    tau = (math.sqrt(h * m * n) - math.sqrt(h * m * n / 2)) / math.sqrt(
                        4 * float(quarter))
                    slack = s * math.sqrt(2 * math.log(2**k1 / (beta / 2))) if margin else 0.0
                spent += sh / 2**level
                if d + s * slot[2**rel - 1 + pos] + slack > tau:
                    return uniform
                if seg_depth - 1 <= depth:
                    return [(depth, index)]
                return (rs(depth + 1, 2 * index, seg_depth - 1, level + 1, sh / 2, rel + 1,
                           2 * pos, slot)
                        + rs(depth + 1, 2 * index + 1, seg_depth - 1, level + 1, sh / 2,
                             rel + 1, 2 * pos + 1, slot))

            nodes += rs(2, part, k_bar, 1, share, 0, 0)
    final = amount - quarter - spent
    cost = {"svt": quarter, "project": final}
    if ran:
        cost["reduce_seg"] = spent
    edges = np.array([lo + width * i / 2**d for d, i in nodes] + [hi])
    fit = least_squares(t, v, "legendre", degree=degree, breakpoints=edges)
    dim = len(nodes) * m * n
    scale = noise_scale(notion, final)
    if notion == "gp":
        g = rng.standard_normal(dim)
        r = rng.gamma(dim, 1.0)
        noise = g / np.sqrt(np.sum(g * g)) * r * scale
    elif noise is None:
        lattice = cgp_lattice(fit.coefficients, rho=final, rng=rng)[0]
        noise = (lattice - fit.coefficients).ravel()
    else:
        noise = rng.standard_normal(dim) * scale
    return k_bar, halted, nodes, cost, fit.coefficients + noise.reshape(fit.coefficients.shape), \
        final
