"""The sinc basis covering a domain and the budget rule choosing its spacing."""

from fractions import Fraction

import numpy as np
import pytest

from mechanisms.curves import (
    SincBasis,
    least_squares,
    project_and_privatize,
    sinc_basis_for_budget,
    sinc_rule_table,
)
from mechanisms.errors import MechanismParameterError


def test_covering_centres_are_the_lattice_points_in_the_domain():
    b = SincBasis.covering(10.0, 60.0, 0.25)
    assert b.m == 201 and b.centres[0] == 10.0 and b.centres[-1] == 60.0
    off = SincBasis.covering(10.1, 59.9, 0.25)
    assert off.centres[0] == pytest.approx(10.25) and off.centres[-1] == pytest.approx(59.75)
    assert off.m == 199
    padded = SincBasis.covering(10.0, 60.0, 0.25, pad=3)
    assert padded.m == 207 and padded.centres[0] == pytest.approx(9.25)
    # the ECG grid: 1000 samples at 0.8 (time x80), h = 0.8/16
    assert SincBasis.covering(0.0, 799.2, 0.05).m == 15985


def test_covering_errors():
    with pytest.raises(MechanismParameterError):
        SincBasis.covering(1.0, 1.0, 0.5)
    with pytest.raises(MechanismParameterError):
        SincBasis.covering(0.0, 1.0, -0.5)
    with pytest.raises(MechanismParameterError):
        SincBasis.covering(0.0, 1.0, 0.5, pad=-1)


RULE = {"sample_spacing": 1.0, "kink_error": 1.0, "edge_error": 0.0,
        "ratios": ("1/2", "1", "2")}


@pytest.mark.parametrize(("eps", "spacing"), [(100.0, 0.5), (10.0, 1.0), (1.0, 2.0)])
def test_rule_hand_computed_on_0_10(eps, spacing):
    # m = 21, 11, 6 centres; modelled error² = r³ + m(m+1)/ε²:
    # ε=100: 0.171, 1.013, 8.004; ε=10: 4.745, 2.32, 8.42; ε=1: 462.1, 133, 50
    assert sinc_basis_for_budget(0.0, 10.0, epsilon=eps, **RULE).spacing == spacing


def test_rule_cgp_uses_sqrt_d():
    # ρ = 1/2 (scale 1): error² = r³ + m: 21.1, 12, 14 → h = 1; GP ε = 1 chose h = 2
    assert sinc_basis_for_budget(0.0, 10.0, rho=0.5, **RULE).spacing == 1.0
    rows = sinc_rule_table(0.0, 10.0, notion="cgp", amount=0.5, **RULE)
    assert [r[1] for r in rows] == [21, 11, 6]
    assert rows[1][2] == pytest.approx(np.sqrt(12.0))


def test_rule_monotone_in_budget_and_capped():
    kw = {"sample_spacing": 0.8, "kink_error": 440.0, "edge_error": 225.0}
    hs = [sinc_basis_for_budget(0.0, 799.2, epsilon=float(e), **kw).spacing
          for e in np.logspace(-3, 4, 15)]
    assert all(a >= b for a, b in zip(hs, hs[1:], strict=False)) and hs[0] > hs[-1]
    assert hs[0] == pytest.approx(0.8 * 16) and hs[-1] == pytest.approx(0.05)
    capped = sinc_basis_for_budget(0.0, 799.2, epsilon=1e4, max_terms=3000, **kw)
    assert capped.m <= 3000 and capped.spacing == pytest.approx(0.8 / 3)
    # CGP at the same ε has less noise (√D/ε), so never a wider spacing
    for e in (0.1, 1.0, 10.0):
        gp = sinc_basis_for_budget(0.0, 799.2, epsilon=e, **kw).spacing
        cgp = sinc_basis_for_budget(0.0, 799.2, rho=Fraction(e) ** 2 / 2, **kw).spacing
        assert cgp <= gp
    # vector-valued curves: D = m·n, so more outputs never give more terms
    one = sinc_basis_for_budget(0.0, 799.2, epsilon=30.0, **kw)
    two = sinc_basis_for_budget(0.0, 799.2, epsilon=30.0, n_outputs=2, **kw)
    assert two.m <= one.m


def test_auto_spacing_in_project_and_privatize_is_data_independent():
    t = np.linspace(10.0, 60.0, 201)
    kw = {"spacing": "auto", "sample_spacing": 0.25, "kink_error": 3.0, "edge_error": 1.0}
    a = project_and_privatize(t, np.sin(t), "sinc", epsilon=20.0, rng=np.random.default_rng(0),
                              **kw)
    b = project_and_privatize(t, 40 * np.cos(3 * t) + t**2, "sinc", epsilon=20.0,
                              rng=np.random.default_rng(0), **kw)
    assert a.basis_params == b.basis_params and a.dim == b.dim
    ref = sinc_basis_for_budget(10.0, 60.0, epsilon=20.0, sample_spacing=0.25, kink_error=3.0,
                                edge_error=1.0)
    assert a.basis_params == ref.params()
    assert a.diagnostics["sinc_spacing"] == ref.spacing and a.diagnostics["sinc_terms"] == ref.m
    assert a.cost.items[0].amount == 20


def test_auto_spacing_errors():
    t = np.linspace(0.0, 10.0, 41)
    kw = {"sample_spacing": 0.25, "kink_error": 1.0}
    with pytest.raises(MechanismParameterError, match="budget"):
        least_squares(t, np.sin(t), "sinc", spacing="auto", **kw)
    with pytest.raises(MechanismParameterError, match="sinc basis only"):
        project_and_privatize(t, np.sin(t), "legendre", spacing="auto", epsilon=1.0,
                              rng=np.random.default_rng(0), **kw)
    with pytest.raises(MechanismParameterError, match="n_terms"):
        project_and_privatize(t, np.sin(t), "sinc", spacing="auto", n_terms=10, epsilon=1.0,
                              rng=np.random.default_rng(0), **kw)
    with pytest.raises(MechanismParameterError, match="sample_spacing"):
        sinc_basis_for_budget(0.0, 10.0, epsilon=1.0, sample_spacing=0.0, kink_error=1.0)
    with pytest.raises(MechanismParameterError, match="max_terms"):
        sinc_basis_for_budget(0.0, 10.0, epsilon=1.0, max_terms=2, **kw)
    with pytest.raises(MechanismParameterError, match="exactly one"):
        sinc_basis_for_budget(0.0, 10.0, **kw)
