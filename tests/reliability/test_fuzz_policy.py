"""Hypothesis over the budget policy: random TOML-like mappings into `parse_policy`.

Every input either yields a Policy whose domains obey the documented rules, or
raises PolicyError naming the offending key; nothing else escapes.
"""

from __future__ import annotations

import tomllib
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.errors import PolicyError
from schemas.policy import _DOMAIN_KEYS, Policy, parse_policy

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["1/3", "0", "-1", "1/0", "nan", "inf", "gp", "cgp", "wevent", "curves",
                     "streams", "s", "step", "h", "m", "equirectangular", "'; DROP TABLE x"]),
)
VALUES = st.recursive(SCALARS, lambda c: st.one_of(st.lists(c, max_size=4),
                                                  st.dictionaries(st.text(max_size=8), c,
                                                                  max_size=4)), max_leaves=8)
KEYS = st.one_of(st.sampled_from(sorted(_DOMAIN_KEYS)), st.text(max_size=10))

VALID = {"kind": "curves", **PUBLIC, **PUBLIC, "notion": "gp", "cap": "2", "time_unit": "s",
         "value_columns": ["x", "y"], "value_unit": "m"}
VALID_STREAM = {"kind": "streams", "notion": "wevent", "cap": "2", "w": 4, "time_unit": "step",
                "value_range": [0.0, 10.0], "value_unit": "kW"}


def _check(data):
    try:
        pol = parse_policy(data, source="fuzz.toml")
    except PolicyError as err:
        assert err.problems, "a PolicyError must carry its problem"
        p = err.problems[0]
        # names the offending key (domains.NAME.KEY, a top-level key, or <top>/<file>)
        assert p.column, err
        assert str(err) and "Traceback" not in str(err)
        return None
    assert isinstance(pol, Policy)
    for name, dom in pol.domains.items():
        assert dom.name == name and name
        assert dom.kind in ("curves", "streams")
        assert isinstance(dom.cap, Fraction) and dom.cap > 0
        if dom.kind == "streams":
            assert dom.notion == "wevent" and isinstance(dom.w, int) and dom.w >= 1
        else:
            assert dom.notion in ("gp", "cgp")
    return pol


@SETTINGS
@given(data=st.one_of(VALUES, st.dictionaries(st.sampled_from(["domains", "schedules", "x"]),
                                              VALUES, max_size=3)))
def test_random_mappings(data):
    _check(data)


@SETTINGS
@given(base=st.sampled_from([VALID, VALID_STREAM]), key=KEYS, value=VALUES,
       drop=st.sampled_from([None, *sorted(VALID), "w", "value_range"]),
       name=st.one_of(st.just("dom"), st.text(max_size=8)))
def test_one_mutation_of_a_valid_domain(base, key, value, drop, name):
    dom = dict(base)
    dom[key] = value
    if drop is not None:
        dom.pop(drop, None)
    _check({"domains": {name: dom}})


def test_valid_policies_parse_exactly():
    pol = _check({"domains": {"a": {**VALID, "cap": "1/3"}, "b": VALID_STREAM}})
    assert pol.domains["a"].cap == Fraction(1, 3) and pol.domains["b"].w == 4
    # the TOML text form gives the same policy
    text = 'domains.a.kind = "curves"\ndomains.a.notion = "gp"\ndomains.a.cap = "1/3"\n' \
           'domains.a.time_unit = "s"\ndomains.a.value_columns = ["x", "y"]\n' \
           'domains.a.value_unit = "m"\n' \
           'domains.a.public.duration = true\ndomains.a.public.points = true\n'
    assert _check(tomllib.loads(text)).domains["a"].cap == Fraction(1, 3)
