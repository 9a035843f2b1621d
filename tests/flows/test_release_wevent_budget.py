"""The per-user w-event budget through the real stream release flow (issue #10 item 4).

One user with three streams and one with a single stream, each released at
ε per window: with the default per-user budget the three-stream user would
have 3ε per window and is denied; at ε/3 per stream it fits. A domain that
declares ``wevent_budget = "per_stream"`` admits both and its manifest and
report say k·ε.
"""

from __future__ import annotations

import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flows.release import release_streams
from ledger import Ledger
from schemas.policy import load_policy

_POLICY = """
    [domains.meters]
    kind = "streams"
    notion = "wevent"
    cap = "2"
    w = 4
    time_unit = "step"
    value_range = [0.0, 10.0]
    value_unit = "kW"
    {extra}
"""


@pytest.fixture()
def three_streams_csv(tmp_path) -> Path:
    """meter-3 has streams s0, s1, s2; meter-1 has s0; 48 steps each in [0, 10]."""
    rng = np.random.default_rng(5)
    rows = []
    for user, streams in (("meter-3", ("s0", "s1", "s2")), ("meter-1", ("s0",))):
        for s in streams:
            steps = np.arange(48)
            rows.append(pd.DataFrame({"user_id": user, "stream_id": s, "t": steps,
                                      "value": np.clip(5 + rng.normal(0, 2, 48), 0, 10)}))
    path = tmp_path / "streams.csv"
    pd.concat(rows).to_csv(path, index=False)
    return path


def _setup(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    policy = tmp_path / "policy.toml"
    policy.write_text(textwrap.dedent(_POLICY.format(extra=extra)))
    ledger = tmp_path / "ledger.duckdb"
    Ledger.init(ledger).apply_policy(load_policy(policy))
    return policy, ledger


def _release(csv: Path, policy: Path, ledger: Path, out: Path, epsilon: str, rid: str):
    return release_streams(input_path=str(csv), domain="meters", epsilon=epsilon,
                           out_dir=str(out), ledger_path=str(ledger), policy_path=str(policy),
                           release_id=rid)


def _report_text(res: dict) -> str:
    return "\n".join(p.read_text() for p in sorted(Path(res["out"]).rglob("*.md")))


def test_a_users_streams_share_the_per_user_windows(three_streams_csv, tmp_path):
    policy, ledger = _setup(tmp_path)
    res = _release(three_streams_csv, policy, ledger, tmp_path / "out", "2", "full")
    counts = res["manifest"]["counts"]
    assert counts["users_released"] == 1 and counts["users_denied"] == 1
    assert "per user over all streams" in res["manifest"]["units"]
    assert "per user, over all streams" in _report_text(res)
    led = Ledger(ledger)
    rows = {(b["user_id"], b["stream_id"]): b["spent"] for b in led.balances("meters")}
    assert rows == {("meter-1", ""): 2, ("meter-3", ""): 0}  # one per-user row each
    # at ε/3 per stream the three streams of meter-3 fit in its windows; meter-1, whose
    # windows are full after the first release, is denied
    third = _release(three_streams_csv, policy, ledger, tmp_path / "out", "2/3", "third")
    assert third["manifest"]["counts"]["users_released"] == 1
    rows = {(b["user_id"], b["stream_id"]): b["spent"] for b in led.balances("meters")}
    assert rows == {("meter-1", ""): 2, ("meter-3", ""): 2}
    assert led.verify().ok
    # what the release charged meter-3 per window: 2/3 on each stream, 2 over all three
    charges = [c for c in led.release_charges("third") if c["user_id"] == "meter-3"]
    assert {c["window"] for c in charges} == {Fraction(2, 3)}
    assert {c["user_window"] for c in charges} == {Fraction(2)}
    report = (Path(third["out"]) / "report.md").read_text()
    charged = report.split("## What each user was charged by this release", 1)[1]
    assert "summed over all of its streams" in charged.split("##", 1)[0]
    assert "| 1 | 2 | 2 | 2 |" in charged.split("##", 1)[0]  # users charged, min, median, max


def test_a_per_stream_domain_admits_k_eps_and_says_so(three_streams_csv, tmp_path):
    policy, ledger = _setup(tmp_path, 'wevent_budget = "per_stream"')
    res = _release(three_streams_csv, policy, ledger, tmp_path / "out", "2", "full")
    assert res["manifest"]["counts"]["users_released"] == 2
    assert "per stream" in res["manifest"]["units"]
    assert "a user with k streams has k·ε per window" in _report_text(res)
    rows = {(b["user_id"], b["stream_id"]): b["spent"] for b in Ledger(ledger).balances("meters")}
    assert rows == {("meter-1", "s0"): 2, ("meter-3", "s0"): 2, ("meter-3", "s1"): 2,
                    ("meter-3", "s2"): 2}
