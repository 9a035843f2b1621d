"""Evaluating many piecewise functions at once (`evaluate_local`) against one
time at a time: the segment is the last edge at or before the time (a time on
an inner edge takes the right segment, times beyond the ends the end
segments), and the value is that segment's basis combination. Times in order
(an output grid) and times in any order take different paths to the segment;
both must agree with the reference and with each other, in bytes.
"""

import bisect

import numpy as np
import pytest

from mechanisms.curves.bases import make_basis
from mechanisms.curves.result import evaluate_local


def _functions(rng, count, m, n):
    """Random piecewise functions: edges, coefficients and their offsets."""
    edges, coefs = [], []
    for _ in range(count):
        k = int(rng.integers(1, 9))
        edges.append(np.sort(rng.uniform(-5, 5, k + 1)) + rng.uniform(-50, 50))
        coefs.append(rng.normal(size=(k, m, n)))
    bp_off = np.cumsum([0] + [e.size for e in edges])
    seg_off = np.cumsum([0] + [c.shape[0] for c in coefs])
    return edges, coefs, np.concatenate(edges), bp_off, np.concatenate(coefs), seg_off


def _times(rng, edges):
    """Sorted times per function: inside, before and after the ends, and on every edge."""
    out = []
    for e in edges:
        count = int(rng.integers(0, 40))
        t = np.concatenate([rng.uniform(e[0] - 2, e[-1] + 2, count), e, e[:1], e[-1:]])
        out.append(np.sort(t))
    return out, np.concatenate(out), np.cumsum([0] + [t.size for t in out])


def _reference(basis, edges, coefs, times, outside):
    rows = []
    for e, c, ts in zip(edges, coefs, times, strict=True):
        for t in ts:
            s = min(max(bisect.bisect_right(list(e), t) - 1, 0), c.shape[0] - 1)
            x = min(max(t, e[0]), e[-1]) if outside in ("clamp", "zero") else t
            phi = basis.values(np.array([x]), e[s], e[s + 1])[0]
            value = phi @ c[s]
            if outside == "zero" and not e[0] <= t <= e[-1]:
                value = np.zeros_like(value)
            rows.append(value)
    return np.array(rows).reshape(-1, coefs[0].shape[2])


@pytest.mark.parametrize("name,degree", [("legendre", 0), ("legendre", 1), ("legendre", 3),
                                         ("monomial", 2)])
@pytest.mark.parametrize("outside", ["clamp", "zero", "basis"])
def test_many_functions_match_one_time_at_a_time(name, degree, outside):
    rng = np.random.default_rng(degree * 7 + len(outside))
    basis = make_basis(name, degree=degree)
    edges, coefs, bp, bp_off, co, seg_off = _functions(rng, 30, basis.m, 2)
    times, t, t_off = _times(rng, edges)
    got = evaluate_local(basis, bp, bp_off, co, seg_off, t, t_off, outside)
    assert np.allclose(got, _reference(basis, edges, coefs, times, outside), rtol=1e-9, atol=1e-9)

    # the same times shuffled within each function: the other path, the same bytes
    order = np.concatenate([rng.permutation(np.arange(a, b))
                            for a, b in zip(t_off[:-1], t_off[1:], strict=True)])
    shuffled = evaluate_local(basis, bp, bp_off, co, seg_off, t[order], t_off, outside)
    assert np.array_equal(shuffled, got[order])


def test_a_time_on_an_inner_edge_takes_the_right_segment():
    basis = make_basis("legendre", degree=0)  # constant c / sqrt(length) on each segment
    edges = np.array([0.0, 1.0, 4.0, 0.0, 2.0])  # two functions: [0,1),[1,4] and [0,2]
    co = np.array([1.0, 2.0, 3.0]).reshape(3, 1, 1)
    t = np.array([0.0, 1.0, 4.0, 9.0, 2.0, 0.0])  # the last function's times out of order
    got = evaluate_local(basis, edges, np.array([0, 3, 5]), co, np.array([0, 2, 3]), t,
                         np.array([0, 4, 6]), "clamp")[:, 0]
    assert np.allclose(got, [1.0, 2 / np.sqrt(3), 2 / np.sqrt(3), 2 / np.sqrt(3),
                             3 / np.sqrt(2), 3 / np.sqrt(2)])


def test_functions_without_times_and_a_single_segment():
    basis = make_basis("legendre", degree=1)
    edges = np.array([0.0, 1.0, 0.0, 3.0, 5.0])
    co = np.arange(12, dtype=float).reshape(3, 2, 2)
    t = np.array([0.5, 4.0])  # no time for the first function
    got = evaluate_local(basis, edges, np.array([0, 2, 5]), co, np.array([0, 1, 3]), t,
                         np.array([0, 0, 2]), "clamp")
    ref = _reference(basis, [edges[2:]], [co[1:]], [t], "clamp")
    assert np.allclose(got, ref)
