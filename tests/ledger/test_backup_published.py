"""`ledger backup`/`restore` carry the ledger's store of published files, checked both ways.

Attacks first: day 2 of a stream on another host after a restore (it used to
stop: "published samples are missing"); a backup file edited after the
backup (refused on restore, named; nothing restored); a store file edited
before the backup (refused, named; nothing kept in --out); a symlink in the
store (never followed); a file no settled release names (never copied, and a
backup listing one is refused).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import textwrap
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from ledger_helpers import ledger_cli as _cli

from ledger import Ledger, Request
from ledger.published import store_dir
from schemas.errors import EXIT_INTEGRITY

DATA = b"PAR1 published samples of one release " * 50
SHA = hashlib.sha256(DATA).hexdigest()
NAME = "samples.parquet"
STORED = f"{SHA}.parquet"
KEY_FILES = ("ledger.duckdb.key", "ledger.duckdb.sign", "ledger.duckdb.pub",
             "ledger.duckdb.pin")


def _settle(led: Ledger, rid: str, data: bytes = DATA) -> None:
    """A release settled through `led` whose manifest names `data`, kept in the store."""
    led.reserve(rid, [Request("u1", "ais", amount=Fraction(1, 100))], mechanism="test",
                parameters={"rid": rid})
    sha = hashlib.sha256(data).hexdigest()
    led.record_release(rid, {"flow": "release_streams", "sha256": {NAME: sha}}, "settled")
    led.put_published(rid, NAME, data)


def _new_host(backup: Path, where: Path) -> Path:
    """A fresh directory with the ledger's keys (from a backup taken with --include-keys)."""
    where.mkdir(mode=0o700)
    for name in KEY_FILES:
        if (backup / name).exists():
            shutil.copy2(backup / name, where / name)
    return where / "ledger.duckdb"


def _backup(led: Ledger, out: Path, *extra: str) -> tuple[int, str]:
    return _cli("backup", "--out", out, "--ledger", led.path, *extra)


def test_a_backup_copies_the_named_store_files_and_a_restore_puts_them_back(led, tmp_path):
    _settle(led, "r1")
    store = store_dir(led.path)
    stray = b"bytes no release names"
    (store / f"{hashlib.sha256(stray).hexdigest()}.parquet").write_bytes(stray)
    code, out = _backup(led, tmp_path / "b", "--include-keys")
    assert code == 0, out
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["published"] == [{"file": STORED, "sha256": SHA, "size": len(DATA),
                                      "release_id": "r1", "name": NAME}]
    assert os.listdir(tmp_path / "b" / "published") == [STORED]  # the stray file is left out
    assert (tmp_path / "b" / "published").stat().st_mode & 0o777 == 0o700
    target = _new_host(tmp_path / "b", tmp_path / "host")
    code, out = _cli("restore", tmp_path / "b", "--ledger", target)
    assert code == 0, out
    kept = store_dir(target) / STORED
    assert kept.read_bytes() == DATA and kept.stat().st_mode & 0o777 == 0o600
    assert store_dir(target).stat().st_mode & 0o777 == 0o700
    assert Ledger(target).published("r1", NAME, tmp_path / "copy").read_bytes() == DATA


def test_a_published_file_edited_in_the_backup_is_refused_on_restore(led, tmp_path):
    _settle(led, "r1")
    assert _backup(led, tmp_path / "b", "--include-keys")[0] == 0
    edited = tmp_path / "b" / "published" / STORED
    edited.write_bytes(DATA.replace(b"one", b"two"))  # the attack: same size, other bytes
    target = _new_host(tmp_path / "b", tmp_path / "host")
    code, out = _cli("restore", tmp_path / "b", "--ledger", target)
    assert code == EXIT_INTEGRITY and str(edited) in out.replace("\n", "") and \
        "nothing was restored" in out
    assert not target.exists() and not store_dir(target).exists()


