"""Conservative floats: no sampler ever gets less noise than the ledger's exact amount says.

The ledger charges exact rationals; the samplers run in floating point. Every
float noise scale must be >= the exact scale of the step it is charged for
(Δ/ε, 3K/ε for SVT, Δ/√(2ρ) under CGP) and every float budget a sampler sees
must be <= its exact share. Exact values here are computed with Fractions, and
√ comparisons are done squared (s ≥ Δ/√(2ρ) ⟺ s²·2ρ ≥ Δ²), never in floats.

Budgets are random exact rationals (Hypothesis), including the decimal
budgets users type (0.1, 0.3, 1.7), whose quarters, sixteenths and k-ths are
not binary fractions: a scale computed as ``1/float(ε/k)`` rounds below the
exact one for a sizable share of them.
"""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mechanisms.curves.baseline as baseline_module
import mechanisms.curves.segment as segment_module
import mechanisms.curves.select as select_module
from benchmarks.streams.baselines import laplace_release, lbd_release
from benchmarks.streams.baselines import sw_release as release_stream
from mechanisms.cost import float_at_most, gaussian_scale, laplace_scale, sqrt_at_most
from mechanisms.curves import (
    baseline_points,
    noise_scale,
    privfuncseg,
    privfuncseg_unbounded,
    privfuncselect,
    project_and_privatize,
    svt,
)
from mechanisms.curves._budget import svt_epsilon
from mechanisms.discrete_gaussian import lattice_step

# the package re-exports a function of the same name, so fetch the module itself
pp_module = importlib.import_module("mechanisms.curves.project_and_privatize")

# exact budgets: random rationals, and decimals as a user types them
_rationals = st.builds(Fraction, st.integers(1, 10**7), st.integers(1, 10**7))
_decimals = st.builds(lambda k, e: Fraction(k, 10**e), st.integers(1, 10**4), st.integers(0, 4))
BUDGETS = st.one_of(_rationals, _decimals)
MECH = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _laplace_ok(scale: float, sensitivity: Fraction, eps: Fraction) -> bool:
    return Fraction(scale) >= sensitivity / eps


def _gauss_ok(scale: float, sensitivity: Fraction, rho: Fraction) -> bool:
    return Fraction(scale) ** 2 * 2 * rho >= sensitivity**2


def _exact_scale_ok(notion: str, scale: float, amount: Fraction, sensitivity=Fraction(1)):
    return (_laplace_ok(scale, sensitivity, amount) if notion == "gp"
            else _gauss_ok(scale, sensitivity, amount))


class RecordingGenerator(np.random.Generator):
    """A numpy Generator that records the scale of every Laplace and normal draw.

    A call with an array of scales (one per draw) records each of them.
    """

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.PCG64(seed))
        self.laplace_scales: list[float] = []
        self.laplace_draws: list[np.ndarray] = []
        self.normal_scales: list[float] = []

    def laplace(self, loc=0.0, scale=1.0, size=None):  # noqa: D102
        self.laplace_scales.extend(np.ravel(np.asarray(scale, dtype=float)).tolist())
        out = super().laplace(loc, scale, size)
        self.laplace_draws.append(np.asarray(out))
        return out

    def normal(self, loc=0.0, scale=1.0, size=None):  # noqa: D102
        self.normal_scales.extend(np.ravel(np.asarray(scale, dtype=float)).tolist())
        return super().normal(loc, scale, size)


class ScaleSpy:
    """Records every (notion, budget, returned scale) of `noise_scale` in given modules."""

    def __init__(self, monkeypatch, *modules) -> None:
        self.calls: list[tuple[str, object, float]] = []

        def spy(notion, budget):
            s = noise_scale(notion, budget)
            self.calls.append((notion, budget, s))
            return s

        for module in modules:
            monkeypatch.setattr(module, "noise_scale", spy)

    @property
    def scales(self) -> list[float]:
        return [s for _, _, s in self.calls]


def _curve(n=120, seed=0):
    rng = np.random.default_rng(seed)
    t = np.linspace(10.0, 60.0, n)
    return t, np.cumsum(rng.standard_normal((n, 2)), axis=0) * 5


# -- the shared conversions ---------------------------------------------------------

@given(BUDGETS, st.integers(1, 64))
def test_laplace_scale_is_the_smallest_float_at_least_exact(eps, sens):
    s = laplace_scale(sens, eps)
    assert _laplace_ok(s, Fraction(sens), eps)
    assert not _laplace_ok(math.nextafter(s, 0.0), Fraction(sens), eps)


@given(BUDGETS, st.integers(1, 64))
def test_gaussian_scale_is_at_least_exact_and_tight(rho, sens):
    s = gaussian_scale(sens, rho)
    assert _gauss_ok(s, Fraction(sens), rho)
    # tight: a few ulps below is already too small
    assert not _gauss_ok(s * (1 - 2**-50), Fraction(sens), rho)


