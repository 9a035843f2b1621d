"""The noise generator of a release: ChaCha20 keyed by the ledger's 256-bit HMAC seed.

A release draws each user's noise from ``np.random.Generator(ChaCha(key=seed))``
where ``seed = HMAC-SHA256(noise key, (release_id, user_id))`` (`ledger.keys.noise_seed`).
The bit stream is the ChaCha20 keystream (20 rounds; key = the seed's 32
little-endian bytes, block counter and nonce starting at 0): the same bytes as
RFC 8439's block function, checked against OpenSSL in
tests/privacy/test_keyed_generator.py. numpy's distributions (normal, gamma,
Laplace, uniform) consume it unchanged, so a rerun reproduces every draw
byte for byte.

Why not PCG64: PCG64 is a statistical generator, not a cryptographic one; its
state can be reconstructed from enough of its outputs. A user (or anyone who
knows one of a user's curves) sees that curve's noise exactly, and every later
draw of the same generator would follow from it: the noise of the user's other
curves in the release, whose values it was meant to hide. ChaCha20 is a stream
cipher: outputs reveal nothing about other outputs without the key.

This lives in `tasks/` (it adapts the ledger's seed to the mechanisms' injected
``np.random.Generator``); `mechanisms/` stays numpy/scipy only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from randomgen import ChaCha

__all__ = ["SEED_BITS", "lent_generators", "rekey", "release_generator"]

#: Bits of the HMAC-SHA256 noise seed, used whole as the ChaCha20 key.
SEED_BITS = 256


def release_generator(seed: int) -> np.random.Generator:
    """The noise generator for one (release, user): ChaCha20 keyed by `seed`.

    Privacy: every draw is a deterministic function of the secret key and the
    (release, user) pair, so a retry or rerun reproduces it and no second,
    uncharged draw can leave; without the key the draws are unpredictable
    (ChaCha20 keystream). Costs nothing by itself.

    Args:
        seed: the 256-bit noise seed from `Ledger.noise_seed` (0 <= seed < 2^256).

    Returns:
        A numpy Generator over the ChaCha20 keystream of key `seed`.

    Raises:
        ValueError: `seed` is not an integer in [0, 2^256).
    """
    _check_seed(seed)
    return np.random.Generator(ChaCha(key=seed, counter=0, rounds=20))


def rekey(generator: np.random.Generator, seed: int) -> np.random.Generator:
    """Reset a ChaCha generator in place to the start of key `seed`'s 20-round keystream.

    Afterwards it draws exactly what ``release_generator(seed)`` draws: its
    whole state is replaced (key, 20 rounds, block counter 0, and an empty
    block, which the generator computes from the key at its first draw), so
    nothing of the previous key's keystream remains (tests/tasks/test_stream_draw.py
    compares every re-keyed state and draw with a fresh generator's, and
    tests/privacy/test_golden_draws.py pins the draws). A chunk of streams
    draws each stream's noise through one object this way, at a third of the
    cost of building a bit generator. Privacy: as `release_generator` for the
    new key. Costs nothing.

    Args:
        generator: a generator over a `randomgen.ChaCha` bit generator.
        seed: the new 256-bit key (0 <= seed < 2^256).

    Returns:
        `generator`, re-keyed.

    Raises:
        ValueError: `seed` is not an integer in [0, 2^256), or `generator` is
            not over a ChaCha bit generator.
    """
    _check_seed(seed)
    bits = generator.bit_generator
    if not isinstance(bits, ChaCha):
        raise ValueError("only a generator over ChaCha (release_generator) can be re-keyed")
    words = np.frombuffer(seed.to_bytes(32, "little"), dtype="<u4").astype(np.uint32)
    bits.state = {"bit_generator": _CHACHA, "state": {
        "block": np.zeros(16, dtype=np.uint32), "keysetup": words,
        "ctr": np.zeros(2, dtype=np.uint64), "rounds": 20}}
    return generator


_CHACHA = "randomgen.chacha.ChaCha"

# Generators returned by `lent_generators`, re-keyed before every loan. Building
# a ChaCha bit generator costs ~30 us and an os.urandom call (randomgen seeds
# it before the key replaces the seed): the call gives up the GIL, so beside
# another busy thread each user's generator waited a switch interval (28 % of a
# curve chunk task's samples at 5 x 10^4 users, benchmarks/results/floor.md).
_FREE: list[np.random.Generator] = []
_FREE_LOCK = threading.Lock()
#: Most generators kept between loans (about 1 KB each).
POOL_LIMIT = 1 << 16


@contextmanager
def lent_generators(seeds: list[int]) -> Iterator[list[np.random.Generator]]:
    """One generator per seed, each drawing exactly what ``release_generator(seed)`` draws.

    The generators are lent for the ``with`` block: they are objects of earlier
    loans re-keyed (`rekey`: their whole state replaced) or new ones, never
    shared with another loan while this one lasts (two threads get disjoint
    objects), and they go back to the pool when the block ends, however it
    ends. Nothing may keep one past the block. Privacy: as `release_generator`
    for each seed. Costs nothing.

    Args:
        seeds: 256-bit noise seeds (0 <= seed < 2^256), one per generator wanted.

    Yields:
        The generators, in the order of `seeds`.

    Raises:
        ValueError: a seed is not an integer in [0, 2^256).
    """
    for seed in seeds:
        _check_seed(seed)
    with _FREE_LOCK:
        reused = _FREE[max(len(_FREE) - len(seeds), 0):]
        del _FREE[len(_FREE) - len(reused):]
    lent = [rekey(gen, seed) for gen, seed in zip(reused, seeds, strict=False)]
    lent += [release_generator(seed) for seed in seeds[len(lent):]]
    try:
        yield lent
    finally:
        with _FREE_LOCK:
            _FREE.extend(lent[:max(POOL_LIMIT - len(_FREE), 0)])


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**SEED_BITS:
        raise ValueError("a noise seed must be an integer in [0, 2^256)")
