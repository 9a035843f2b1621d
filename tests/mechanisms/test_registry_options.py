"""Every registered option is a keyword of the function it reaches, and runs.

`mechanisms.registry` lists each mechanism's options; a name that is not a
keyword parameter of the core function the run function passes it to ends in a
TypeError after the checks passed (issue #31: ``privfuncselect`` listed
``degree``, Project-and-Privatize ``period``). Here each option is looked up in
the signatures of the entry's `option_targets`, and each mechanism's run
function is called with each option set to a valid value on a small curve.
"""

from __future__ import annotations

import inspect
from fractions import Fraction

import numpy as np
import pytest

from mechanisms import registry
from mechanisms.curves.release import PublicFrame

_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

#: per (mechanism, option): the options of one valid call that sets that option
VALID = {
    "privfuncseg": {
        "basis": {"basis": "legendre"}, "degree": {"basis": "legendre", "degree": 2},
        "reduce": {"reduce": False}, "continuous": {"continuous": True}, "beta": {"beta": 0.2},
        "max_level": {"max_level": 3}, "k1": {"k1": 2}, "margin": {"margin": False},
        "threshold": {"threshold": 0.5}, "noise": {"noise": "gaussian"},
    },
    "project_and_privatize": {
        "basis": {"basis": "fourier"}, "degree": {"basis": "legendre", "degree": 3},
        "n_terms": {"basis": "fourier", "n_terms": 5},
        "spacing": {"basis": "sinc", "n_terms": 9, "spacing": 0.2},
        "first": {"basis": "sinc", "n_terms": 9, "spacing": 0.2, "first": 0},
        "breakpoints": {"basis": "legendre", "breakpoints": [0.0, 0.5, 1.0]},
        "sample_spacing": {"basis": "sinc", "spacing": "auto", "sample_spacing": 0.05,
                           "kink_error": 0.1},
        "kink_error": {"basis": "sinc", "spacing": "auto", "sample_spacing": 0.05,
                       "kink_error": 0.2},
        "edge_error": {"basis": "sinc", "spacing": "auto", "sample_spacing": 0.05,
                       "kink_error": 0.1, "edge_error": 0.01},
        "ratios": {"basis": "sinc", "spacing": "auto", "sample_spacing": 0.05,
                   "kink_error": 0.1, "ratios": ["1/2", "1/4"]},
        "max_terms": {"basis": "sinc", "spacing": "auto", "sample_spacing": 0.05,
                      "kink_error": 0.1, "max_terms": 200},
        "noise": {"noise": "gaussian"},
    },
    "privfuncselect": {"max_terms": {"max_terms": 9}, "threshold1": {"threshold1": 0.5},
                       "noise": {"noise": "gaussian"}},
    "baseline": {"k": {"k": 4}, "smooth": {"smooth": 2}, "noise": {"noise": "gaussian"}},
}


def _entries() -> list[registry.Mechanism]:
    return list(registry.MECHANISMS.values())


def test_every_curve_mechanism_has_valid_values_for_exactly_its_options():
    curves = {e.name: e for e in _entries() if isinstance(e, registry.CurveMechanism)}
    assert set(VALID) == set(curves)
    for name, entry in curves.items():
        assert set(VALID[name]) == set(entry.options), name


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e.name)
def test_each_option_is_a_keyword_parameter_of_an_option_target(entry):
    if isinstance(entry, registry.StreamMechanism):
        params = inspect.signature(entry.run).parameters
        assert not entry.options  # the randomizer takes only x, ε₀ and rng
        assert {"epsilon_per_step", "rng"} <= set(params)
        return
    assert entry.option_targets, f"{entry.name} lists no function its options go to"
    keywords = {n for fn in entry.option_functions
                for n, p in inspect.signature(fn).parameters.items() if p.kind in _KEYWORD}
    missing = sorted(set(entry.options) - keywords)
    assert not missing, f"{entry.name}: options that are no keyword of its core: {missing}"


@pytest.mark.parametrize(("name", "option"),
                         [(m, o) for m, opts in VALID.items() for o in opts])
@pytest.mark.parametrize("notion", ["gp", "cgp"])
def test_each_registered_option_runs(name, option, notion):
    entry = registry.get(name, "curves")
    t = np.linspace(0.0, 1.0, 65)
    v = np.column_stack([np.sin(2 * np.pi * t), np.cos(2 * np.pi * t)])
    frame = PublicFrame(end=1.0, n_points=None, grid_points=64)
    options = dict(VALID[name][option])
    if option == "noise" and notion == "gp":  # GP has one sampler; "gaussian" is CGP's
        options["noise"] = "spherical_laplace"
    fn = entry.run(t, v, notion=notion, amount=Fraction(10), rng=np.random.default_rng(1),
                   frame=frame, options=options)
    assert fn.cost is not None and fn.cost.total <= Fraction(10)
    assert np.all(np.isfinite(fn.evaluate(t)))


def test_an_unregistered_option_is_refused_by_name():
    entry = registry.get("privfuncselect", "curves")
    with pytest.raises(ValueError, match="has no option 'degree'; allowed: max_terms, threshold1"):
        entry.check_options({"degree": 8})


@pytest.mark.parametrize("name", registry.names("streams"))
def test_each_stream_mechanism_runs_at_the_exact_per_step_epsilon(name):
    entry = registry.stream(name)
    x = np.linspace(0.0, 1.0, 200)
    eps_step = entry.reservation(Fraction(3), w=4)
    assert eps_step == Fraction(3, 4)
    y = entry.run(x, epsilon_per_step=eps_step, rng=np.random.default_rng(2))
    bound = entry.bound(0.75)
    assert y.shape == x.shape and np.all(np.abs(y - 0.5) <= bound)
    assert entry.variance(0.75) > 0
    assert entry.estimator(y, epsilon_per_step=0.75).shape == x.shape
