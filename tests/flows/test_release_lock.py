"""Two runs of one release id serialise on the release's lock; the second replays (issue #26).

Attack: a retried schedule or a second worker starts the same release while the
first is still running. Without a lock both draw the same noise and both
publish into OUT/<release_id>/; the second can even publish first while the
first is held between its reserve and its chunks. Here run A is held right
after its reserve (fault point ``after_reserve`` in pause mode) and run B is
started with the same parameters: B must wait on A's lock (it says so on
stderr) and publish nothing while A is held; once A goes on, A publishes and B
replays A's release. The lock file itself is checked against a planted symlink.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from files.release_lock import lock_path, release_lock
from schemas.errors import FileSystemError

pytestmark = [pytest.mark.slow]

PRIVPIPE = Path(sys.executable).with_name("privpipe")
WAITING = "another run of it is in progress"


def _env(home: Path, tmp_path: Path, api_url: str, **extra: str) -> dict[str, str]:
    """The runs' environment: the session's Prefect server (the lock is files, not Prefect)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(home), HOME=str(tmp_path), PREFECT_API_URL=api_url, **extra)
    return env


def _until(condition, seconds: float = 300.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_second_run_waits_for_the_first_and_replays(tmp_path, policy_file, curves_csv,
                                                     prefect_api):
    from ledger import Ledger
    from schemas.policy import load_policy

    home = tmp_path / "home"
    Ledger.init(home / "ledger.duckdb").apply_policy(load_policy(policy_file))
    out = tmp_path / "out"
    args = [str(PRIVPIPE), "release", "curves", str(curves_csv), "--domain", "tracks",
            "--epsilon", "1/8", "--out", str(out), "--release-id", "twice", "--chunk-users", "2"]
    paused, resume = tmp_path / "a.paused", tmp_path / "a.resume"
    env_a = _env(home, tmp_path / "a", prefect_api, PRIVPIPE_FAULT_AT="after_reserve",
                 PRIVPIPE_FAULT_MODE="pause", PRIVPIPE_FAULT_PAUSED=str(paused),
                 PRIVPIPE_FAULT_RESUME=str(resume))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with open(tmp_path / "a.err", "w") as err_a, open(tmp_path / "b.err", "w") as err_b:
        a = subprocess.Popen([*args, "--format", "json"], env=env_a, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=err_a, text=True)
        b = None
        try:
            assert _until(lambda: paused.exists() or a.poll() is not None), "A never paused"
            assert a.poll() is None, (tmp_path / "a.err").read_text()
            env_b = _env(home, tmp_path / "b", prefect_api)
            b = subprocess.Popen([*args, "--format", "json"], env=env_b, cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=err_b, text=True)
            b_err = tmp_path / "b.err"
            assert _until(lambda: WAITING in b_err.read_text() or b.poll() is not None)
            assert b.poll() is None and WAITING in b_err.read_text(), (
                "the second run did not wait for the first: " + b_err.read_text()[-2000:])
            assert not (out / "twice").exists()  # nothing published while A is held
        finally:
            resume.touch()
            out_a, _ = a.communicate(timeout=600)
            out_b, _ = b.communicate(timeout=600) if b is not None else ("", None)
    assert (a.returncode, b.returncode) == (0, 0), (tmp_path / "b.err").read_text()[-2000:]
    (first,), (second,) = json.loads(out_a), json.loads(out_b)
    assert first["release_id"] == second["release_id"] == "twice"
    manifest = json.loads((out / "twice" / "manifest.json").read_text())
    assert second["released"] == first["released"] == manifest["counts"]["users_released"] > 0


def test_the_lock_file_is_never_followed_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    path = lock_path(tmp_path / "out", "r1")
    path.parent.mkdir(parents=True, mode=0o700)
    path.symlink_to(target)
    with pytest.raises(OSError), release_lock(tmp_path / "out", "r1"):
        pass
    assert target.read_text() == "keep"


def test_a_locks_directory_of_another_kind_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".locks").symlink_to(tmp_path)
    with pytest.raises(FileSystemError), release_lock(tmp_path / "out", "r1"):
        pass
