"""What a user at a terminal sees when a release fails: one line, no traceback.

`CliRunner` does not see Prefect's console handler (it holds the real stderr),
so these run the installed console script in a subprocess and read both streams.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PRIVPIPE = Path(sys.executable).with_name("privpipe")


def _run(args: list[str], home: Path, api_url: str | None = None) -> subprocess.CompletedProcess:
    """The console script; its own temporary Prefect server unless `api_url` is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PRIVPIPE_HOME"] = str(home)
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return subprocess.run([str(PRIVPIPE), *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def _home_with_ledger(home: Path, policy_file: Path) -> Path:
    from ledger import Ledger
    from schemas.policy import load_policy

    Ledger.init(home / "ledger.duckdb").apply_policy(load_policy(policy_file))
    return home


def _missing_column_csv(tmp_path: Path) -> Path:
    """Passes the checks made before Prefect starts; ingestion (inside the flow) rejects it."""
    path = tmp_path / "no_y.csv"
    path.write_text("user_id,curve_id,t,x\nu1,c1,0,1.0\nu1,c1,1,2.0\n")
    return path


def test_failed_release_prints_one_line_not_a_traceback(tmp_path, policy_file):
    home = _home_with_ledger(tmp_path / "home", policy_file)
    res = _run(["release", "curves", str(_missing_column_csv(tmp_path)), "--domain", "tracks",
                "--epsilon", "1", "--policy", str(policy_file), "--out", str(tmp_path / "out")],
               home)
    both = res.stdout + res.stderr
    assert res.returncode == 2, both
    assert "error:" in res.stderr and "'y'" in res.stderr, both
    assert "Traceback" not in both, both
    assert "Encountered exception" not in both, both
    assert res.stdout == "", both  # errors never go to stdout


def test_quiet_and_verbose_releases(tmp_path, policy_file, curves_csv):
    home = _home_with_ledger(tmp_path / "home", policy_file)
    args = ["release", "curves", str(curves_csv), "--domain", "tracks", "--policy",
            str(policy_file), "--out", str(tmp_path / "out"), "--format", "json"]
    quiet = _run([*args, "--epsilon", "1/16", "--release-id", "bound", "--quiet"], home)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stderr == "" and '"released": 6' in quiet.stdout  # the result only
    # a successful release: -v shows the run's stage lines and its final state
    loud = _run([*args, "--epsilon", "1/16", "--release-id", "loud", "--verbose"], home)
    assert loud.returncode == 0, loud.stdout + loud.stderr
    assert "release loud: budget reserved for 6 user(s); 0 denied (budget)" in loud.stderr
    assert "release loud: settled 1 chunk(s) in the ledger" in loud.stderr
    assert "Finished in state Completed('release loud: 6 of 6 users released" in loud.stderr


def test_verbose_release_shows_prefect_logs(tmp_path, policy_file, curves_csv, prefect_api):
    # an error raised inside the flow (a missing column is now refused before Prefect
    # starts): the release id is bound to other parameters by a first run. Both runs use
    # the session's Prefect server (a configured one); the other tests start their own.
    home = _home_with_ledger(tmp_path / "home", policy_file)
    args = ["release", "curves", str(curves_csv), "--domain", "tracks", "--policy",
            str(policy_file), "--out", str(tmp_path / "out"), "--release-id", "bound"]
    first = _run([*args, "--epsilon", "1/16"], home, prefect_api)
    assert first.returncode == 0, first.stdout + first.stderr
    res = _run([*args, "--epsilon", "1/8", "--verbose"], home, prefect_api)
    both = res.stdout + res.stderr
    assert res.returncode == 2, both
    assert "Encountered exception" in both
    # an expected failure (a PrivpipeError) is one line per log record, then ours
    assert "Traceback" not in both, both
    assert res.stderr.rstrip().splitlines()[-1].startswith("error: release id 'bound' was "
                                                            "reserved with other parameters")
