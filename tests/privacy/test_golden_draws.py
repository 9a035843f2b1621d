"""Released bytes never drift: the generators and samplers draw today what they drew when pinned.

A continued stream redraws its earlier ranges from their seeds, and a rerun of
a release redraws every user's noise: both are only the bytes that were
charged if the same seed gives the same draws on every machine and every
version. numpy promises no stream stability across versions, so the project
pins numpy and randomgen exactly (pyproject.toml) and this test fixes the
first draws of the keyed ChaCha20 generators (`release_generator`,
`stream_rng`), of Square Wave, and of the curve samplers (spherical Laplace,
Gaussian, Laplace, the exact discrete Gaussian).

The digests were recorded with numpy 2.4.6 and randomgen 2.5.1 (the pins).
The ChaCha20 keystream itself is checked against OpenSSL independently
(test_keyed_generator.py); these digests add what numpy's distributions make of
it. Bumping a pin is a deliberate change: re-record the digests in the same
commit, and say in it that a continued stream must then re-emit its earlier
ranges from their published samples.
"""

import hashlib
import importlib.metadata
import re
import tomllib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from mechanisms.curves.samplers import gaussian, laplace, slap
from mechanisms.discrete_gaussian import cgp_lattice, discrete_gaussian
from mechanisms.streams.square_wave import square_wave
from tasks.continuation import stream_rng
from tasks.keyed_rng import release_generator

ROOT = Path(__file__).resolve().parents[2]
SEED = int.from_bytes(hashlib.sha256(b"privpipe golden draws").digest(), "big")


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.mark.parametrize("package", ["numpy", "randomgen"])
def test_the_generators_packages_are_pinned_to_what_is_installed(package):
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d for d in deps if re.match(rf"{package}\b", d)]
    assert len(pins) == 1 and "==" in pins[0], f"{package} must be pinned exactly: {pins}"
    assert pins[0].split("==")[1] == importlib.metadata.version(package), (
        f"{package} {importlib.metadata.version(package)} is installed but {pins[0]} is pinned")


def test_stream_keystream_and_square_wave():
    assert _digest(stream_rng(SEED, "s1").integers(0, 2**63, size=8)) == (
        "d68254230352b34b72cb047627d1c046b179f449b1b737d908aedd14f14de55c")
    x = np.linspace(0, 1, 64)
    assert _digest(square_wave(x, epsilon_per_step=0.5, rng=stream_rng(SEED, "s1"))) == (
        "cad41ccad371883a71a0cf7b622a1506783db6a52eb0c9df807f1f3fa62194e5")


def test_another_stream_id_is_another_keystream():
    a = stream_rng(SEED, "s1").integers(0, 2**63, size=8)
    b = stream_rng(SEED, "s2").integers(0, 2**63, size=8)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("draw, digest", [
    (lambda g: slap(5, rng=g, size=3),
     "723e1618417f122196f6889a00c90fdd1ed53376bdd8843d721e84f37db7cd8d"),
    (lambda g: gaussian(5, rng=g, size=3),
     "c1beb108d47e9578ba7383341736f0472f86fbe1626da8988b0b1dd4a7296fb7"),
    (lambda g: laplace(rng=g, scale=1.5, size=8),
     "82834761ea58195bd3fa2cc063626c9e9bc02c7640d6faeed8f57d19b4e3e40e"),
], ids=["slap", "gaussian", "laplace"])
def test_curve_samplers_first_draws(draw, digest):
    assert _digest(draw(release_generator(SEED))) == digest


def test_discrete_gaussian_first_draws():
    # re-recorded when the sampler was vectorised (coordinates drawn side by side)
    g = release_generator(SEED)
    assert [discrete_gaussian(Fraction(1, 3), Fraction(9, 2), g) for _ in range(8)] == [
        1, -2, 0, -1, 0, 0, 4, -1]


def test_cgp_lattice_first_draws():
    w = np.array([0.1, -2.5, 3.75, 1e-300, 40.0])  # 1e-300: a centre with a huge denominator
    out, gamma = cgp_lattice(w, rho=Fraction(1, 2), rng=release_generator(SEED))
    assert gamma == 2.0**-19  # σ² = κ/(2ρ) = 1 + 2^-60 at ρ = 1/2: the power of two above is 2
    assert _digest(out) == "40816028becd3f6402635a48c30766c92a2ea9aedaa93684037e7e895abcc2da"
