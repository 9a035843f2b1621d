"""Incremental stream releases: three daily releases of a growing file (issue #15 acceptance)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from data import households as hh
from flows.release import release_streams
from ledger import Ledger
from ledger.amounts import from_units

pytestmark = pytest.mark.prefect
DAY = 48


@pytest.fixture(scope="module")
def meters() -> pd.DataFrame:
    """25 households over 3 days (no missing day), kWh within the meters domain's range."""
    return hh.households(25, 3, seed=8, missing_day_rate=0.0)


def _csv(df: pd.DataFrame, path: Path) -> str:
    df.to_csv(path, index=False)
    return str(path)


def _release(path, policy_file, ledger_path, out, **kw):
    return release_streams(input_path=path, domain="meters", epsilon="1", out_dir=str(out),
                           ledger_path=str(ledger_path), policy_path=str(policy_file),
                           chunk_users=10, **kw)


def _samples(res) -> pd.DataFrame:
    return pq.read_table(Path(res["out"]) / "samples.parquet").to_pandas()


def _runs(ledger_path: Path) -> pd.DataFrame:
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        return con.execute(
            "SELECT e.release_id, e.user_id, r.run_start, r.run_stop FROM entries e "
            "JOIN step_runs r ON r.seq = e.seq WHERE e.kind = 'reserve'").df()
    finally:
        con.close()


def _window_sums(ledger_path: Path, w: int = 4) -> dict[str, list[Fraction]]:
    """Per user, every window of w steps summed over ALL releases' reserved runs (own sweep)."""
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        rows = con.execute("SELECT user_id, run_start, run_stop, amount FROM step_runs "
                           "WHERE kind = 'reserve'").fetchall()
    finally:
        con.close()
    per: dict[str, dict[int, Fraction]] = {}
    for user, a, b, amount in rows:
        steps = per.setdefault(user, {})
        for t in range(a, b):
            steps[t] = steps.get(t, Fraction(0)) + from_units(int(amount))
    return {u: [sum((st.get(t, Fraction(0)) for t in range(s, s + w)), Fraction(0))
                for s in range(max(st) - w + 2)] for u, st in per.items()}


def test_three_daily_releases_charge_each_step_once(meters, policy_file, ledger_path, tmp_path):
    days = [meters[meters["t"] < DAY * k] for k in (1, 2, 3)]
    res = [_release(_csv(d, tmp_path / f"d{k}.csv"), policy_file, ledger_path, tmp_path)
           for k, d in enumerate(days, 1)]
    assert len({r["release_id"] for r in res}) == 3
    # byte-identical samples for the overlapping days
    s = [_samples(r) for r in res]
    for earlier, later in ((s[0], s[1]), (s[1], s[2])):
        merged = earlier.merge(later, on=["user_id", "stream_id", "step"], suffixes=("", "_l"))
        assert len(merged) == len(earlier)
        assert merged["y"].to_numpy().tobytes() == merged["y_l"].to_numpy().tobytes()
    assert len(s[2]) == len(meters)
    # each step charged once: one reserve per (release, user), on that day's steps only
    runs = _runs(ledger_path)
    for k, r in enumerate(res):
        mine = runs[runs["release_id"] == r["release_id"]]
        assert (mine["run_start"] == DAY * k).all() and (mine["run_stop"] == DAY * (k + 1)).all()
        assert mine["user_id"].nunique() == 25
    # every window at exactly ε (w = 4 steps at ε/4 each), never above, the windows that
    # straddle two releases included (they hold both releases' charges)
    sums = _window_sums(ledger_path)
    assert len(sums) == 25 and all(len(v) == 3 * DAY - 3 for v in sums.values())
    assert all(x == 1 for v in sums.values() for x in v)
    led = Ledger(str(ledger_path))
    assert all(Fraction(str(b["spent"])) == 1 for b in led.balances(domain="meters"))
    assert led.verify().ok
    # a rerun reproduces and charges nothing
    n = len(runs)
    again = _release(_csv(days[2], tmp_path / "d3.csv"), policy_file, ledger_path, tmp_path)
    assert again["release_id"] == res[2]["release_id"] and len(_runs(ledger_path)) == n
    assert _samples(again).equals(s[2])
    # the whole history is reconstructed
    rec = pq.read_table(Path(res[2]["out"]) / "reconstruction.parquet").to_pandas()
    assert rec.groupby("user_id")["step"].max().eq(3 * DAY - 1).all()


def test_changed_history_gap_and_early_step_are_rejected(meters, policy_file, ledger_path,
                                                         tmp_path):
    users = sorted(meters["user_id"].unique())
    changed, gap, early, fine = users[:4]
    d12 = meters[meters["t"] < 2 * DAY]
    d12 = d12[~((d12["user_id"] == early) & (d12["t"] < DAY))]  # its meter started on day 2
    first = _release(_csv(d12, tmp_path / "d12.csv"), policy_file, ledger_path, tmp_path)
    d123 = meters.copy()
    d123.loc[(d123["user_id"] == changed) & (d123["t"] == 10), "value"] += 0.01
    d123 = d123[~((d123["user_id"] == gap) & (d123["t"] == 2 * DAY))]  # first new step missing
    res = _release(_csv(d123, tmp_path / "d123.csv"), policy_file, ledger_path, tmp_path)
    report = (Path(res["out"]) / "report.md").read_text()
    # one user per rule, each rule explained (counts only: no ids, rows or values)
    for rule, text in (("stream_changed_history", "a changed history cannot be released again"),
                       ("stream_gap_after_watermark", "the steps right after the watermark are "
                                                      "missing"),
                       ("stream_step_before_watermark", "before the stream's watermark")):
        escaped = rule.replace("_", "\\_")  # as Markdown tables print it
        assert f"| {escaped} | 1 |" in report
        assert text in report
    assert changed not in report and gap not in report and early not in report
    assert res["manifest"]["counts"]["users_rejected"] == 3
    s = _samples(res)
    assert not s["user_id"].isin([changed, gap, early]).any()  # nothing released for them
    assert s[s["user_id"] == fine]["step"].max() == 3 * DAY - 1
    ok = s.merge(_samples(first), on=["user_id", "stream_id", "step"], suffixes=("", "_d12"))
    assert ok["y"].to_numpy().tobytes() == ok["y_d12"].to_numpy().tobytes()
    # nothing was charged for the rejected users in the second release
    runs = _runs(ledger_path)
    second = runs[runs["release_id"] == res["release_id"]]
    assert not second["user_id"].isin([changed, gap, early]).any()
