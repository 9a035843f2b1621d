"""A co-tenant cannot hand privpipe its ledger, its home or its Prefect database.

Issue #26's attacks, replayed as a second user of the machine would: a
world-writable PRIVPIPE_HOME (anyone can plant a WAL or swap the ledger), a
ledger file owned by another user, a group-writable ledger, and a planted
Prefect database (0666, owned by ``nobody``) whose WAL the co-tenant would then
read. Each must be refused before anything is opened: exit 2, naming the path
and the fix, the ledger untouched.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import harness
import pytest

from ledger import Ledger

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root "
                             "(CI runs as root)")


@pytest.fixture()
def home(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    Ledger.init(home / "ledger.duckdb")
    return home


def _balance(home: Path, cwd: Path) -> harness.Run:
    return harness.run_cli(["ledger", "balance", "--format", "json"], harness.cli_env(home),
                           cwd=cwd, timeout=120)


def _refused(run: harness.Run, path: Path, fix: str) -> None:
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert str(path) in run.stderr and fix in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_the_ledger_in_an_untouched_private_home_opens(home, tmp_path):
    assert _balance(home, tmp_path).returncode == 0


def test_a_world_writable_home_is_refused(home, tmp_path):
    home.chmod(0o777)
    _refused(_balance(home, tmp_path), home, "chmod go-w")


def test_a_group_writable_ledger_is_refused(home, tmp_path):
    (home / "ledger.duckdb").chmod(0o660)
    _refused(_balance(home, tmp_path), home / "ledger.duckdb", "chmod go-w")


@as_root
def test_a_ledger_owned_by_another_user_is_refused(home, tmp_path):
    os.chown(home / "ledger.duckdb", NOBODY, NOBODY)
    _refused(_balance(home, tmp_path), home / "ledger.duckdb", "owned by uid 65534")


@as_root
def test_a_planted_wal_is_refused(home, tmp_path):
    wal = home / "ledger.duckdb.wal"
    wal.write_bytes(b"")
    os.chown(wal, NOBODY, NOBODY)
    _refused(_balance(home, tmp_path), wal, "owned by uid 65534")


@as_root
def test_a_planted_prefect_database_is_refused_before_prefect_starts(home, tmp_path):
    prefect_home = home / "prefect"
    prefect_home.mkdir(mode=0o700)
    db = prefect_home / "prefect.db"
    sqlite3.connect(db).close()
    db.chmod(0o666)
    os.chown(db, NOBODY, NOBODY)
    run = harness.run_cli(["audit", "--out", str(tmp_path / "audit")], harness.cli_env(home),
                          cwd=tmp_path, timeout=300)
    _refused(run, db, "owned by uid 65534")
    assert not (tmp_path / "audit").exists()
