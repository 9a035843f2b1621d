"""Each rule of the curve and stream sample schemas, with a failing example."""

import numpy as np
import pandas as pd
import pandera.errors as pa_errors
import pytest

from schemas.problems import problems_from_schema_errors
from schemas.samples import (
    CurveSamples,
    StreamSamples,
    curve_samples_schema,
    stream_samples_schema,
)


def _curves(**over) -> pd.DataFrame:
    df = pd.DataFrame({
        "user_id": ["a", "a", "a", "b", "b"],
        "curve_id": ["c", "c", "c", "c", "c"],
        "t": [0.0, 1.0, 2.0, 0.0, 5.0],
        "value": [1.0, 2.0, 3.0, 4.0, 5.0],
    }, index=pd.Index([10, 11, 12, 13, 14], name="_row"))
    for k, v in over.items():
        df[k] = v
    return df


def _problems(schema, df):
    with pytest.raises(pa_errors.SchemaErrors) as exc:
        schema.validate(df, lazy=True)
    users = dict(zip(df.index, df["user_id"], strict=True))
    return problems_from_schema_errors(exc.value, file="in.csv", user_of_row=users.get)


def _only(problems):
    return {(p.row, p.column, p.rule) for p in problems}


def test_valid_frames_pass():
    curve_samples_schema(["value"]).validate(_curves())
    CurveSamples.validate(_curves())
    df = pd.DataFrame({"user_id": ["a", "a"], "stream_id": ["s", "s"], "t": [0.0, 1.0],
                       "value": [0.0, 10.0]})
    stream_samples_schema((0.0, 10.0), integer_steps=True).validate(df)
    StreamSamples.validate(df)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_value_finite(bad):
    ps = _problems(curve_samples_schema(["value"]), _curves(value=[1.0, bad, 3.0, 4.0, 5.0]))
    assert _only(ps) == {(11, "value", "finite")}
    assert ps[0].user_id == "a"


def test_t_finite():
    ps = _problems(curve_samples_schema(["value"]), _curves(t=[0.0, 1.0, 2.0, 0.0, np.nan]))
    assert _only(ps) == {(14, "t", "finite")}


def test_t_strictly_increasing_duplicates_and_unsorted():
    ps = _problems(curve_samples_schema(["value"]), _curves(t=[0.0, 1.0, 1.0, 5.0, 2.0]))
    assert _only(ps) == {(12, "t", "t strictly increasing"), (14, "t", "t strictly increasing")}


def test_increase_resets_between_curves_and_users():
    df = _curves(curve_id=["c", "c", "d", "c", "c"], t=[5.0, 6.0, 0.0, 0.0, 1.0])
    ps = _problems(curve_samples_schema(["value"]), df)
    # only the one-point curve "d" fails, for its size, not for its t
    assert _only(ps) == {(12, "curve_id", "at least 2 points")}


def test_at_least_two_points():
    df = _curves(user_id=["a", "a", "a", "b", "c"], t=[0.0, 1.0, 2.0, 0.0, 0.0])
    ps = _problems(curve_samples_schema(["value"]), df)
    assert _only(ps) == {(13, "curve_id", "at least 2 points"),
                         (14, "curve_id", "at least 2 points")}


def test_empty_ids():
    ps = _problems(curve_samples_schema(["value"]), _curves(curve_id=["c", "c", "c", "", ""]))
    assert {(13, "curve_id", "non-empty id"), (14, "curve_id", "non-empty id")} <= _only(ps)


def test_wrong_dtype_whole_column():
    ps = _problems(curve_samples_schema(["value"]), _curves(value=["1", "2", "3", "4", "5"]))
    assert (None, "value", "dtype") in _only(ps)


def test_missing_column():
    df = _curves().drop(columns=["value"])
    ps = _problems(curve_samples_schema(["value"]), df)
    assert any(p.column is None or p.column == "value" for p in ps)


def test_lon_lat_ranges():
    schema = curve_samples_schema(["x", "y"], lon_lat=("lon", "lat"))
    df = _curves().drop(columns=["value"])
    df["lon"] = [0.0, 180.0, -180.5, 10.0, 10.0]
    df["lat"] = [0.0, 90.0, 0.0, -91.0, 45.0]
    ps = _problems(schema, df)
    assert _only(ps) == {(12, "lon", "lon in [-180, 180]"), (13, "lat", "lat in [-90, 90]")}


