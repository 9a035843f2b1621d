"""SIGKILL of the CLI mid-release leaves no process it started (issue #12, item 5).

Five releases are killed with SIGKILL at five points of the release (inside
the flow, after the temporary Prefect server started); after each, every
process whose environment carries this test's PRIVPIPE_HOME must be gone
within a few seconds (on main the temporary server lived on with ppid 1).
A sixth case kills the CLI from outside while it waits for the server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

PRIVPIPE = Path(sys.executable).with_name("privpipe")
KILL_POINTS = ("after_ingest", "after_reserve", "before_first_settle", "after_settle",
               "after_outputs")


def _started_by(marker: str) -> list[tuple[int, str]]:
    """Live processes whose environment contains `marker` (this test's PRIVPIPE_HOME)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if marker.encode() in (p / "environ").read_bytes():
                found.append((int(p.name), (p / "cmdline").read_bytes().replace(b"\0", b" ")
                              .decode(errors="replace")))
        except OSError:
            continue
    return found


def _gone(marker: str, seconds: float = 15.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + seconds
    while (left := _started_by(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture()
def home(tmp_path, policy_file) -> Path:
    from ledger import Ledger
    from schemas.policy import load_policy

    h = tmp_path / "home"
    Ledger.init(h / "ledger.duckdb").apply_policy(load_policy(policy_file))
    return h


def _env(home: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(home), HOME=str(tmp_path), **extra)
    return env


def _args(curves_csv: Path, policy_file: Path, out: Path, rid: str) -> list[str]:
    return [str(PRIVPIPE), "release", "curves", str(curves_csv), "--domain", "tracks",
            "--epsilon", "1/16", "--policy", str(policy_file), "--out", str(out),
            "--release-id", rid, "--chunk-users", "2"]


def test_five_sigkilled_releases_leave_no_process(tmp_path, home, curves_csv, policy_file):
    assert _started_by(str(home)) == []
    for point in KILL_POINTS:
        env = _env(home, tmp_path, PRIVPIPE_FAULT_AT=point, PRIVPIPE_FAULT_MODE="kill")
        res = subprocess.run(_args(curves_csv, policy_file, tmp_path / "out", f"kill-{point}"),
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                             check=False)
        assert res.returncode == -signal.SIGKILL, (point, res.returncode, res.stderr)
        assert _gone(str(home)) == [], f"left running after SIGKILL at {point}"
    # The killed releases rerun to completion (nothing else held the ledger or the port).
    res = subprocess.run(_args(curves_csv, policy_file, tmp_path / "out", "kill-after_reserve"),
                         env=_env(home, tmp_path), cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    assert _gone(str(home)) == []


def test_sigkill_while_the_server_starts(tmp_path, home, curves_csv, policy_file):
    proc = subprocess.Popen(_args(curves_csv, policy_file, tmp_path / "out", "early"),
                            env=_env(home, tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any("flows.prefect_server" in cmd for _, cmd in _started_by(str(home))):
        assert proc.poll() is None and time.monotonic() < deadline, "no server child seen"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert _gone(str(home)) == []
