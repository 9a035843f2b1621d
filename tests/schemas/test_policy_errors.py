"""A policy's errors are listed all at once, each naming domains.NAME.key and the choices.

On main the first bad key stopped the parse, so an operator fixed one error per run.
"""

from __future__ import annotations

import pytest

from schemas.errors import PolicyError
from schemas.policy import parse_policy


def test_every_bad_key_of_every_domain_is_listed():
    data = {"domains": {
        "a": {"kind": "curves", "notion": "dp", "cap": "-1", "time_unit": "weeks",
              "public": {"duration": True, "points": True}, "colour": "red"},
        "b": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 0,
              "value_range": [1.0, 0.0]},
        "c": {"kind": "tables", "cap": "1", "sort": "yes"},
    }}
    with pytest.raises(PolicyError) as err:
        parse_policy(data, source="p.toml")
    keys = [p.column for p in err.value.problems]
    assert keys == ["domains.a.colour", "domains.a.cap", "domains.a.notion",
                    "domains.a.time_unit", "domains.b.w", "domains.b.value_range",
                    "domains.c.sort", "domains.c.kind"]
    by_key = {p.column: p.message for p in err.value.problems}
    assert "gp, cgp" in by_key["domains.a.notion"]
    assert "ms, s, min, h, d" in by_key["domains.a.time_unit"]
    assert "curves, streams" in by_key["domains.c.kind"]
    assert "allowed:" in by_key["domains.a.colour"]
    text = str(err.value)
    assert text.startswith("p.toml: 8 problems in the policy:")
    assert all(k in text for k in keys)


def test_one_problem_keeps_the_one_line_message():
    with pytest.raises(PolicyError) as err:
        parse_policy({"domains": {"a": {"kind": "streams", "notion": "wevent", "cap": "1",
                                        "w": 2}}}, source="p.toml")
    assert len(err.value.problems) == 1
    assert "domains.a.value_range" in str(err.value) and "\n" not in str(err.value)


def test_a_valid_domain_beside_a_bad_one_is_not_enough():
    data = {"domains": {
        "good": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 2,
                 "value_range": [0.0, 1.0]},
        "bad": {"kind": "streams", "notion": "gp", "cap": "1", "w": 2,
                "value_range": [0.0, 1.0]},
    }}
    with pytest.raises(PolicyError) as err:
        parse_policy(data)
    assert [p.column for p in err.value.problems] == ["domains.bad.notion"]


def test_a_new_policy_reports_every_independent_problem_in_one_round():
    """Issue #29: a new policy's problems came in rounds (a top-level key hid every domain;
    the first bad key of projection/ref_lat/value_columns, of public or of wevent_budget hid
    the others). Each key below is wrong on its own, so each is listed at once."""
    data = {
        "extra": 1,
        "domains": {
            "s": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 4,
                  "value_range": [0, 1],
                  "public": {"rejections": "yes", "nope": True},
                  "wevent_budget": "x"},
            "c": {"kind": "curves", "notion": "gp", "cap": "1",
                  "value_columns": ["x", "x"], "projection": "bogus", "ref_lat": 100,
                  "public": {"duration": True, "points": "no", "extra": True},
                  "window": 5},
        },
    }
    with pytest.raises(PolicyError) as exc:
        parse_policy(data, "p.toml")
    assert sorted(p.column for p in exc.value.problems) == sorted([
        "extra",
        "domains.s.public.rejections", "domains.s.public.nope", "domains.s.wevent_budget",
        "domains.c.value_columns", "domains.c.projection", "domains.c.ref_lat",
        "domains.c.public.points", "domains.c.public.extra",
        "domains.c.window",  # public.duration = true (valid) makes a window wrong
    ])
