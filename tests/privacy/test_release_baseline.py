"""The LY23 point baseline through the release task, against the ledger's amount.

The released segments are the linear interpolation of the k noisy points
(orthonormal Legendre degree 1 per segment), so each point y_i is read back
from them; y_i − q(t_i) is the point's noise, SLap(n)·k/ε (GP) or
N(0, I_n)/√(2ρ/k) (CGP), with ε (ρ) the ledger's ``points`` amount and k the
public number of points. KS of the per-point noise norms (Gamma(n, k/ε) or
chi(n)·√(k/(2ρ))) at α = 1e-6 over 300 curves × 12 points; per-point noise at
ε instead of ε/k is a factor-k scale error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from laws import ALPHA, ks_pvalue, norm_cdf, pl_values
from release_path import release_curves

K = 12
T = np.linspace(0.0, 44.0, 45)

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("baseline",)


@pytest.mark.parametrize("notion,amount", [("gp", "3"), ("cgp", "2")])
def test_baseline_point_noise_law(tmp_path, notion, amount):
    shape = np.c_[20 * np.sin(T / 5.0), T - 10.0]
    curves = {(f"u{u:03d}", f"c{c}"): (T, shape) for u in range(100) for c in range(3)}
    rel = release_curves(tmp_path, "baseline", notion, amount, {"k": K}, curves)
    u = []
    for user, curve in rel.curve_keys():
        seg = rel.segments_of(user, curve)
        assert len(seg) == K - 1
        a, b = seg["t_start"].to_numpy(), seg["t_end"].to_numpy()
        times = np.r_[a, b[-1]]
        coef = np.stack([np.asarray(c).reshape(2, 2) for c in seg["coefficients"]])
        length = (b - a)[:, None]
        mid, half = coef[:, 0] / np.sqrt(length), coef[:, 1] / np.sqrt(length / 3.0)
        points = np.r_[mid - half, (mid + half)[-1:]]  # y_i from the left ends, y_k from the last
        assert np.allclose((mid + half)[:-1], (mid - half)[1:], atol=1e-6)  # continuous
        noise = points - pl_values(T, shape, times)
        per_point = float(rel.recorded(user, curve, "points")) / (len(times))
        dist = norm_cdf(notion, 2, per_point)
        u.extend(dist.cdf(np.linalg.norm(noise, axis=1)))
    assert ks_pvalue(u, "uniform") > ALPHA
    assert math.isclose(len(u), 300 * K)