@given(BUDGETS)
def test_sqrt_and_float_at_most_never_exceed(x):
    f = float_at_most(x)
    assert Fraction(f) <= x < Fraction(math.nextafter(f, math.inf))
    r = sqrt_at_most(x)
    assert Fraction(r) ** 2 <= x < Fraction(math.nextafter(r, math.inf)) ** 2


@given(BUDGETS, st.sampled_from(["gp", "cgp"]))
def test_noise_scale_at_least_exact_for_exact_and_float_budgets(amount, notion):
    assert _exact_scale_ok(notion, noise_scale(notion, amount), amount)
    # a float budget is read as its exact binary value (float_at_most keeps it <= amount)
    assert _exact_scale_ok(notion, noise_scale(notion, float_at_most(amount)), amount)


@given(BUDGETS, st.sampled_from(["gp", "cgp"]))
def test_svt_epsilon_never_above_the_exact_step(amount, notion):
    e = svt_epsilon(notion, amount)
    if notion == "gp":
        assert Fraction(e) <= amount
    else:
        assert Fraction(e) ** 2 <= 2 * amount


@given(BUDGETS, st.sampled_from([1, 2, Fraction(3, 2)]))
def test_svt_laplace_scales_at_least_3k_over_eps(amount, k):
    eps = float_at_most(amount)
    rng = RecordingGenerator(1)
    svt([0.0, 0.0, 1e9], threshold=5.0, epsilon=eps, sensitivity=float(k), rng=rng)
    assert rng.laplace_scales
    assert all(_laplace_ok(s, 3 * Fraction(k), amount) for s in rng.laplace_scales)


# -- each mechanism, run on an exact budget -------------------------------------------

@MECH
@given(BUDGETS, st.sampled_from(["gp", "cgp"]))
def test_project_and_privatize_scale(monkeypatch, amount, notion):
    spy = ScaleSpy(monkeypatch, pp_module)
    t, v = _curve()
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount, "noise": "gaussian"}
    for basis, opts in (("legendre", {"degree": 3}), ("monomial", {"degree": 2})):
        spy.calls.clear()
        f = project_and_privatize(t, v, basis, rng=np.random.default_rng(0), **opts, **kw)
        assert len(spy.calls) == 1
        assert _exact_scale_ok(notion, spy.scales[0], amount)
        assert Fraction(f.noise_budget) <= amount


@given(BUDGETS)
def test_lattice_variance_at_least_the_exact_one(amount):
    # the exact sampler (CGP default): γ a power of two, σ_Z in (2^19, 2^20], and the
    # released variance γ²σ_Z² is κ/(2ρ) >= 1/(2ρ), exactly, for the charged ρ
    gamma, sigma2_z = lattice_step(amount)
    g = Fraction(gamma)
    assert g.numerator == 1 or g.denominator == 1
    assert (g.numerator * g.denominator).bit_count() == 1
    assert 2**38 < sigma2_z <= 2**40
    assert g * g * sigma2_z >= 1 / (2 * Fraction(amount))


@MECH
@given(BUDGETS, st.sampled_from(["gp", "cgp"]), st.integers(2, 12))
def test_baseline_per_point_scale(monkeypatch, amount, notion, k):
    spy = ScaleSpy(monkeypatch, baseline_module)
    t, v = _curve()
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount, "noise": "gaussian"}
    f = baseline_points(t, v, k, rng=np.random.default_rng(0), **kw)
    assert len(spy.calls) == 1
    assert _exact_scale_ok(notion, spy.scales[0], amount / k)
    assert Fraction(f.noise_budget) <= amount / k


@MECH
@given(BUDGETS, st.sampled_from(["gp", "cgp"]))
def test_privfuncselect_scales(monkeypatch, amount, notion):
    spy = ScaleSpy(monkeypatch, select_module, pp_module)
    t, v = _curve()
    rng = RecordingGenerator(0)
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount, "noise": "gaussian"}
    f = privfuncselect(t, v, rng=rng, max_terms=8, **kw)
    quarter = amount / 4
    assert len(spy.calls) >= 2  # lines 2 and 6
    assert all(_exact_scale_ok(notion, s, quarter) for s in spy.scales)
    # both SVTs: Lap(3/ε_s) with ε_s = ε/4, or √(2ρ/4) under CGP (one draw call each)
    assert len(rng.laplace_scales) >= 2
    svt_sens = Fraction(3)
    assert all(_exact_scale_ok(notion, s, quarter, svt_sens) for s in rng.laplace_scales)
    assert Fraction(f.noise_budget) <= amount - 3 * quarter


