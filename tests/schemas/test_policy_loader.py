"""Every rule of the TOML policy loader (schemas/policy.py), each with a failing example."""

from fractions import Fraction

import pytest

from schemas.errors import PolicyError
from schemas.policy import load_policy, parse_policy

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}

CURVES = {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "1"}
STREAMS = {"kind": "streams", "notion": "wevent", "cap": "1", "w": 5, "value_range": [0.0, 1.0]}


def _one(domain: dict, name: str = "d") -> dict:
    return {"domains": {name: domain}}


def _fails(data, key: str, *allowed: str) -> PolicyError:
    with pytest.raises(PolicyError) as exc:
        parse_policy(data, source="p.toml")
    err = exc.value
    assert len(err.problems) == 1
    p = err.problems[0]
    assert p.file == "p.toml"
    assert p.column == key, (p.column, key)
    for word in allowed:
        assert word in p.message, (word, p.message)
    return err


def test_valid_minimal_domains_parse_with_defaults():
    pol = parse_policy({"domains": {"c": CURVES, "s": STREAMS}})
    c, s = pol.domain("c"), pol.domain("s")
    assert (c.time_unit, c.value_columns, c.w, c.sort) == ("s", ("value",), None, False)
    assert (s.time_unit, s.w, s.value_range) == ("step", 5, (0.0, 1.0))
    assert c.cap == Fraction(1)


@pytest.mark.parametrize("raw, expected", [
    ("1/3", Fraction(1, 3)), (0.1, Fraction(1, 10)), (2, Fraction(2)), (" 5/2 ", Fraction(5, 2)),
])
def test_cap_is_exact(raw, expected):
    assert parse_policy(_one({**CURVES, "cap": raw})).domain("d").cap == expected


def test_unknown_top_level_key():
    _fails({"domains": {"d": CURVES}, "budget": {}}, "budget", "[domains]", "[schedules]")


def test_top_level_not_a_mapping():
    _fails([], "<top>", "[domains]")


@pytest.mark.parametrize("data", [{}, {"domains": {}}, {"domains": 3}])
def test_domains_required(data):
    _fails(data, "domains", "at least one")


def test_domain_must_be_table():
    _fails({"domains": {"d": 3}}, "domains.d", "table")


@pytest.mark.parametrize(("name", "shown"), [("a b", 'domains."a b"'), ("a.b", 'domains."a.b"'),
                                             ("x'y", 'domains."x\'y"'), ("", 'domains.""')])
def test_domain_name_characters(name, shown):
    # the key is named as TOML writes it: quoted unless bare, so "" and "a.b" are unambiguous
    _fails(_one(CURVES, name), shown, "letters, digits")


def test_empty_top_level_key_is_named():
    _fails({"": None, "domains": {"d": CURVES}}, '""', "unknown top-level key")


def test_unknown_domain_key_lists_allowed():
    _fails(_one({**CURVES, "epsilon": 1}), "domains.d.epsilon", "kind", "notion", "cap")


@pytest.mark.parametrize("kind", [None, "curve", "tables", 3])
def test_kind(kind):
    d = {**CURVES}
    if kind is None:
        d.pop("kind")
    else:
        d["kind"] = kind
    _fails(_one(d), "domains.d.kind", "curves", "streams")


@pytest.mark.parametrize("base, notion, allowed", [
    (CURVES, "wevent", ("gp", "cgp")), (STREAMS, "gp", ("wevent",)), (CURVES, None, ("gp",)),
])
def test_notion_matches_kind(base, notion, allowed):
    d = {**base}
    if notion is None:
        d.pop("notion")
    else:
        d["notion"] = notion
    _fails(_one(d), "domains.d.notion", *allowed)


def test_cap_required():
    d = {**CURVES}
    d.pop("cap")
    _fails(_one(d), "domains.d.cap", "required")


@pytest.mark.parametrize("cap", [True, [1], "abc", "1/0", {}])
def test_cap_type(cap):
    _fails(_one({**CURVES, "cap": cap}), "domains.d.cap", "positive number")


@pytest.mark.parametrize("cap", [0, -1, "0", "-1/2", 0.0])
def test_cap_positive(cap):
    _fails(_one({**CURVES, "cap": cap}), "domains.d.cap", "> 0")


