"""The compiled leaf sums (`_forest.c`) against the numpy formulation they replaced.

`forest_reference.py` is the numpy code of the dyadic forest's leaf sums as it
was before the kernel (elementwise expressions, `np.add.reduceat` per leaf,
blocks of long curves). The kernel must give the same doubles, bit for bit,
so that a release's bytes do not depend on which ran: every test here
compares with `np.array_equal`, never with a tolerance.
"""

import threading

import forest_reference as reference
import numpy as np
import pytest

from mechanisms.curves import _forest, forest
from mechanisms.curves.forest import DyadicForest


def _batch(rng, count, lo=2, hi=400, jumps=False, sparse=False):
    ts, vs, offsets = [], [], [0]
    for _ in range(count):
        n = int(rng.integers(lo, hi))
        steps = rng.uniform(0.1, 3.0, n)
        if sparse:  # a few huge gaps: pieces over many leaves
            steps[rng.integers(0, n, max(1, n // 20))] *= 10.0 ** rng.uniform(1, 3)
        t = np.cumsum(steps) + rng.uniform(-1e3, 1e3)
        if jumps and n > 3:  # repeated times encode jumps (zero-length pieces)
            at = rng.integers(1, n - 1, max(1, n // 8))
            t[at] = t[at - 1]
        v = np.cumsum(rng.standard_normal((n, 2)), axis=0) * 10.0 ** rng.uniform(-3, 3)
        ts.append(t)
        vs.append(v)
        offsets.append(offsets[-1] + n)
    return np.concatenate(ts), np.concatenate(vs), np.array(offsets)


def _both(t, v, offsets, level, degree):
    lo = t[offsets[:-1]]
    width = t[offsets[1:] - 1] - lo
    ref = reference._leaf_sums(t, v, offsets, lo, width, 2**level, degree)
    got = forest._leaf_sums(t, v, offsets, lo, width, 2**level, degree)
    return ref, got


def _assert_same(ref, got):
    mu_r, sq_r, mean_r = ref
    mu_g, sq_g, mean_g = got
    assert np.array_equal(mean_r, mean_g)
    assert np.array_equal(sq_r, sq_g)
    assert len(mu_r) == len(mu_g)
    for a, b in zip(mu_r, mu_g, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("degree", [0, 1, 2, 3, 6, 14, 16])
@pytest.mark.parametrize("shape", ["plain", "jumps", "sparse"])
def test_kernel_gives_the_reference_doubles(degree, shape):
    # degree 14 and 16 use 8 and 9 Gauss-Legendre nodes: numpy's pairwise sum over
    # the nodes is no longer a plain left-to-right sum there
    rng = np.random.default_rng([degree, len(shape)])
    for _ in range(6):
        t, v, offsets = _batch(rng, int(rng.integers(1, 25)), jumps=shape == "jumps",
                               sparse=shape == "sparse")
        level = int(rng.integers(0, 13))
        _assert_same(*_both(t, v, offsets, level, degree))


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_long_curves_are_summed_in_the_reference_blocks(monkeypatch, block):
    # a curve of more than BLOCK samples is summed block by block: leaves on a block
    # edge add two partial sums, and each block is its own set of reduceat segments
    monkeypatch.setattr(reference, "BLOCK", block)
    monkeypatch.setattr(forest, "BLOCK", block)
    rng = np.random.default_rng(block)
    t, v, offsets = _batch(rng, 5, lo=2, hi=3000, jumps=True)
    for degree in (1, 3):
        for level in (0, 4, 9, 15):
            _assert_same(*_both(t, v, offsets, level, degree))


def test_many_samples_per_leaf_use_the_pairwise_halves():
    # over 129 terms per leaf, numpy's pairwise sum splits in halves: one leaf of
    # 5000 pieces and leaves of ~300
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 1, 5000))
    v = np.cumsum(rng.standard_normal((5000, 3)), axis=0)
    for level in (0, 4):
        _assert_same(*_both(t, v, np.array([0, 5000]), level, 1))


def test_the_forest_is_the_reference_forest():
    # the whole tree on top of the leaf sums: every level's coefficients and residuals
    rng = np.random.default_rng(11)
    t, v, offsets = _batch(rng, 30, jumps=True)
    got = DyadicForest(t, v, offsets, 1, 8)
    ref = _forest_from(reference, t, v, offsets, 1, 8)
    assert np.array_equal(got.mean, ref.mean)
    for level in range(9):
        assert np.array_equal(got.coef[level], ref.coef[level])
        assert np.array_equal(got.res2[level], ref.res2[level])
    assert np.array_equal(got.level_dist, ref.level_dist)


def _forest_from(module, t, v, offsets, degree, level):
    """A DyadicForest whose leaf sums come from `module`."""
    original = forest._leaf_sums
    forest._leaf_sums = module._leaf_sums
    try:
        return DyadicForest(t, v, offsets, degree, level)
    finally:
        forest._leaf_sums = original


def _call(t, v, offsets, n_leaf=4, degree=1, acc=None, mean=None):
    count = offsets.size - 1
    acc = np.zeros(((degree + 1) * v.shape[1] + 1, count * n_leaf)) if acc is None else acc
    mean = np.empty((count, v.shape[1])) if mean is None else mean
    lo = np.zeros(count)
    scale = np.full(count, n_leaf / 9.0)
    empty = np.zeros(0)
    _forest.leaf_sums(t, v, offsets, lo, scale, n_leaf, degree, 2**15, empty, empty, acc, mean)
    return acc, mean


def test_bad_arguments_are_errors_not_crashes():
    t = np.arange(10.0)
    v = np.ones((10, 2))
    offsets = np.array([0, 10])
    _call(t, v, offsets)  # fine
    with pytest.raises(TypeError, match="offsets"):
        _call(t, v, offsets.astype(np.int32))
    with pytest.raises(TypeError, match="values"):
        _call(t, v.astype(np.float32), offsets)
    with pytest.raises(ValueError, match="offsets"):
        _call(t, v, np.array([0, 11]))
    with pytest.raises(ValueError, match="offsets"):
        _call(t, v, np.array([0, 5, 5, 10]))
    with pytest.raises(ValueError, match="shapes"):
        _call(t, v, offsets, acc=np.zeros((4, 4)))
    with pytest.raises(ValueError, match="shapes"):
        _call(t, v, offsets, mean=np.empty((2, 2)))
    with pytest.raises(ValueError, match="contiguous"):
        _call(t, v, offsets, acc=np.zeros((5, 8))[:, ::2])  # not contiguous
    for bad in (np.nan, -np.inf, np.inf):
        tb = t.copy()
        tb[4] = bad
        with pytest.raises(ValueError, match="outside its curve"):
            _call(tb, v, offsets)
    tb = t.copy()
    tb[3], tb[6] = tb[6], tb[3]  # not non-decreasing: falls before the curve's start
    tb[2] = -5.0
    with pytest.raises(ValueError, match="outside its curve"):
        _call(tb, v, offsets)


def test_other_threads_run_while_the_kernel_does():
    # the kernel releases the GIL: threads summing disjoint batches give each its own
    # result, the same as one after the other
    rng = np.random.default_rng(5)
    batches = [_batch(rng, 200, lo=200, hi=600) for _ in range(4)]
    alone = [_both(*b, 6, 1)[1] for b in batches]
    out = [None] * 4

    def work(i):
        out[i] = _both(*batches[i], 6, 1)[1]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for a, b in zip(alone, out, strict=True):
        _assert_same(a, b)
