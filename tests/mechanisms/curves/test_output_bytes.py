"""The bytes of the curve kernels, pinned across versions.

The digests below were computed by the numpy implementation of the dyadic
forest and of the Legendre evaluation (main at 27ead2c, before the C kernels
`_forest.c` and `_evaluate.c` replaced them), on deterministic inputs made
without a random generator or a transcendental function (so they do not
depend on numpy's streams or on the CPU's libm). A change to any double of a
forest (coefficients, residuals, level distances, means, every level) or of an
evaluation (three outside modes) fails this test: a release's output bytes
would change with it, and a resumed release would no longer reproduce what it
already published.
"""

import hashlib

import numpy as np
import pytest

from mechanisms.curves.bases import LegendreBasis
from mechanisms.curves.forest import DyadicForest
from mechanisms.curves.result import evaluate_local

DIGESTS = {
    (0, 6): "051eab803c54c88a52befc3aff48102ee0e9b6143a790afd915c98b86dc0a27d",
    (1, 9): "5a39c2e03fd88c602d0fc4df105424b1a8711ed01b9a44c869a86de4b3e73fae",
    (1, 15): "62ab298fcba2738540cf8e1e472cb89bdf65d093b2d8456698bca1afeb786d92",
    (3, 7): "56910346ad59e33aae6c5ede5af9a1fa5e4a17db1c9ebbff1b9f939e5257b68c",
}


def _inputs():
    """Deterministic curves, no random generator and no transcendental function."""
    ts, vs, offsets = [], [], [0]
    for c in range(40):
        n = 5 + (c * 7919) % 2000
        i = np.arange(n, dtype=np.float64)
        steps = ((i * 31 + c * 17) % 97) / 13.0 + 0.25
        steps[(i % 53) == 7] = 0.0   # repeated times: jumps
        steps[(i % 211) == 5] *= 40  # pieces over many leaves
        t = np.cumsum(steps) + c * 3.5
        x = np.cumsum(((i * 13 + c) % 29) - 14.0) / 7.0
        y = ((i * i + 3 * c) % 101) / 10.0 - 5.0
        ts.append(t)
        vs.append(np.column_stack([x, y]))
        offsets.append(offsets[-1] + n)
    n = 70_000  # one curve longer than a block
    i = np.arange(n, dtype=np.float64)
    ts.append(np.cumsum(((i * 7) % 11) / 5.0 + 0.1))
    vs.append(np.column_stack([((i * 3) % 17) - 8.0, np.cumsum(((i * 5) % 13) - 6.0) / 9.0]))
    offsets.append(offsets[-1] + n)
    return np.concatenate(ts), np.concatenate(vs), np.array(offsets)


@pytest.mark.parametrize(("degree", "level"), sorted(DIGESTS))
def test_forest_and_evaluation_bytes_are_those_of_the_numpy_implementation(degree, level):
    t, v, off = _inputs()
    f = DyadicForest(t, v, off, degree, level)
    h = hashlib.sha256()
    for j in range(level + 1):
        h.update(f.coef[j].tobytes())
        h.update(f.res2[j].tobytes())
    h.update(f.level_dist.tobytes())
    h.update(f.mean.tobytes())
    # the finest level's fits on a grid reaching outside each domain
    k = 2**level
    lo, hi = f.lo, f.hi
    count = lo.size
    edges = lo[:, None] + (hi - lo)[:, None] * (np.arange(k + 1) / k)[None, :]
    coef = f.coef[level].reshape(-1, degree + 1, 2)
    grid = lo[:, None] + (hi - lo)[:, None] * ((np.arange(301) - 20) / 260.0)[None, :]
    for mode in ("clamp", "zero", "basis"):
        values = evaluate_local(LegendreBasis(degree), edges.ravel(),
                                np.arange(count + 1) * (k + 1), coef, np.arange(count + 1) * k,
                                grid.ravel(), np.arange(count + 1) * 301, mode)
        h.update(values.tobytes())
    assert h.hexdigest() == DIGESTS[(degree, level)]