@pytest.mark.parametrize("cap, says", [
    ("1e-400", "smallest amount"), ("1e-30", "smallest amount"),
    ("1e309", "too large"), (10**40, "too large")])
def test_caps_the_ledger_cannot_store_are_refused_naming_the_key(cap, says):
    # "1e-400" was accepted and stored as a cap of 0; "1e309" failed naming no key
    _fails(_one({**CURVES, "cap": cap}), "domains.d.cap", says)


def test_the_smallest_and_largest_storable_caps_are_kept():
    from ledger.amounts import MAX_UNITS, UNITS_PER_EPSILON

    for cap in (Fraction(1, UNITS_PER_EPSILON), Fraction(MAX_UNITS // UNITS_PER_EPSILON)):
        text = f"{cap.numerator}/{cap.denominator}"
        assert parse_policy(_one({**CURVES, "cap": text})).domains["d"].cap == cap


def test_a_window_beyond_32_bits_is_refused_naming_the_key():
    # w = 100000000000 ended in "internal error ... INT32" (exit 1) at the ledger
    _fails(_one({**STREAMS, "w": 10**11}), "domains.d.w", "at most 2147483647")
    assert parse_policy(_one({**STREAMS, "w": 2**31 - 1})).domains["d"].w == 2**31 - 1


@pytest.mark.parametrize("w", [None, 0, -2, 1.5, True, "5"])
def test_streams_need_integer_w(w):
    d = {**STREAMS}
    if w is None:
        d.pop("w")
    else:
        d["w"] = w
    _fails(_one(d), "domains.d.w", "integer >= 1")


def test_w_only_for_streams():
    _fails(_one({**CURVES, "w": 5}), "domains.d.w", "only applies to streams")


@pytest.mark.parametrize("base, unit", [(CURVES, "step"), (CURVES, "sec"), (STREAMS, "week")])
def test_time_unit(base, unit):
    _fails(_one({**base, "time_unit": unit}), "domains.d.time_unit", "ms", "s", "min", "h", "d")


@pytest.mark.parametrize("base", [CURVES, STREAMS])
def test_step_only_for_duration_streams(base):
    _fails(_one({**base, "step": 2}), "domains.d.step", "only for streams")


@pytest.mark.parametrize("step", [0, -1, True, "2"])
def test_step_positive(step):
    _fails(_one({**STREAMS, "time_unit": "min", "step": step}), "domains.d.step", "positive")


def test_duration_stream_needs_step():
    _fails(_one({**STREAMS, "time_unit": "min"}), "domains.d.step", "required")
    pol = parse_policy(_one({**STREAMS, "time_unit": "min", "step": 30}))
    assert pol.domain("d").step == 30.0


def test_projection_values():
    _fails(_one({**CURVES, "projection": "utm"}), "domains.d.projection",
           "equirectangular", "mercator")


def test_projection_only_for_curves():
    _fails(_one({**STREAMS, "projection": "mercator"}), "domains.d.projection", "curves")


@pytest.mark.parametrize("cols", [[], "value", ["a", "a"], ["a", ""], ["a", 3]])
def test_value_columns_shape(cols):
    _fails(_one({**CURVES, "value_columns": cols}), "domains.d.value_columns",
           "non-empty list of distinct names")


def test_stream_value_columns_fixed():
    _fails(_one({**STREAMS, "value_columns": ["mw"]}), "domains.d.value_columns", "value")


@pytest.mark.parametrize("col", ["user_id", "curve_id", "stream_id", "t"])
def test_value_columns_not_keys(col):
    _fails(_one({**CURVES, "value_columns": ["v", col]}), "domains.d.value_columns", "key columns")


def test_projected_domain_has_two_value_columns():
    _fails(_one({**CURVES, "projection": "mercator", "value_columns": ["x"]}),
           "domains.d.value_columns", "two value columns")
    dom = parse_policy(_one({**CURVES, "projection": "mercator"})).domain("d")
    assert dom.value_columns == ("x", "y")


@pytest.mark.parametrize("vr", [None, [1.0], [1, 1], [2, 1], ["0", "1"], [True, 2], "0..1"])
def test_streams_need_value_range(vr):
    d = {**STREAMS}
    if vr is None:
        d.pop("value_range")
    else:
        d["value_range"] = vr
    _fails(_one(d), "domains.d.value_range", "[low, high]", "low < high")


def test_value_range_only_for_streams():
    _fails(_one({**CURVES, "value_range": [0, 1]}), "domains.d.value_range", "streams")


@pytest.mark.parametrize("sort", ["yes", 1, None])
def test_sort_bool(sort):
    if sort is None:
        assert parse_policy(_one({**CURVES, "sort": True})).domain("d").sort is True
        return
    _fails(_one({**CURVES, "sort": sort}), "domains.d.sort", "true or false")


@pytest.mark.parametrize("sched", ["daily", "0 2 * *", 5])
def test_schedule_cron(sched):
    _fails(_one({**CURVES, "schedule": sched}), "domains.d.schedule", "5-field cron")


@pytest.mark.parametrize("key", ["value_unit", "lon_column", "lat_column", "description"])
def test_text_keys(key):
    _fails(_one({**CURVES, key: 3}), f"domains.d.{key}", "string")


def test_unknown_domain_lists_known():
    pol = parse_policy({"domains": {"b": CURVES, "a": CURVES}}, source="p.toml")
    with pytest.raises(PolicyError) as exc:
        pol.domain("zzz")
    assert "a, b" in str(exc.value)
    assert exc.value.problems[0].rule == "known domain"


def test_load_policy_missing_file(tmp_path):
    with pytest.raises(PolicyError) as exc:
        load_policy(tmp_path / "none.toml")
    assert exc.value.problems[0].column == "<file>"
    assert "cannot read" in str(exc.value)


def test_load_policy_bad_toml(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[domains.a\nkind = 'curves'\n", encoding="utf-8")
    with pytest.raises(PolicyError) as exc:
        load_policy(p)
    assert "not valid TOML" in str(exc.value)


def test_load_policy_reads_file(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text('[domains.a]\nkind = "curves"\nnotion = "cgp"\ncap = "1/2"\n'
                 'public = { duration = true, points = true }\n', encoding="utf-8")
    pol = load_policy(p)
    assert pol.source == str(p)
    assert pol.domain("a").cap == Fraction(1, 2)


def test_ref_lat_rules():
    from schemas.policy import parse_policy as _parse

    base = {"kind": "curves", **PUBLIC, "notion": "gp", "cap": 1, "projection": "equirectangular"}
    assert _parse({"domains": {"a": {**base, "ref_lat": 40.6}}}).domain("a").ref_lat == 40.6
    for bad in (95, "north", True):
        with pytest.raises(PolicyError, match=r"domains\.a\.ref_lat"):
            _parse({"domains": {"a": {**base, "ref_lat": bad}}})
    with pytest.raises(PolicyError, match="only applies"):
        _parse({"domains": {"a": {**base, "projection": "mercator", "ref_lat": 10}}})


# ----------------------------------------------------------------- metric and public metadata

BARE_CURVES = {"kind": "curves", "notion": "gp", "cap": "1"}


def test_curves_domains_must_declare_what_they_release_outside_the_noise():
    _fails(_one(BARE_CURVES), "domains.d.public", "outside the noise", "duration")
    _fails(_one({**BARE_CURVES, "public": {"duration": True}}), "domains.d.public.points",
           "true or false")
    _fails(_one({**BARE_CURVES, "public": {"duration": True, "points": True, "ids": False}}),
           "domains.d.public.ids", "duration", "points", "sample_times", "rejections")
    _fails(_one({**BARE_CURVES, "public": {"duration": "yes", "points": True}}),
           "domains.d.public.duration", "true or false")


def test_private_durations_need_a_window_and_private_counts_a_grid():
    hidden = {**BARE_CURVES, "public": {"duration": False, "points": False}}
    with pytest.raises(PolicyError) as exc:  # both missing: both named in one round
        parse_policy(_one(hidden), source="p.toml")
    assert [(p.column, "required" in p.message) for p in exc.value.problems] == [
        ("domains.d.window", True), ("domains.d.grid_points", True)]
    assert "time window" in exc.value.problems[0].message
    _fails(_one({**hidden, "window": 10.0}), "domains.d.grid_points", "required")
    _fails(_one({**hidden, "window": -1.0, "grid_points": 10}), "domains.d.window", "positive")
    _fails(_one({**hidden, "window": 10.0, "grid_points": 1}), "domains.d.grid_points", ">= 2")
    _fails(_one({**CURVES, "window": 10.0}), "domains.d.window", "public.duration = false")
    _fails(_one({**CURVES, "grid_points": 10}), "domains.d.grid_points", "public.points = false")
    dom = parse_policy(_one({**hidden, "window": 10.0, "grid_points": 100})).domain("d")
    assert (dom.window, dom.grid_points, dom.public.duration, dom.public.points) == (
        10.0, 100, False, False)
    assert dom.public_fields() == ("user_id", "curve_id", "window=10")


def test_metric_is_declared_per_kind():
    assert parse_policy(_one(CURVES)).domain("d").metric == "l2"
    assert parse_policy(_one({**CURVES, "metric": "dist_inf"})).domain("d").metric == "dist_inf"
    _fails(_one({**CURVES, "metric": "wevent"}), "domains.d.metric", "l2", "dist_inf")
    _fails(_one({**STREAMS, "metric": "l2"}), "domains.d.metric", "wevent")
    assert parse_policy(_one(STREAMS)).domain("d").metric == "wevent"
    _fails(_one({**STREAMS, "public": {"points": True}}), "domains.d.public.points",
           "curves domains", "rejections")
    _fails(_one({**STREAMS, "public": 1}), "domains.d.public", "table")
    assert parse_policy(_one({**STREAMS, "public": {}})).domain("d").public is None


def test_rejection_counts_are_private_unless_the_public_table_declares_them():
    for kind in (CURVES, STREAMS):
        assert not parse_policy(_one(kind)).domain("d").rejections_public
        public = {**kind.get("public", {}), "rejections": True}
        assert parse_policy(_one({**kind, "public": public})).domain("d").rejections_public
        off = parse_policy(_one({**kind, "public": {**public, "rejections": False}}))
        assert not off.domain("d").rejections_public
        _fails(_one({**kind, "public": {**public, "rejections": "yes"}}),
               "domains.d.public.rejections", "true or false")


def test_rejections_left_at_their_default_do_not_change_a_recorded_definition():
    from ledger.definitions import decode, encode
    from schemas.units import domain_record

    dom = parse_policy(_one(CURVES)).domain("d")
    assert '"rejections"' not in encode(dom)  # definitions recorded before the key: unchanged
    assert "rejections" not in domain_record(dom)["definition"]["public"]
    assert decode(encode(dom), "d") == dom
    shown = parse_policy(_one({**CURVES, "public": {**CURVES["public"], "rejections": True}}))
    text = encode(shown.domain("d"))
    assert '"rejections":true' in text and decode(text, "d") == shown.domain("d")
    assert domain_record(shown.domain("d"))["digest"] != domain_record(dom)["digest"]


def test_input_sample_times_need_public_points_and_durations():
    hidden_points = {**BARE_CURVES, "grid_points": 64,
                     "public": {"duration": True, "points": False, "sample_times": True}}
    _fails(_one(hidden_points), "domains.d.public.sample_times", "public.points = true",
           "public.duration = true")
    hidden_duration = {**BARE_CURVES, "window": 10.0,
                       "public": {"duration": False, "points": True, "sample_times": True}}
    _fails(_one(hidden_duration), "domains.d.public.sample_times", "public.duration = true")
    both = {**BARE_CURVES, "public": {"duration": True, "points": True, "sample_times": True}}
    assert parse_policy(_one(both)).domain("d").public.sample_times


def test_equirectangular_needs_a_fixed_public_reference_latitude():
    # a per-curve mean latitude magnified distances between users (up to 2.8x at 60°N)
    _fails(_one({**CURVES, "projection": "equirectangular"}), "domains.d.ref_lat",
           "required", "fixed")
    assert parse_policy(_one({**CURVES, "projection": "mercator"})).domain("d").ref_lat is None
