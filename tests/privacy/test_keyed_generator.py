"""The release's noise generator is the ChaCha20 keystream under the ledger's seed.

* Known-answer check against an independent implementation: the generator's
  raw 64-bit words are the bytes of OpenSSL's ChaCha20 (via `cryptography`)
  with key = the seed's 32 little-endian bytes and a zero nonce/counter, over
  the first 256 KiB (4096 blocks).
* A retried privatize task (same chunk, same seeds) writes byte-identical
  output files; another ledger key gives other noise.
* Lent generators (`lent_generators`: earlier loans' objects re-keyed) draw
  what fresh ones draw, whatever their earlier key and position, and no two
  loans share an object.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from release_path import release_curves

from tasks import keyed_rng
from tasks.keyed_rng import lent_generators, release_generator


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


def _draws(gen: np.random.Generator) -> list[np.ndarray]:
    """A mix of the draws the mechanisms make (32- and 64-bit words, rejection samplers)."""
    return [gen.standard_normal(7), gen.gamma(3.5, size=3), gen.integers(0, 7, 5, np.uint32),
            gen.laplace(0.0, 2.0, 4), gen.random(9), gen.bit_generator.random_raw(3)]


def test_lent_generators_draw_what_fresh_ones_draw():
    seeds = [3, 2**255 + 11, 0, 2**256 - 1]
    with lent_generators([101, 102, 103]) as used:  # objects left mid-block, other keys
        for i, gen in enumerate(used):
            gen.integers(0, 9, 5 + i, np.uint32)
            gen.standard_normal(13 * i + 1)
    for _ in range(2):  # the second loan re-keys objects of the first
        with lent_generators(seeds) as lent:
            got = [_draws(gen) for gen in lent]
        want = [_draws(release_generator(seed)) for seed in seeds]
        for mine, fresh in zip(got, want, strict=True):
            for a, b in zip(mine, fresh, strict=True):
                assert a.tobytes() == b.tobytes()


def test_loans_never_share_a_generator():
    with lent_generators([1, 2]) as outer, lent_generators([3, 4, 5]) as inner:
        assert not {id(g) for g in outer} & {id(g) for g in inner}
    seen: list[set[int]] = []
    start = threading.Barrier(2)

    def borrow() -> None:
        start.wait()
        with lent_generators(list(range(50))) as lent:
            seen.append({id(g) for g in lent})
            start.wait()  # both loans are open at once

    threads = [threading.Thread(target=borrow) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(seen) == 2 and not seen[0] & seen[1]


def test_a_failed_block_returns_its_generators_and_a_bad_seed_lends_nothing():
    with lent_generators([7]):
        pass
    before = len(keyed_rng._FREE)
    with pytest.raises(RuntimeError), lent_generators([8, 9]):
        raise RuntimeError("the mechanism failed")
    assert len(keyed_rng._FREE) == max(before, 2)
    for bad in (-1, 2**256, 1.5, True):
        with pytest.raises(ValueError), lent_generators([5, bad]):
            pass
    assert len(keyed_rng._FREE) == max(before, 2)
