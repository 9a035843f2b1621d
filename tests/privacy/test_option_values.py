"""Option values are range-checked before any data is read (issue #27, deliverable 4).

A failure probability of 1e-320 (subnormal), a bool for β, or 0.5 / "yes" for a
boolean option were accepted (read with ``float()`` / ``bool()``); each sets a
public parameter of the release, so a wrong one must be refused, never coerced.
Checked through every registered curve mechanism that takes the option.
"""

import numpy as np
import pytest

from mechanisms import registry
from mechanisms.curves._budget import BETA_MIN, check_beta, check_flag
from mechanisms.curves.release import frame_for
from mechanisms.errors import MechanismParameterError

T = np.linspace(0.0, 1.0, 40)
V = np.stack([np.sin(3 * T), np.cos(2 * T)], axis=1)


def _run(name, options):
    entry = registry.get(name, "curves")
    entry.check_options(options)
    frame = frame_for(T, window=None, points_public=True, grid_points=None)
    return entry.run(T, V, notion="gp", amount=1, rng=np.random.default_rng(0), frame=frame,
                     options=options)


@pytest.mark.parametrize("beta", [1e-320, 0.0, 1.0, -0.1, BETA_MIN / 2, True, "0.1", None])
def test_bad_failure_probabilities_are_refused(beta):
    with pytest.raises(MechanismParameterError, match="beta"):
        check_beta(beta)
    with pytest.raises(MechanismParameterError, match="beta"):
        _run("privfuncseg", {"beta": beta})


@pytest.mark.parametrize("beta", [BETA_MIN, 0.05, 0.999])
def test_failure_probabilities_in_range_are_kept_exactly(beta):
    assert check_beta(beta) == beta


@pytest.mark.parametrize("flag", ["reduce", "continuous", "margin"])
@pytest.mark.parametrize("value", [0.5, 1, 0, "yes", "true", None])
def test_boolean_options_take_booleans_only(flag, value):
    with pytest.raises(MechanismParameterError, match=flag):
        _run("privfuncseg", {flag: value})


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_booleans_are_accepted(value):
    assert check_flag("reduce", value) is bool(value)


@pytest.mark.parametrize("name, option", [("privfuncseg", "threshold"),
                                          ("privfuncselect", "threshold1")])
@pytest.mark.parametrize("value", ["1", True, float("nan"), float("inf")])
def test_numeric_options_refuse_text_bools_and_non_finite(name, option, value):
    with pytest.raises(MechanismParameterError, match=option):
        _run(name, {option: value})
