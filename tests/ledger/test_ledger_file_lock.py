"""DuckDB's lock on the ledger file survives everything this process does to the file.

DuckDB locks its database file with POSIX ``fcntl`` record locks, and POSIX
drops every such lock a process holds on a file as soon as the process closes
*any* descriptor of that file. So a thread that merely opens the ledger to read
its first bytes (``Ledger(path)`` checks the DuckDB magic) while another thread
of the same process is inside a transaction used to release that transaction's
lock: a second process could then open the file for writing at the same time,
and the two wrote over each other's blocks (the load test saw a release fail
with "Could not read enough bytes ... truncated or corrupted file?").
"""

from __future__ import annotations

import subprocess
import threading

from ledger_helpers import PYTHON, REPO, subprocess_env

from ledger import Ledger
from ledger.paths import is_duckdb_file
from ledger.storage import Store

PROBE = ("import duckdb, sys\n"
         "try:\n"
         "    duckdb.connect(sys.argv[1]).close()\n"
         "except duckdb.IOException as err:\n"
         "    print('locked' if 'lock' in str(err) else f'error: {err}')\n"
         "else:\n"
         "    print('OPENED')\n")


def _second_process_opens(path) -> str:
    return subprocess.run([PYTHON, "-c", PROBE, str(path)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=REPO, timeout=120).stdout.strip()


def _while_a_transaction_is_open(path, action) -> str:
    """Run `action` in a thread while another thread holds a transaction; probe the lock."""
    inside, leave = threading.Event(), threading.Event()

    def hold(con):
        inside.set()
        leave.wait(60)

    holder = threading.Thread(target=Store(path, 30).transact, args=(hold,),
                              kwargs={"write": False})
    holder.start()
    try:
        assert inside.wait(30)
        other = threading.Thread(target=action)
        other.start()
        other.join(0.5)  # it may wait for the transaction: that is the fix
        return _second_process_opens(path)
    finally:
        leave.set()
        holder.join(60)
        other.join(60)


def test_the_lock_is_held_while_a_transaction_is_open(led):
    assert _while_a_transaction_is_open(led.path, lambda: None) == "locked"


def test_reading_the_magic_in_another_thread_keeps_the_lock(led):
    assert _while_a_transaction_is_open(led.path, lambda: is_duckdb_file(led.path)) == "locked"


def test_opening_the_ledger_in_another_thread_keeps_the_lock(led):
    assert _while_a_transaction_is_open(led.path, lambda: Ledger(led.path)) == "locked"


def test_the_magic_is_still_checked(led, tmp_path):
    assert is_duckdb_file(led.path)
    other = tmp_path / "x.csv"
    other.write_text("a,b\n1,2\n")
    assert not is_duckdb_file(other)