@MECH
@given(BUDGETS, st.sampled_from(["gp", "cgp"]))
def test_privfuncseg_scales(monkeypatch, amount, notion):
    spy = ScaleSpy(monkeypatch, segment_module, pp_module)
    # flat on most of the domain so that ReduceSeg runs (2^k̄ >= 8 needs a generous budget)
    t = np.linspace(0.0, 1000.0, 2001)
    v = np.where(t > 700, 300 * np.sin(t / 4.0), 0.0)
    big = amount * 400
    kw = {"epsilon": big} if notion == "gp" else {"rho": big, "noise": "gaussian"}
    rng = RecordingGenerator(0)
    slot_calls, svt_scales, svt_noise = [], [], []
    real_slots = segment_module.slot_scales
    monkeypatch.setattr(segment_module, "slot_scales",
                        lambda plan: slot_calls.append(real_slots(plan)) or slot_calls[-1])
    real_scale, real_crossing = segment_module.laplace_scale, segment_module.first_crossing
    monkeypatch.setattr(segment_module, "laplace_scale",
                        lambda *a: svt_scales.append(real_scale(*a)) or svt_scales[-1])
    monkeypatch.setattr(segment_module, "first_crossing",
                        lambda q, n, noise, **k: svt_noise.append(noise.copy())
                        or real_crossing(q, n, noise, **k))
    f = privfuncseg(t, v, rng=rng, **kw)
    steps = {i.step: i.amount for i in f.cost.items}
    final = steps["project"]
    assert Fraction(f.noise_budget) <= final
    # the last noise_scale call is the final projection's
    assert _exact_scale_ok(notion, spy.scales[-1], final)
    assert any(b == final for _, b, _ in spy.calls)
    # documented draw order (mechanisms/curves/segment.py): first the SVT's slots, then
    # the ReduceSeg check slots, standard draws times `reduce_seg.slot_scales` (4 parts,
    # breadth-first, level by level). GP draws both as one standard Laplace block and
    # scales the SVT's slots after; CGP draws the SVT's slots at their scale.
    quarter = big / 4
    top = f.diagnostics["max_level"]
    assert len(svt_scales) == 1 and _exact_scale_ok(notion, svt_scales[0], quarter, Fraction(3))
    if notion == "gp":
        assert rng.laplace_scales[0] == 1.0
        assert rng.laplace_draws[0].size == top + 2 + 4 * 15
    else:
        assert rng.laplace_scales[0] == svt_scales[0]
    # the SVT ran on exactly these draws times the checked scale
    applied = svt_noise[0][0, : top + 2]
    if notion == "gp":
        assert np.array_equal(applied, rng.laplace_draws[0][: top + 2] * svt_scales[0])
    else:
        assert np.array_equal(applied, rng.laplace_draws[0][: top + 2])
    slots = np.concatenate(slot_calls)
    assert slots.size == 15  # one root's slots; the 4 parts use the same
    for level in range(1, 5):  # slot 2^(l-1) - 1 + i; each check spends (ε/16)/2^(l-1)/2^l
        charge = big / 16 / 2 ** (level - 1) / 2**level
        for s in slots[2 ** (level - 1) - 1: 2**level - 1]:
            assert _exact_scale_ok(notion, float(s), charge)
    if f.diagnostics["reduce_seg_ran"]:
        assert 0 < steps["reduce_seg"] <= big / 4


@MECH
@given(BUDGETS, st.sampled_from(["gp", "cgp"]))
def test_unbounded_domain_svt_scale(amount, notion):
    t, v = _curve()
    rng = RecordingGenerator(0)
    kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
    privfuncseg_unbounded(t, v, rng=rng, **kw)
    svt_share = amount / 4
    # the domain SVT runs first: one call for its threshold and query slots, K = 2
    first = rng.laplace_scales[:1]
    assert all(_exact_scale_ok(notion, s, svt_share, Fraction(6)) for s in first)


@MECH
@given(BUDGETS.filter(lambda e: e <= 500), st.integers(1, 30))
def test_stream_samplers_never_above_their_share(eps, w):
    x = np.linspace(0.0, 1.0, 50)
    rng = RecordingGenerator(0)
    rel = laplace_release(x, epsilon=eps, w=w, rng=rng)
    assert all(_laplace_ok(s, Fraction(1), eps / w) for s in rng.laplace_scales)
    for release in (release_stream(x, epsilon=eps, w=w, rng=np.random.default_rng(0)),
                    lbd_release(x, epsilon=eps, w=w, rng=np.random.default_rng(0)), rel):
        per_step = release.cost.per_step()
        for t, used in enumerate(release.epsilon_per_step):
            assert Fraction(float(used)) <= per_step[t]


@pytest.mark.parametrize("text", ["0.1", "0.3", "1.7", "0.7", "2.9"])
def test_typed_decimals_quarter_and_sixteenth_are_conservative(text):
    """The budgets of the issue: the float of ε/4 or ε/16 can round above the exact share."""
    amount = Fraction(text)
    for share in (amount / 4, amount / 16, amount / 3, amount / 10):
        assert _laplace_ok(noise_scale("gp", share), Fraction(1), share)
        assert _gauss_ok(noise_scale("cgp", share), Fraction(1), share)
