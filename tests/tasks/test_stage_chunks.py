"""Staging: chunks hold a fixed count of whole users, never sized by (private) samples."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import tasks.stage as stage
from schemas.policy import Domain, Public


def _frame(points: list[int]) -> pd.DataFrame:
    """User u has one curve of points[u] samples."""
    rows = [pd.DataFrame({"user_id": f"u{u:02d}", "curve_id": "c", "t": np.arange(n, dtype=float),
                          "x": np.sin(np.arange(n, dtype=float))})
            for u, n in enumerate(points)]
    return pd.concat(rows, ignore_index=True)


@pytest.fixture
def dom():
    return Domain(name="d", kind="curves", notion="gp", cap=Fraction(10), time_unit="s",
                  value_columns=("x",), value_unit="m", public=Public(duration=True, points=True))


def _chunk_users(plan) -> list[int]:
    return [len(c.user_ids) for c in plan.chunks]


def test_default_chunks_hold_a_fixed_count_of_users_whatever_their_samples(dom, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(stage, "DEFAULT_CHUNK_USERS", 4)
    # sample counts (private when points are) do not move the boundaries: 4 users a chunk
    plan = stage.stage_input_fn(_frame([40, 40, 40, 150] + [10] * 9), dom, str(tmp_path / "s"))
    assert _chunk_users(plan) == [4, 4, 4, 1]
    assert [u for c in plan.chunks for u in c.user_ids] == [f"u{u:02d}" for u in range(13)]
    assert plan.points == 40 * 3 + 150 + 90
    other = stage.stage_input_fn(_frame([2, 900, 3, 3] + [500] * 9), dom, str(tmp_path / "o"))
    assert [c.user_ids for c in other.chunks] == [c.user_ids for c in plan.chunks]


def test_chunk_users_fixes_the_count(dom, tmp_path):
    plan = stage.stage_input_fn(_frame([5] * 10), dom, str(tmp_path / "b"), chunk_users=3)
    assert _chunk_users(plan) == [3, 3, 3, 1]
    assert stage.DEFAULT_CHUNK_USERS == 1_000
    assert _chunk_users(stage.stage_input_fn(_frame([5] * 10), dom, str(tmp_path / "a"))) == [10]


@pytest.mark.parametrize("admitted", [None, {"u01", "u03"}, {"u00", "u02", "u03"}, set()])
def test_a_chunk_payload_holds_its_admitted_users_samples(dom, tmp_path, admitted):
    """Every user admitted (the spans read as one slice) or some (gathered): the same rows."""
    frame = _frame([3, 5, 2, 4])
    frame["t"] = frame["t"] * 0.5 + 0.25  # times other than row numbers
    plan = stage.stage_input_fn(frame, dom, str(tmp_path / "s"), chunk_users=4)
    chunk = plan.chunks[0]
    users = [u for u in chunk.user_ids if admitted is None or u in admitted]
    seeds = {u: i + 1 for i, u in enumerate(users)}
    payload = stage.load_curve_chunk(chunk, ("x",), seeds)
    want = frame[frame.user_id.isin(users)]
    assert payload.user_ids == tuple(users) and payload.curve_ids == ("c",) * len(users)
    assert payload.seeds == seeds
    # times from each curve's start (ingest's conversion), values as given
    start = want.groupby("user_id", sort=False).t.transform("min")
    np.testing.assert_array_equal(payload.t, (want.t - start).to_numpy())
    np.testing.assert_array_equal(payload.values[:, 0], want.x.to_numpy())
    counts = want.groupby("user_id", sort=False).size().reindex(users).to_numpy()
    np.testing.assert_array_equal(payload.offsets, np.concatenate([[0], np.cumsum(counts)])
                                  if users else [0])
    assert payload.values.shape == (len(want), 1)
