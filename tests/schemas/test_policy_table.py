"""The policy as a table (PolicyTable) and the bundled policy file."""

import pandas as pd
import pytest

from data.loaders import POLICY_FILE
from schemas.errors import PolicyError
from schemas.policy import load_policy, parse_policy
from schemas.policy_table import COLUMNS, policy_table, validate_policy_table

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}


@pytest.fixture
def table():
    pol = parse_policy({"domains": {
        "trk": {"kind": "curves", **PUBLIC, "notion": "cgp", "cap": "1/3", "projection": "mercator",
                "value_unit": "m"},
        "pw": {"kind": "streams", "notion": "wevent", "cap": 2, "w": 5,
               "value_range": [0.0, 10.0], "time_unit": "min", "step": 30},
    }})
    return policy_table(pol)


def test_policy_table_rows(table):
    assert list(table.columns) == list(COLUMNS)
    assert list(table["domain"]) == ["pw", "trk"]
    pw, trk = table.iloc[0], table.iloc[1]
    assert (pw["kind"], pw["notion"], pw["cap"], pw["w"], pw["step"]) == (
        "streams", "wevent", "2", 5, 30.0)
    assert (pw["value_low"], pw["value_high"]) == (0.0, 10.0)
    assert (trk["cap"], trk["value_columns"], trk["projection"]) == ("1/3", "x,y", "mercator")
    assert trk["cap_float"] == pytest.approx(1 / 3)
    assert pd.isna(trk["w"]) and pd.isna(trk["value_low"])


def _fails(df, key, *words):
    with pytest.raises(PolicyError) as exc:
        validate_policy_table(df)
    hits = [p for p in exc.value.problems if p.column == key]
    assert hits, [p.column for p in exc.value.problems]
    for w in words:
        assert w in hits[0].message
    return exc.value


@pytest.mark.parametrize("key, value, words", [
    ("kind", "tables", ("curves", "streams")),
    ("notion", "dp", ("gp", "cgp", "wevent")),
    ("time_unit", "week", ("ms", "step")),
    ("projection", "utm", ("equirectangular", "mercator")),
    ("cap", "abc", ("ratio",)),
    ("cap_float", -1.0, ("positive",)),
    ("domain", "a b", ("letters",)),
])
def test_column_rules(table, key, value, words):
    bad = table.copy()
    bad.loc[1, key] = value
    _fails(bad, key, *words)


def test_notion_must_match_kind(table):
    bad = table.copy()
    bad.loc[1, "notion"] = "wevent"
    _fails(bad, "notion", "wevent (streams)")


def test_w_only_for_streams(table):
    bad = table.copy()
    bad.loc[0, "w"] = pd.NA
    _fails(bad, "w", "integer >= 1")


def test_range_only_for_streams(table):
    bad = table.copy()
    bad.loc[0, "value_low"] = 20.0
    _fails(bad, "value_low", "below value_high")


def test_curve_time_unit(table):
    bad = table.copy()
    bad.loc[1, "time_unit"] = "step"
    _fails(bad, "time_unit", "(curves)")


def test_unique_domains(table):
    bad = table.copy()
    bad.loc[1, "domain"] = "pw"
    _fails(bad, "domain", "unique")


def test_unknown_and_missing_columns(table):
    _fails(table.assign(extra=1), "extra", "allowed")
    with pytest.raises(PolicyError):
        validate_policy_table(table.drop(columns=["cap"]))


def test_bundled_policy_covers_bundled_data():
    pol = load_policy(POLICY_FILE)
    assert set(pol.domains) == {"ais_tracks", "ecg", "power_taylor", "power_italy", "households"}
    ais = pol.domain("ais_tracks")
    assert (ais.kind, ais.notion, ais.projection, ais.time_unit, ais.value_unit) == (
        "curves", "gp", "equirectangular", "s", "m")
    ecg = pol.domain("ecg")
    assert (ecg.kind, ecg.notion, ecg.value_unit, ecg.time_unit) == ("curves", "gp", "mV", "s")
    for name in ("power_taylor", "power_italy", "households"):
        d = pol.domain(name)
        assert (d.kind, d.notion, d.w, d.time_unit) == ("streams", "wevent", 5, "step")
        assert d.value_range is not None
    assert all(d.cap > 0 for d in pol.domains.values())
    assert len(policy_table(pol)) == 5