def test_a_backup_listing_a_file_no_settled_release_names_is_refused(led, tmp_path):
    _settle(led, "r1")
    assert _backup(led, tmp_path / "b", "--include-keys")[0] == 0
    other = b"planted bytes"
    osha = hashlib.sha256(other).hexdigest()
    (tmp_path / "b" / "published" / f"{osha}.parquet").write_bytes(other)
    mf = tmp_path / "b" / "manifest.json"
    m = json.loads(mf.read_text())
    m["published"].append({"file": f"{osha}.parquet", "sha256": osha, "size": len(other),
                           "release_id": "r1", "name": NAME})
    mf.write_text(json.dumps(m))
    target = _new_host(tmp_path / "b", tmp_path / "host")
    code, out = _cli("restore", tmp_path / "b", "--ledger", target)
    assert code == EXIT_INTEGRITY and "no settled release" in out and not target.exists()


def test_a_store_file_edited_before_the_backup_is_refused_and_nothing_kept(led, tmp_path):
    _settle(led, "r1")
    stored = store_dir(led.path) / STORED
    stored.write_bytes(DATA.replace(b"one", b"two"))
    code, out = _backup(led, tmp_path / "b")
    flat = out.replace("\n", "")
    assert code == EXIT_INTEGRITY and "r1/samples.parquet" in flat and str(stored) in flat
    assert os.listdir(tmp_path / "b") == []
    stored.unlink()  # the operator removes it: the backup goes without it
    code, out = _backup(led, tmp_path / "b")
    assert code == 0, out
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["published"] == []


def test_a_symlink_in_the_store_is_not_followed_by_a_backup(led, tmp_path):
    _settle(led, "r1")
    stored = store_dir(led.path) / STORED
    secret = tmp_path / "secret"
    secret.write_bytes(DATA)  # even the right bytes are not read through a link
    stored.unlink()
    stored.symlink_to(secret)
    code, out = _backup(led, tmp_path / "b")
    assert code == EXIT_INTEGRITY and "without following" in out.replace("\n", " ")
    assert os.listdir(tmp_path / "b") == []


# ------------------------------------------------------------------ day 2 on another host

@pytest.fixture()
def stream_policy(tmp_path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(textwrap.dedent("""
        [domains.meters]
        kind = "streams"
        public = { rejections = true }
        notion = "wevent"
        cap = "2"
        w = 4
        time_unit = "step"
        value_range = [0.0, 10.0]
        value_unit = "kW"
    """))
    return path


def _days(tmp_path: Path) -> tuple[str, str]:
    from data import households as hh

    df = hh.households(6, 4, seed=5, missing_day_rate=0.0)
    first, second = tmp_path / "d12.csv", tmp_path / "d34.csv"
    df[df["t"] < 96].to_csv(first, index=False)
    df[df["t"] >= 96].to_csv(second, index=False)
    return str(first), str(second)


def _release(csv: str, led: Path, out: Path, policy_file: Path, rid: str) -> dict:
    from flows.release import release_streams

    return release_streams(input_path=csv, domain="meters", epsilon="1", out_dir=str(out),
                           ledger_path=str(led), policy_path=str(policy_file),
                           chunk_users=5, release_id=rid)


@pytest.mark.prefect
def test_day_two_continues_on_another_host_after_a_restore(prefect_api, stream_policy,
                                                           tmp_path):
    """Attack: day 1 on host A, its ledger backed up and restored on host B, day 2 there.

    Before the store was backed up, day 2 stopped ("published samples are missing").
    """
    from schemas.policy import load_policy

    d1, d2 = _days(tmp_path)
    a = tmp_path / "a" / "ledger.duckdb"
    Ledger.init(a).apply_policy(load_policy(stream_policy))
    _release(d1, a, tmp_path / "out-a", stream_policy, "day1")
    assert Ledger(a).backup(tmp_path / "b", include_keys=True)["published"]
    b = _new_host(tmp_path / "b", tmp_path / "host-b")
    code, out = _cli("restore", tmp_path / "b", "--ledger", b)
    assert code == 0, out
    second = _release(d2, b, tmp_path / "out-b", stream_policy, "day2")
    assert second["manifest"]["history"]["releases"] == ["day1"]
    assert not (tmp_path / "out-b" / "day1").exists()  # day 1 is not under this root
    # day 1's reports are part of day 2's reconstruction (bytes equal to one output root:
    # tests/flows/test_stream_history_store.py)
    assert pd.read_parquet(Path(second["out"]) / "reconstruction.parquet")["step"].min() == 0
    assert Ledger(b).verify().ok
