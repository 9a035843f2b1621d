"""Released bytes never drift: a continued stream re-emits only what was published.

Day 2 of a stream repeats day 1's range, redrawn from day 1's seed. If the
generator or a sampler drew differently on day 2 (a numpy upgrade changing one
draw, simulated here by advancing every stream generator by one draw), day 1's
steps would be released again with fresh noise, each then costing 2ε/w while
the ledger shows ε/w. The release must instead stop before publishing anything
(`tasks.stream_redraw`), and a day 2 whose generator is unchanged must
re-emit day 1's published bytes exactly. Through the real flow (Prefect).
On main before the check, the drifted day 2 was published.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from release_path import new_ledger, streams_domain

from ledger import Ledger

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("square_wave",)


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


def _input(path: Path, steps: range) -> str:
    rows = [{"user_id": f"u{u}", "stream_id": "s", "t": t,
             "value": 0.5 + 0.4 * np.sin(2 * np.pi * t / 6 + u)}
            for u in range(3) for t in steps]
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def _day(tmp: Path, ledger: Path, steps: range, rid: str) -> dict:
    from flows.release import release_streams

    return release_streams(input_path=_input(tmp / f"{rid}.csv", steps), domain="meters",
                           epsilon="2", reconstruct="none", release_id=rid,
                           ledger_path=str(ledger), out_dir=str(tmp / "out"))


def _samples(tmp: Path, rid: str, steps: range) -> pd.DataFrame:
    df = pq.read_table(tmp / "out" / rid / "samples.parquet").to_pandas()
    return df[df["step"].isin(steps)].sort_values(["user_id", "step"]).reset_index(drop=True)


@pytest.fixture()
def day1(harness, tmp_path):
    ledger = new_ledger(tmp_path, streams_domain(5, cap=Fraction(10)))
    _day(tmp_path, ledger, range(0, 10), "day1")
    return tmp_path, ledger


def test_day_two_re_emits_day_one_as_published(day1):
    tmp, ledger = day1
    _day(tmp, ledger, range(0, 20), "day2")
    a, b = _samples(tmp, "day1", range(0, 10)), _samples(tmp, "day2", range(0, 10))
    assert len(a) == 30 and a["y"].to_numpy().tobytes() == b["y"].to_numpy().tobytes()


def test_a_redraw_that_drifted_is_never_published(day1, monkeypatch):
    import tasks.stream_draw as draw

    tmp, ledger = day1
    fill = draw.fill_uniforms

    def shifted(keys, bounds, u):  # "the sampler changed": each segment's draws shifted by one
        fill(keys, bounds, u)
        for lo, hi in bounds.tolist():
            u[:, lo:hi] = np.roll(u[:, lo:hi], -1, axis=1)

    # the chunk task fills every segment's uniforms from its keystream in one kernel call
    monkeypatch.setattr(draw, "fill_uniforms", shifted)
    with pytest.raises(Exception, match="differs from what release 'day1' published"):
        _day(tmp, ledger, range(0, 20), "day2")
    assert not (tmp / "out" / "day2").exists(), "nothing of the drifted release is published"
    rec = Ledger(ledger).release("day2")
    assert rec is None or rec["state"] != "settled"


def test_a_repeated_range_whose_samples_are_gone_is_not_released_again(day1):
    tmp, ledger = day1
    # e.g. day 2 runs on another host, and the ledger's copy was lost too (with the
    # ledger's copy kept, day 2 continues from it: tests/flows/test_stream_history_store.py)
    (tmp / "out" / "day1" / "samples.parquet").unlink()
    stored = sorted((ledger.parent / "published").glob("*.parquet"))
    assert len(stored) == 1, "the ledger keeps a copy of day 1's samples"
    stored[0].unlink()
    with pytest.raises(Exception, match="published samples are missing"):
        _day(tmp, ledger, range(0, 20), "day2")
    assert not (tmp / "out" / "day2").exists()
