"""Day 2 of a stream continues day 1 from another output root, through the ledger's store.

A stream release keeps its published ``samples.parquet`` in the ledger's store
(`ledger.published`); a later release whose ``--out`` is another directory
(another host) reads day 1's reports from there, so it publishes exactly the
bytes of the same two days released into one output root. A failure to keep
the file neither unpublishes nor charges twice, and a rerun keeps it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from data import households as hh
from flows.release import release_streams
from ledger import Ledger
from ledger.published import store_dir
from schemas.policy import load_policy

pytestmark = pytest.mark.prefect


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> tuple[str, str]:
    """(day 1-2 CSV, day 3-4 CSV) of 12 households, half-hourly."""
    d = tmp_path_factory.mktemp("days")
    df = hh.households(12, 4, seed=5, missing_day_rate=0.0)
    first, second = d / "d12.csv", d / "d34.csv"
    df[df["t"] < 96].to_csv(first, index=False)
    df[df["t"] >= 96].to_csv(second, index=False)
    return str(first), str(second)


def _release(csv: str, led: Path, out: Path, policy_file: Path, rid: str) -> dict:
    return release_streams(input_path=csv, domain="meters", epsilon="1", out_dir=str(out),
                           ledger_path=str(led), policy_path=str(policy_file),
                           chunk_users=5, release_id=rid)


def _parquet(rdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(rdir.glob("*.parquet"))}


def _balances(led: Path) -> list[tuple]:
    return sorted((b["user_id"], b["stream_id"], b["spent"])
                  for b in Ledger(led).balances("meters"))


def test_day_two_on_another_output_root_continues_day_one(days, policy_file, tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    Ledger.init(template / "ledger.duckdb").apply_policy(load_policy(policy_file))
    for name in ("one", "two"):
        shutil.copytree(template, tmp_path / name)  # the same keys: the same noise
    one, two = tmp_path / "one" / "ledger.duckdb", tmp_path / "two" / "ledger.duckdb"

    # one output root: day 2 reads day 1's samples beside its own
    _release(days[0], one, tmp_path / "out", policy_file, "day1")
    ref = _release(days[1], one, tmp_path / "out", policy_file, "day2")
    assert ref["manifest"]["history"]["releases"] == ["day1"]

    # two output roots; day 1's samples could not be kept at first (a symlink planted in
    # place of the store): day 1 is published anyway, charged once
    store = store_dir(two)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store.symlink_to(elsewhere)
    first = _release(days[0], two, tmp_path / "host-a", policy_file, "day1")
    assert Path(first["out"], "samples.parquet").is_file() and Ledger(two).verify().ok
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    store.unlink()
    # a rerun of day 1 replays it (no new charge) and keeps its samples now
    before = _balances(two)
    _release(days[0], two, tmp_path / "host-a", policy_file, "day1")
    assert _balances(two) == before
    assert [p.suffix for p in store.iterdir()] == [".parquet"]

    second = _release(days[1], two, tmp_path / "host-b", policy_file, "day2")
    assert not (tmp_path / "host-b" / "day1").exists()  # day 1 is not under this root
    hist = second["manifest"]["history"]
    assert hist["releases"] == ["day1"] and hist["skipped"] == []
    rec = pd.read_parquet(Path(second["out"]) / "reconstruction.parquet")
    assert rec["step"].min() == 0  # day 1's reports are part of the reconstruction
    assert _parquet(Path(second["out"])) == _parquet(Path(ref["out"]))
    assert _parquet(Path(first["out"])) == _parquet(tmp_path / "out" / "day1")
    assert _balances(two) == _balances(one)  # every user charged exactly once
    assert Ledger(two).verify().ok
