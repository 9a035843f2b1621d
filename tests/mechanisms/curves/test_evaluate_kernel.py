"""The compiled Legendre evaluation (`_evaluate.c`) against the numpy formulation.

`evaluate_columns` evaluates any local basis through its `columns` (numpy);
for the Legendre basis `evaluate_local` runs the kernel instead. Both must give
the same doubles, bit for bit (released values files do not depend on which
ran), for every outside mode, times in order or not, times on edges and
outside the domain.
"""

import numpy as np
import pytest

from mechanisms.curves import _evaluate
from mechanisms.curves.bases import LegendreBasis, MonomialBasis
from mechanisms.curves.result import evaluate_columns, evaluate_local


def _functions(rng, count, degree, n, ordered, on_edges):
    bps, bpo, coefs, sego, ts, to = [], [0], [], [0], [], [0]
    for _ in range(count):
        k = int(rng.integers(1, 40))
        edges = np.unique(rng.uniform(-50, 50, k + 1))
        if edges.size < 2:
            edges = np.array([0.0, 1.0])
        k = edges.size - 1
        bps.append(edges)
        bpo.append(bpo[-1] + k + 1)
        coefs.append(rng.standard_normal((k, degree + 1, n)) * 10.0 ** rng.uniform(-3, 3))
        sego.append(sego[-1] + k)
        times = rng.uniform(-70, 70, int(rng.integers(0, 300)))
        if on_edges and times.size:
            times[: times.size // 3] = edges[rng.integers(0, k + 1, times.size // 3)]
        if ordered:
            times = np.sort(times)
        ts.append(times)
        to.append(to[-1] + times.size)
    return (np.concatenate(bps), np.array(bpo), np.concatenate(coefs), np.array(sego),
            np.concatenate(ts), np.array(to))


@pytest.mark.parametrize("outside", ["clamp", "zero", "basis"])
@pytest.mark.parametrize("degree", [0, 1, 2, 5, 12])
def test_kernel_gives_the_numpy_doubles(outside, degree):
    rng = np.random.default_rng([degree, len(outside)])
    basis = LegendreBasis(degree)
    for ordered in (True, False):
        for on_edges in (True, False):
            args = _functions(rng, int(rng.integers(1, 25)), degree, int(rng.integers(1, 4)),
                              ordered, on_edges)
            got = evaluate_local(basis, *args, outside)
            assert np.array_equal(got, evaluate_columns(basis, *args, outside))


def test_an_edge_time_takes_the_right_segment_and_outside_modes():
    # two segments [0, 1) and [1, 2] with constant pieces 1 and 3 (phi_0 = 1/sqrt(L))
    basis = LegendreBasis(0)
    edges = np.array([0.0, 1.0, 2.0])
    coef = np.array([[[1.0]], [[3.0]]])
    t = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 5.0])
    args = (edges, np.array([0, 3]), coef, np.array([0, 2]), t, np.array([0, 6]))
    assert evaluate_local(basis, *args, "clamp")[:, 0].tolist() == [1, 1, 1, 3, 3, 3]
    assert evaluate_local(basis, *args, "zero")[:, 0].tolist() == [0, 1, 1, 3, 3, 0]
    assert evaluate_local(basis, *args, "basis")[:, 0].tolist() == [1, 1, 1, 3, 3, 3]


def test_other_bases_keep_the_numpy_path():
    rng = np.random.default_rng(2)
    args = _functions(rng, 5, 2, 2, True, False)
    basis = MonomialBasis(2)
    assert np.array_equal(evaluate_local(basis, *args, "clamp"),
                          evaluate_columns(basis, *args, "clamp"))


def _call(t, edges, coef, t_off, bp_off, seg_off, mode=0, out=None):
    out = np.empty((t.size, coef.shape[2])) if out is None else out
    _evaluate.legendre(t, t_off, edges, bp_off, coef, seg_off, mode, out)
    return out


def test_bad_arguments_are_errors_not_crashes():
    edges = np.array([0.0, 1.0, 2.0])
    coef = np.ones((2, 2, 1))
    t = np.linspace(0, 2, 7)
    good = (np.array([0, 7]), np.array([0, 3]), np.array([0, 2]))
    _call(t, edges, coef, *good)
    with pytest.raises(ValueError, match="offsets"):
        _call(t, edges, coef, np.array([0, 8]), good[1], good[2])
    with pytest.raises(ValueError, match="offsets"):
        _call(t, edges, coef, good[0], np.array([0, 4]), good[2])
    with pytest.raises(ValueError, match="offsets"):
        _call(t, edges, coef, good[0], good[1], np.array([0, 1]))  # 2 segments, 1 row
    with pytest.raises(ValueError, match="shapes"):
        _call(t, edges, coef, *good, mode=3)
    with pytest.raises(ValueError, match="shapes"):
        _call(t, edges, coef, *good, out=np.empty((6, 1)))
    with pytest.raises(TypeError, match="t_offsets"):
        _call(t, edges, coef, good[0].astype(np.int32), good[1], good[2])
    for bad in (np.nan, np.inf):
        tb = t.copy()
        tb[3] = bad
        with pytest.raises(ValueError, match="not finite"):
            _call(tb, edges, coef, *good)
