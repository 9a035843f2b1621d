"""Key files an operator or a co-tenant could bend, and storage that fails under the ledger.

Written as attacks first: a symlinked key, a key owned by another user, a
key that is not a regular file; a full disk (a tiny tmpfs when this machine
lets us mount one, and a file-size limit, which works everywhere) at the
moment a reserve commits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest
from ledger_helpers import POLICY, POLICY_ENTRIES, PYTHON, REPO, subprocess_env

from ledger import Ledger, LedgerOpenError, Request, key_path_for
from schemas.errors import EXIT_BAD_INPUT
from schemas.policy import parse_policy


def test_a_symlinked_noise_key_is_refused(led, ledger_path, tmp_path):
    kp = key_path_for(ledger_path)
    real = tmp_path / "elsewhere.key"
    shutil.move(kp, real)
    os.symlink(real, kp)  # a key the ledger's directory does not hold
    with pytest.raises(LedgerOpenError, match="symbolic link") as err:
        Ledger(ledger_path)
    assert err.value.exit_code == EXIT_BAD_INPUT


def test_a_noise_key_owned_by_another_user_is_refused(led, ledger_path):
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(key_path_for(ledger_path), 65534, 65534)
    with pytest.raises(LedgerOpenError, match="owned by uid 65534"):
        Ledger(ledger_path)


def test_a_noise_key_that_is_not_a_regular_file_is_refused(led, ledger_path):
    kp = key_path_for(ledger_path)
    kp.unlink()
    os.mkfifo(kp, 0o600)  # opening a FIFO for reading would block: refused before opening
    with pytest.raises(LedgerOpenError, match="not a regular file"):
        Ledger(ledger_path)


FILL_AND_RESERVE = textwrap.dedent("""
    import resource, signal, sys
    from ledger import Ledger, Request
    from ledger.errors import LedgerStorageError
    path, limit = sys.argv[1], int(sys.argv[2])
    led = Ledger(path, lock_timeout=30)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        led.reserve("r", [Request(f"u{i}", "ais", amount=0.001) for i in range(20000)],
                    mechanism="m", parameters={})
    except LedgerStorageError as err:
        print("STORAGE", err.exit_code, err)
    except Exception as err:
        print("OTHER", type(err).__name__, err)
    else:
        print("COMMITTED")
""")


def test_a_write_that_the_file_system_refuses_is_a_storage_error_not_a_conflict(led, ledger_path):
    size = max(os.path.getsize(ledger_path), os.path.getsize(str(ledger_path) + ".wal")
               if os.path.exists(str(ledger_path) + ".wal") else 0)
    out = subprocess.run([PYTHON, "-c", FILL_AND_RESERVE, str(ledger_path), str(size + 4096)],
                         cwd=REPO, env=subprocess_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.startswith("STORAGE 2"), out.stdout + out.stderr
    assert "File too large" in out.stdout and "nothing was committed" in out.stdout
    rep = Ledger(ledger_path).verify()  # the failed transaction left nothing behind
    assert rep.ok and rep.entries_checked == POLICY_ENTRIES


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the file-size limit test covers the case)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_is_reported_at_once_as_a_full_disk(tiny_fs):
    path = tiny_fs / "ledger.duckdb"
    led = Ledger.init(path, lock_timeout=30)
    led.apply_policy(parse_policy(POLICY))
    with open(tiny_fs / "filler", "wb") as f:  # fill the file system
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    from ledger.errors import LedgerStorageError

    with pytest.raises(LedgerStorageError, match="No space left on device") as err:
        led.reserve("r", [Request(f"u{i}", "ais", amount=0.001) for i in range(20000)],
                    mechanism="m", parameters={})
    assert err.value.exit_code == EXIT_BAD_INPUT and "conflicting" not in str(err.value)
    (tiny_fs / "filler").unlink()
    rep = Ledger(path).verify()
    assert rep.ok and rep.entries_checked == POLICY_ENTRIES
