import numpy as np
import pytest

from mechanisms.curves import LegendreBasis, MonomialBasis, project_continuous


def _dense_kkt(edges, a, basis):
    k, m, n = a.shape
    g = np.zeros((k * m, k * m))
    for r in range(k):
        g[r * m:(r + 1) * m, r * m:(r + 1) * m] = basis.gram(edges[r], edges[r + 1])
    c = np.zeros((k - 1, k * m))
    for r in range(k - 1):
        e = edges[r + 1]
        c[r, r * m:(r + 1) * m] = basis.values(np.array([e]), edges[r], e)[0]
        c[r, (r + 1) * m:(r + 2) * m] = -basis.values(np.array([e]), e, edges[r + 2])[0]
    kkt = np.block([[g, c.T], [c, np.zeros((k - 1, k - 1))]])
    out = np.empty_like(a)
    for col in range(n):
        rhs = np.concatenate([g @ a[:, :, col].ravel(), np.zeros(k - 1)])
        out[:, :, col] = np.linalg.solve(kkt, rhs)[: k * m].reshape(k, m)
    return out


@pytest.mark.parametrize("basis", [LegendreBasis(1), LegendreBasis(3), MonomialBasis(2)],
                         ids=["lin", "cubic", "mono"])
def test_matches_dense_kkt_on_10_60(basis):
    rng = np.random.default_rng(0)
    edges = np.sort(np.concatenate([[10.0, 60.0], rng.uniform(10, 60, 6)]))
    a = rng.standard_normal((7, basis.m, 2))
    assert np.allclose(project_continuous(edges, a, basis), _dense_kkt(edges, a, basis),
                       atol=1e-9)


def test_thousands_of_segments_fast_and_continuous():
    basis = LegendreBasis(1)
    k = 20_000
    edges = np.linspace(0.0, 1.0, k + 1)
    a = np.random.default_rng(1).standard_normal((k, 2, 2))
    y = project_continuous(edges, a, basis)
    e = edges[1:-1]
    left = np.einsum("rm,rmn->rn", basis.values(e, edges[:-2], e), y[:-1])
    right = np.einsum("rm,rmn->rn", basis.values(e, e, edges[2:]), y[1:])
    assert np.allclose(left, right, atol=1e-8)
    # idempotent: projecting a continuous function changes nothing
    assert np.allclose(project_continuous(edges, y, basis), y, atol=1e-8)
