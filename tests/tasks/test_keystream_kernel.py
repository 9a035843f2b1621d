"""The C keystream kernel gives every segment the doubles of its keyed ChaCha20 generator.

Two independent references: OpenSSL's ChaCha20 (via `cryptography`; key = the
segment key's 32 little-endian bytes, zero nonce and counter), turned into
doubles by randomgen's rule ((le64 >> 11) * 2^-53, written out here), and
randomgen's ChaCha generator re-keyed per segment with one ``random(out=...)``
per row (`tasks.stream_draw.uniforms_by_generator`, the path the kernel
replaced). Segment lengths cross the kernel's eight-block batches (64 doubles).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from tasks._keystream import fill_uniforms

from tasks.continuation import stream_key
from tasks.stream_draw import _keyed_uniforms, uniforms_by_generator

LENGTHS = [0, 1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 513, 1000, 4099]


def _openssl_uniforms(key: int, n: int) -> np.ndarray:
    stream = Cipher(algorithms.ChaCha20(key.to_bytes(32, "little"), bytes(16)),
                    mode=None).encryptor().update(bytes(8 * n))
    words = np.frombuffer(stream, dtype="<u8")
    return (words >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _segments(lengths, rng):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    bounds = np.stack([offsets[:-1], offsets[1:]], axis=1)
    flat = [(i, SimpleNamespace(seed=int.from_bytes(rng.bytes(32), "big")))
            for i in range(len(lengths))]
    chunk = SimpleNamespace(values=np.zeros(int(offsets[-1])),
                            stream_ids=[f"stream-{i}" for i in range(len(lengths))])
    return chunk, bounds, flat


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_each_segment_gets_its_openssl_keystream_row_after_row(rows):
    chunk, bounds, flat = _segments(LENGTHS, np.random.default_rng(rows))
    u = _keyed_uniforms(chunk, bounds, flat, rows)
    for (lo, hi), (s, g) in zip(bounds.tolist(), flat, strict=True):
        want = _openssl_uniforms(stream_key(g.seed, chunk.stream_ids[s]), rows * (hi - lo))
        got = u[:, lo:hi].reshape(-1)  # row 0's draws, then row 1's, ...
        assert got.view(np.uint64).tolist() == want.view(np.uint64).tolist(), (rows, hi - lo)


@pytest.mark.parametrize("seed", range(4))
def test_the_kernel_equals_the_rekeyed_generator_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.permutation(np.concatenate([LENGTHS, rng.integers(0, 300, 200)]))
    chunk, bounds, flat = _segments(lengths, rng)
    for rows in (1, 2):
        kernel = _keyed_uniforms(chunk, bounds, flat, rows)
        generator = uniforms_by_generator(chunk, bounds, flat, rows)
        assert np.array_equal(kernel.view(np.uint64), generator.view(np.uint64))


def test_the_key_words_are_little_endian_and_every_key_bit_matters():
    u = np.empty((1, 16))
    key = np.zeros((1, 8), dtype=np.uint32)
    fill_uniforms(key, np.array([[0, 16]], dtype=np.int64), u)
    assert np.array_equal(u[0], _openssl_uniforms(0, 16))
    for bit in (0, 31, 255):
        seed = 1 << bit
        words = np.frombuffer(seed.to_bytes(32, "little"), dtype="<u4").reshape(1, 8)
        fill_uniforms(words, np.array([[0, 16]], dtype=np.int64), u)
        assert np.array_equal(u[0], _openssl_uniforms(seed, 16)), bit
        assert not np.any(u[0] == _openssl_uniforms(0, 16))


def test_bad_arguments_are_refused_and_nothing_is_written():
    keys, bounds = np.zeros((2, 8), dtype=np.uint32), np.array([[0, 3], [3, 5]], dtype=np.int64)
    u = np.full((1, 5), -1.0)
    for bad_bounds in ([[0, 3], [3, 6]], [[0, 3], [4, 3]], [[-1, 3], [3, 5]]):
        with pytest.raises(ValueError, match="bounds"):
            fill_uniforms(keys, np.array(bad_bounds, dtype=np.int64), u)
    with pytest.raises(ValueError, match="shapes"):
        fill_uniforms(keys[:1], bounds, u)
    with pytest.raises(TypeError, match="keys"):
        fill_uniforms(keys.astype(np.int64), bounds, u)
    with pytest.raises(TypeError, match="u"):
        fill_uniforms(keys, bounds, u.astype(np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        fill_uniforms(keys, bounds, u[:, ::2])
    assert np.all(u == -1.0)
