"""The release's noise generator is the ChaCha20 keystream under the ledger's seed.

* Known-answer check against an independent implementation: the generator's
  raw 64-bit words are the bytes of OpenSSL's ChaCha20 (via `cryptography`)
  with key = the seed's 32 little-endian bytes and a zero nonce/counter, over
  the first 256 KiB (4096 blocks).
* A retried privatize task (same chunk, same seeds) writes byte-identical
  output files; another ledger key gives other noise.
"""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from release_path import release_curves

from tasks.keyed_rng import release_generator


@pytest.mark.parametrize("seed", [0, 1, 2**256 - 1, int.from_bytes(bytes(range(32)), "big")])
def test_generator_is_the_chacha20_keystream(seed):
    words = release_generator(seed).bit_generator.random_raw(32_768)
    key = seed.to_bytes(32, "little")
    stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor().update(
        bytes(32_768 * 8))
    assert words.astype("<u8").tobytes() == stream


def test_seed_must_be_a_256_bit_integer():
    for bad in (-1, 2**256, 1.5, True, "7"):
        with pytest.raises(ValueError):
            release_generator(bad)


@pytest.mark.parametrize("mechanism", ["privfuncseg", "project_and_privatize"])
def test_retry_is_byte_identical_and_the_key_matters(tmp_path, mechanism):
    t = np.linspace(0.0, 30.0, 31)
    curves = {(f"u{u}", "c0"): (t, np.c_[np.sin(t / 3 + u), t / 10]) for u in range(20)}
    rel = release_curves(tmp_path / "a", mechanism, "gp", "1", {}, curves, runs=2)
    first, retry = rel.runs
    assert len(first) == len(retry) > 0
    for a, b in zip(first, retry, strict=True):
        assert sorted(a.tables) == sorted(b.tables) == ["curves", "segments", "values"]
        for name in a.tables:
            # byte-identical: the same Arrow buffers
            assert a.tables[name].equals(b.tables[name]), name
    other = release_curves(tmp_path / "b", mechanism, "gp", "1", {}, curves)  # a new key
    mine, theirs = rel.values[["x", "y"]].to_numpy(), other.values[["x", "y"]].to_numpy()
    assert mine.shape == theirs.shape and not np.any(mine == theirs)