def test_mercator_rejects_poles():
    schema = curve_samples_schema(["x", "y"], lon_lat=("lon", "lat"), mercator=True)
    df = _curves().drop(columns=["value"])
    df["lon"] = 0.0
    df["lat"] = [0.0, 89.9, -90.0, 10.0, 90.0]
    assert _only(_problems(schema, df)) == {(12, "lat", "lat in (-90, 90)"),
                                            (14, "lat", "lat in (-90, 90)")}


def _streams(t, v):
    return pd.DataFrame({"user_id": "u", "stream_id": "s", "t": t, "value": v},
                        index=pd.Index(range(1, len(t) + 1), name="_row"))


def test_stream_value_range_rejects_outside():
    ps = _problems(stream_samples_schema((0.0, 10.0)), _streams([0.0, 1.0, 2.0], [0.0, 10.5, -1.0]))
    assert _only(ps) == {(2, "value", "value range"), (3, "value", "value range")}


def test_stream_integer_step():
    ps = _problems(stream_samples_schema(None, integer_steps=True),
                   _streams([0.0, 1.5, 3.0], [1.0, 1.0, 1.0]))
    assert _only(ps) == {(2, "t", "integer step")}


def test_stream_steps_strictly_increasing():
    ps = _problems(stream_samples_schema(None), _streams([0.0, 1.0, 1.0, 0.0], [1.0] * 4))
    assert _only(ps) == {(3, "t", "t strictly increasing"), (4, "t", "t strictly increasing")}


def test_stream_value_finite():
    ps = _problems(stream_samples_schema(None), _streams([0.0, 1.0], [np.nan, np.inf]))
    assert _only(ps) == {(1, "value", "finite"), (2, "value", "finite")}


def test_messages_never_carry_values():
    secret = 987654.125
    ps = _problems(stream_samples_schema((0.0, 10.0)), _streams([0.0, 1.0], [secret, np.inf]))
    assert ps
    for p in ps:
        assert "987654" not in p.message
        assert "987654" not in p.describe(show_values=False)
    assert any(p.value == str(secret) for p in ps)
    assert any("987654" in p.describe(show_values=True) for p in ps)


def test_stream_step_range():
    ps = _problems(stream_samples_schema(None), _streams([0.0, 2.0**53 + 2, 1e300], [1.0] * 3))
    assert _only(ps) == {(2, "t", "step in [0, 2^53)"), (3, "t", "step in [0, 2^53)")}


def test_stream_step_range_edges():
    # 2^53 - 1 is the last exact step; 2^53 (also what 2^53 + 1 reads as) and -1 are refused
    steps = [-1.0, 0.0, 2.0**53 - 1, 2.0**53]
    ps = _problems(stream_samples_schema(None), _streams(steps, [1.0] * 4))
    assert {(row, rule) for row, _, rule in _only(ps)} == {
        (1, "step in [0, 2^53)"), (4, "step in [0, 2^53)")}


def test_rule_names_do_not_depend_on_which_schema_is_built_first():
    """pandera 0.35 lost an inherited check's name in the second subclass built."""
    stream_samples_schema((0.0, 1.0), integer_steps=True)
    assert [c.name for c in curve_samples_schema(["value"]).columns["t"].checks][0] == "finite"
    curve_samples_schema(["value"])
    assert "finite" in [c.name for c in stream_samples_schema().columns["t"].checks]


def test_too_few_points_matches_counting_each_group_by_hand():
    """Random runs (row 0 a start or not, groups of 1-4 rows) against counts made by hand."""
    import numpy as np

    from schemas.samples import too_few_points

    rng = np.random.default_rng(3)
    assert too_few_points(np.zeros(0, dtype=bool)).shape == (0,)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        same = rng.random(n) < 0.6
        minimum = int(rng.integers(1, 5))
        expected, start = [], 0
        for i in range(1, n + 1):
            if i == n or not same[i]:
                expected += [i - start < minimum] * (i - start)
                start = i
        assert too_few_points(same, minimum).tolist() == expected
