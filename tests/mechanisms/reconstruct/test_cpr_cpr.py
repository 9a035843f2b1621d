"""CPR end to end: phase grouping, tiling offset, fallback, utility on streams."""

import json

import numpy as np
import pytest

from data import synthetic
from mechanisms import registry
from mechanisms.cost import epsilon_per_step, exact
from mechanisms.errors import MechanismParameterError
from mechanisms.metrics import correlation_distance
from mechanisms.reconstruct import cpr, phase_groups, tile_template
from mechanisms.streams import moving_average


def _sw_reports(x, *, epsilon, w, rng):
    """Square Wave reports at exactly ε/w per step, as a stream release randomizes them."""
    entry = registry.stream("square_wave")
    return entry.run(x, epsilon_per_step=epsilon_per_step(exact(epsilon), w), rng=rng)


def test_phase_groups_reflect_and_wrap_layout():
    y = np.arange(10.0)
    groups, pad = phase_groups(y, 3, padding="reflect")
    padded = np.pad(y, 2, mode="reflect")
    assert pad == 2 and groups.shape == (3, padded.size // 3)
    for i in range(3):
        np.testing.assert_array_equal(groups[i], padded[i::3][: groups.shape[1]])
    g_none, pad0 = phase_groups(y, 3, padding="none")
    assert pad0 == 0
    np.testing.assert_array_equal(g_none[1], [1.0, 4.0, 7.0])
    with pytest.raises(MechanismParameterError):
        phase_groups(y, 3, padding="edge")


def test_tiling_offset_realigns_phases():
    # padded index of original t is t + p, so its phase is (t + p) mod T
    x = np.tile([0.1, 0.5, 0.9, 0.3], 6)
    groups, pad = phase_groups(x, 4, padding="wrap")
    template = groups.mean(axis=1)  # wrap padding keeps phases exact
    np.testing.assert_allclose(tile_template(template, x.size, pad), x)
    assert not np.allclose(tile_template(template, x.size, 0), x)


@pytest.mark.parametrize("padding", ["reflect", "wrap", "none"])
def test_cpr_recovers_template_at_generous_budget(padding):
    cycle = np.array([0.1, 0.2, 0.8, 0.95, 0.6, 0.3, 0.15, 0.5])
    x = np.tile(cycle, 200)
    y = _sw_reports(x, epsilon=30, w=5, rng=np.random.default_rng(0))
    res = cpr(y, epsilon_per_step=6.0, padding=padding)
    assert res.period == 8
    assert res.diagnostics["fallback"] is None
    np.testing.assert_allclose(res.template[(np.arange(8) + res.diagnostics["offset"]) % 8],
                               cycle, atol=0.05)
    np.testing.assert_allclose(res.reconstruction, x, atol=0.05)
    json.dumps(res.diagnostics, allow_nan=False)


def test_cpr_beats_moving_average_on_privatized_periodic_stream():
    df = synthetic.periodic_stream(30, 40, seed=3, jitter=0.01)
    x = df["value"].to_numpy()
    y = _sw_reports(x, epsilon=5, w=5, rng=np.random.default_rng(1))
    res = cpr(y, epsilon_per_step=1.0)
    assert res.period == 40
    d_cpr = correlation_distance(x, res.reconstruction)
    d_mov = correlation_distance(x, moving_average(y, window=5))
    assert d_cpr < 0.2
    assert d_cpr < d_mov


def test_cpr_falls_back_to_constant_on_aperiodic_reports():
    y = _sw_reports(np.full(3000, 0.7), epsilon=5, w=5, rng=np.random.default_rng(2))
    res = cpr(y, epsilon_per_step=1.0)
    assert res.diagnostics["fallback"] == "constant"
    assert res.diagnostics["fallback_constant"] is True
    assert res.diagnostics["period_significant"] is False
    assert np.ptp(res.reconstruction) == 0.0
    assert abs(res.reconstruction[0] - 0.7) < 0.1
    off = cpr(y, epsilon_per_step=1.0, fallback=False)
    assert off.diagnostics["fallback"] is None


def test_cpr_supplied_period_and_validation():
    y = _sw_reports(np.tile([0.2, 0.8], 50), epsilon=10, w=2, rng=np.random.default_rng(3))
    res = cpr(y, epsilon_per_step=5.0, period=2)
    assert res.diagnostics["period_source"] == "supplied"
    np.testing.assert_allclose(res.template[(np.arange(2) + 1) % 2], [0.2, 0.8], atol=0.05)
    with pytest.raises(MechanismParameterError):
        cpr(y, epsilon_per_step=5.0, period=0)
    with pytest.raises(MechanismParameterError):
        cpr(y + 5, epsilon_per_step=5.0)  # not SW reports of this budget
    with pytest.raises(MechanismParameterError):
        cpr(y, epsilon_per_step=5.0, padding="edge")
    with pytest.raises(MechanismParameterError):
        cpr(y, epsilon_per_step=5.0, pseudo_samples_kind="sample")


@pytest.mark.slow
def test_false_period_rate_on_aperiodic_reports_is_small():
    # with the Bonferroni-corrected fold test at 1e-3, a constant stream should
    # almost never yield a "significant" period (expected rate <= 1e-3)
    hits = 0
    for seed in range(40):
        y = _sw_reports(np.full(800, 0.4), epsilon=5, w=5, rng=np.random.default_rng(seed))
        hits += not cpr(y, epsilon_per_step=1.0).diagnostics["fallback_constant"]
    assert hits <= 1


def test_cpr_without_a_period_returns_a_shrunk_smoother_and_says_so():
    t = np.arange(3000)
    x = 0.5 + 0.35 * np.sin(2 * np.pi * t / 1700.0) * np.exp(-t / 4000.0)
    y = _sw_reports(x, epsilon=5, w=5, rng=np.random.default_rng(4))
    res = cpr(y, epsilon_per_step=1.0)
    d = res.diagnostics
    assert d["period_significant"] is False
    assert d["path"] == "smoother" and d["fallback"] == "smoother"
    assert d["fallback_constant"] is False
    assert 0.0 < d["shrinkage"]["lambda"] <= 1.0 and d["shrinkage"]["window"] is not None
    const = np.full(x.size, d["level"])
    assert correlation_distance(x, res.reconstruction) < 0.2
    assert np.mean((res.reconstruction - x) ** 2) < 0.3 * np.mean((const - x) ** 2)
    old = cpr(y, epsilon_per_step=1.0, fallback_kind="constant")
    assert old.diagnostics["path"] == "constant" and np.ptp(old.reconstruction) == 0.0
    json.dumps(d, allow_nan=False)
    with pytest.raises(MechanismParameterError):
        cpr(y, epsilon_per_step=1.0, fallback_kind="flat")
    with pytest.raises(MechanismParameterError):
        cpr(y, epsilon_per_step=1.0, shrinkage="js")


def test_cpr_eb_shrinkage_leaves_a_significant_template_nearly_unchanged():
    df = synthetic.periodic_stream(30, 40, seed=3, jitter=0.01)
    x = df["value"].to_numpy()
    y = _sw_reports(x, epsilon=5, w=5, rng=np.random.default_rng(1))
    raw = cpr(y, epsilon_per_step=1.0)
    eb = cpr(y, epsilon_per_step=1.0, shrinkage="eb")
    assert raw.diagnostics["path"] == eb.diagnostics["path"] == "periodic"
    assert "shrinkage" not in raw.diagnostics
    sh = eb.diagnostics["shrinkage"]
    assert sh["lambda"] > 0.9 and sh["signal_energy"] > 0
    # recentred on the EM level, scaled by λ: the shape is the same
    assert np.mean(np.abs(eb.reconstruction - raw.reconstruction)) < 0.03
    assert abs(correlation_distance(x, eb.reconstruction)
               - correlation_distance(x, raw.reconstruction)) < 0.01


def _segment_release(seed, eps=4.0):
    df = synthetic.periodic_stream(25, 40, seed=2000 + seed, jitter=0.01)
    x = df["value"].to_numpy()
    return x, _sw_reports(x, epsilon=eps, w=5, rng=np.random.default_rng(seed))


@pytest.mark.slow
def test_detection_on_pseudo_samples_is_more_powerful_and_stays_calibrated():
    from mechanisms.reconstruct import fold_anova, pseudo_samples, sw_em

    e0 = 0.8
    gain, null_hits = [], 0
    for seed in range(30):
        x, y = _segment_release(seed)
        fit = sw_em(y[None, :], epsilon_per_step=e0)
        z = pseudo_samples(y[None, :], fit, epsilon_per_step=e0)[0]
        gain.append(np.log10(fold_anova(z, 40)[2]) - np.log10(fold_anova(y, 40)[2]))
        # the same transform of exchangeable reports: no period, p-values uniform
        perm = np.random.default_rng(100 + seed).permutation(y.size)
        null_hits += fold_anova(z[perm], 40)[2] < 0.1
    assert np.median(gain) < -1.0  # at least 10x smaller p-values at the true period
    assert null_hits <= 8  # 3 expected at the 10 % level (binomial 30, 0.1: P[> 8] < 1 %)
    paths = {"pseudo_samples": 0, "reports": 0}
    for seed in range(30):
        _, y = _segment_release(seed)
        for on in paths:
            paths[on] += cpr(y, epsilon_per_step=e0, detect_on=on).diagnostics["path"] == "periodic"
    assert paths["pseudo_samples"] >= paths["reports"] + 3


def test_detect_on_is_validated_and_recorded():
    _, y = _segment_release(0, eps=5.0)
    res = cpr(y, epsilon_per_step=1.0)
    assert res.diagnostics["detect_on"] == "pseudo_samples" and res.period == 40
    assert 0.0 <= res.diagnostics["level"] <= 1.0
    with pytest.raises(MechanismParameterError):
        cpr(y, epsilon_per_step=1.0, detect_on="raw")


def test_gapped_stream_keeps_the_absolute_phase_across_missing_days():
    from mechanisms.reconstruct import cpr_on_steps, longest_run

    cycle = np.array([0.1, 0.3, 0.9, 0.6, 0.2, 0.5, 0.8, 0.4])
    steps = np.arange(1600)
    keep = (steps < 700) | (steps >= 733)  # a gap of 33 steps (not a multiple of 8)
    st = steps[keep]
    x = cycle[st % 8]
    y = _sw_reports(x, epsilon=30, w=5, rng=np.random.default_rng(8))
    assert longest_run(st) == (700, st.size)  # the second run is the longer one
    res = cpr_on_steps(y, st, epsilon_per_step=6.0)
    assert res.period == 8 and res.diagnostics["gaps"] == 1
    assert res.diagnostics["gap_free_run"] == [733, 1599]
    np.testing.assert_allclose(res.reconstruction, x, atol=0.05)  # both sides of the gap
    # no gap: exactly CPR
    full = _sw_reports(cycle[steps % 8], epsilon=30, w=5, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(cpr_on_steps(full, steps, epsilon_per_step=6.0).reconstruction,
                                  cpr(full, epsilon_per_step=6.0).reconstruction)
    with pytest.raises(MechanismParameterError):
        cpr_on_steps(y, st[::-1], epsilon_per_step=6.0)


def test_gapped_stream_without_a_period_is_the_level_outside_the_run():
    from mechanisms.reconstruct import cpr_on_steps

    st = np.concatenate([np.arange(0, 300), np.arange(400, 1000)])
    y = _sw_reports(np.full(st.size, 0.3), epsilon=5, w=5, rng=np.random.default_rng(1))
    res = cpr_on_steps(y, st, epsilon_per_step=1.0)
    assert res.diagnostics["path"] == "constant"
    assert np.ptp(res.reconstruction) == 0.0 and abs(res.reconstruction[0] - 0.3) < 0.1
