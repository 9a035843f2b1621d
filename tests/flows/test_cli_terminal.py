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


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PRIVPIPE_HOME"] = str(home)
    return subprocess.run([str(PRIVPIPE), *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_failed_release_prints_one_line_not_a_traceback(tmp_path, curves_csv, policy_file):
    res = _run(["release", "curves", str(curves_csv), "--domain", "nope", "--epsilon", "1",
                "--policy", str(policy_file), "--out", str(tmp_path / "out")], tmp_path / "home")
    both = res.stdout + res.stderr
    assert res.returncode == 2, both
    assert "unknown domain 'nope'" in res.stderr, both
    assert "Traceback" not in both, both
    assert "Encountered exception" not in both, both


def test_verbose_release_shows_prefect_logs(tmp_path, curves_csv, policy_file):
    res = _run(["release", "curves", str(curves_csv), "--domain", "nope", "--epsilon", "1",
                "--policy", str(policy_file), "--out", str(tmp_path / "out"), "--verbose"],
               tmp_path / "home")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Encountered exception" in res.stdout + res.stderr
