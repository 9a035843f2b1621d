"""Bad arguments, policy, domain, input path, ledger and key fail before Prefect starts.

Each case runs the installed console script with a fresh PRIVPIPE_HOME and no
Prefect configuration: it must exit 2 with a message naming the real cause,
print nothing on stdout, and leave no Prefect home behind (the temporary
server, which would create it, never started).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PRIVPIPE = Path(sys.executable).with_name("privpipe")


@pytest.fixture(scope="module")
def home_built(tmp_path_factory, policy_file) -> Path:
    """A PRIVPIPE_HOME with a ledger under the test policy, built once per module."""
    from ledger import Ledger
    from schemas.policy import load_policy

    h = tmp_path_factory.mktemp("failfast") / "home"
    Ledger.init(h / "ledger.duckdb").apply_policy(load_policy(policy_file))
    return h


@pytest.fixture()
def home(home_built, tmp_path) -> Path:
    """A private copy of `home_built` (ledger, keys, pin, counter; modes kept)."""
    return Path(shutil.copytree(home_built, tmp_path / "home", symlinks=True))


def _run(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(home), HOME=str(cwd))  # HOME: no ~/.prefect profile
    return subprocess.run([str(PRIVPIPE), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120, check=False)


def _curves(csv: Path, policy: Path, *extra: str) -> list[str]:
    return ["release", "curves", str(csv), "--policy", str(policy), *extra]


def _edited(tmp: Path, csv: Path, edit) -> Path:
    """A copy of `csv` whose lines went through `edit` (list of lines -> list of lines)."""
    out = tmp / f"edited-{len(list(tmp.glob('edited-*')))}.csv"
    out.write_text("".join(edit(csv.read_text().splitlines(keepends=True))))
    return out


def _malformed(edit, *extra: str):
    return lambda t, c, p: _curves(_edited(t, c, edit), p, "--domain", "tracks", "--epsilon",
                                   "1", *extra)


CASES = {
    # issue #29's trial: these failed after Prefect started, 3-10 s in, leaving Failed runs
    "wrong header": (_malformed(lambda ls: ["user,curve_id,t,x,y\n", *ls[1:]]),
                     "column 'user_id': rule 'required column': column is missing"),
    "truncated last row": (_malformed(lambda ls: [*ls, "u1,0"]),
                           "rule 'csv field count': line {n} has 2 fields, the header has 5"),
    "row with an extra field": (
        _malformed(lambda ls: [ls[0], "u2,1,2020-01-01T00:00:00Z,99,3,7\n", *ls[1:]]),
        "row 1: rule 'csv field count': line 2 has 6 fields, the header has 5"),
    "unterminated quote": (_malformed(lambda ls: [*ls[:3], 'user-0,"c0,1,2,3\n', *ls[3:]]),
                           "row 3: rule 'csv quoting': line 4: a quoted field is not closed"),
    "value column of text": (_malformed(lambda ls: [ls[0], *(
        ",".join([*ln.split(",")[:3], "a", "b\n"]) for ln in ls[1:])]),
        "column 'x': rule 'dtype': no value of this column parses as numbers"),
    "epsilon 1e400": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1e400"),
                      "--epsilon must be in [1e-9, 1e9]"),
    "rho 1e-400": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--rho", "1e-400"),
                   "--rho must be in [1e-9, 1e9]"),
    "streams epsilon 1e400": (lambda t, c, p: ["release", "streams", str(c), "--policy", str(p),
                                               "--domain", "meters", "--epsilon", "1e400"],
                              "--epsilon must be in [1e-9, 1e9]"),
    "missing input": (lambda t, c, p: _curves(t / "missing.csv", p, "--domain", "tracks",
                                              "--epsilon", "1"), "no such file"),
    "input is a directory": (lambda t, c, p: _curves(t, p, "--domain", "tracks",
                                                     "--epsilon", "1"), "is a directory"),
    "epsilon 0": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "0"),
                  "--epsilon must be > 0"),
    "epsilon not a number": (lambda t, c, p: _curves(c, p, "--domain", "tracks",
                                                     "--epsilon", "abc"),
                             "--epsilon must be a positive number"),
    "epsilon and rho": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                                "--rho", "1"), "exactly one of"),
    "unknown domain": (lambda t, c, p: _curves(c, p, "--domain", "nope", "--epsilon", "1"),
                       "unknown domain 'nope'"),
    "streams domain for curves": (lambda t, c, p: _curves(c, p, "--domain", "meters",
                                                          "--epsilon", "1"),
                                  "holds streams, not curves"),
    "rho on a GP domain": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--rho", "1"),
                           "GP (ε) domain"),
    "unknown mechanism": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                                  "--mechanism", "magic"),
                          "unknown curves mechanism 'magic'"),
    "mechanism of another metric": (lambda t, c, p: _curves(c, p, "--domain", "tracks",
                                                            "--epsilon", "1", "--mechanism",
                                                            "baseline"),
                                    "is private w.r.t. dist_inf"),
    "unknown option": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                               "--options", '{"nope": 1}'),
                       "has no option 'nope'"),
    "unknown task runner": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon",
                                                    "1", "--task-runner", "spark"),
                            "unknown task runner"),
    "remote dask workers without a reachable Prefect API": (
        lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1", "--task-runner",
                                "tcp://dask-scheduler.example:8786"),
        "task runner tcp://dask-scheduler.example:8786: its workers run on other hosts and "
        "report to the Prefect API, but no Prefect API is configured"),
    "out is a file": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                              "--out", str(c)), "is not a directory"),
    "bad options": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                            "--options", "[1]"), "JSON object"),
    "ledger missing": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                               "--ledger", str(t / "none.duckdb")),
                       "no ledger at"),
    "ledger is a directory": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon",
                                                      "1", "--ledger", str(t)),
                              "is a directory, not a ledger file"),
    "ledger is a CSV": (lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1",
                                                "--ledger", str(c)), "is not a privpipe ledger"),
    "option the mechanism does not take": (
        lambda t, c, p: _curves(c, p, "--domain", "tracks", "--epsilon", "1", "--mechanism",
                                "privfuncselect", "--options", '{"degree": 8}'),
        "mechanism 'privfuncselect' has no option 'degree'; allowed: max_terms, threshold1"),
    "unknown streams mechanism": (lambda t, c, p: ["release", "streams", str(c), "--policy",
                                                   str(p), "--domain", "meters", "--epsilon",
                                                   "1", "--mechanism", "magic"],
                                  "unknown streams mechanism 'magic'"),
    "streams epsilon above cap": (lambda t, c, p: ["release", "streams", str(c), "--policy",
                                                   str(p), "--domain", "meters", "--epsilon",
                                                   "3"], "exceeds the domain's cap"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_release_errors_appear_before_prefect_starts(case, tmp_path, home, curves_csv,
                                                     policy_file):
    make_args, expected = CASES[case]
    res = _run(make_args(tmp_path, curves_csv, policy_file), home, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    # the truncated row is the file's last line: its number is the file's line count + 1
    expected = expected.format(n=len(curves_csv.read_text().splitlines()) + 1)
    assert expected in " ".join(res.stderr.split()), res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    assert not (home / "prefect").exists(), "Prefect was started before the checks"


def test_ledger_without_its_key_says_so(tmp_path, home, curves_csv, policy_file):
    (home / "ledger.duckdb.key").unlink()
    res = _run(_curves(curves_csv, policy_file, "--domain", "tracks", "--epsilon", "1"), home,
               tmp_path)
    assert res.returncode == 2
    assert "noise key" in res.stderr and "missing" in res.stderr, res.stderr
    assert not (home / "prefect").exists()


def test_domain_missing_from_the_ledger_is_named(tmp_path, curves_csv, policy_file):
    from ledger import Ledger

    h = tmp_path / "bare"
    Ledger.init(h / "ledger.duckdb")  # no policy applied
    res = _run(_curves(curves_csv, policy_file, "--domain", "tracks", "--epsilon", "1"), h,
               tmp_path)
    assert res.returncode == 2
    assert "unknown domain 'tracks'" in res.stderr and "policy apply" in res.stderr, res.stderr
    assert not (h / "prefect").exists()


@pytest.mark.prefect
def test_a_stream_continued_at_another_epsilon_is_a_parameter_error(tmp_path, home,
                                                                    streams_csv, policy_file):
    """Issue #29: continuing a stream at another ε/w rejected every user as invalid input
    (``stream_other_epsilon``) after Prefect started. Now: exit 2 before Prefect, naming
    the streams' ε/w and the two fixes."""
    import pandas as pd

    from flows import preflight
    from flows.release import release_streams

    df = pd.read_csv(streams_csv)
    day1, day2 = tmp_path / "day1.csv", tmp_path / "day2.csv"
    df[df["t"] < 120].to_csv(day1, index=False)
    df[df["t"] >= 120].to_csv(day2, index=False)
    ledger = home / "ledger.duckdb"
    release_streams(input_path=str(day1), domain="meters", epsilon="1", out_dir=str(tmp_path),
                    ledger_path=str(ledger))  # in this process's harness: ε/w = 1/4
    home_2 = tmp_path / "home2"  # a fresh home: Prefect would create home2/prefect
    res = _run(["release", "streams", str(day2), "--domain", "meters", "--epsilon", "2",
                "--ledger", str(ledger)], home_2, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    text = " ".join(res.stderr.split())
    # w = 4 (the policy): ε 2 per window is 1/2 per step; day 1 drew 1 / 4 = 1/4 per step,
    # which ε = 1/4 * 4 = 1 per window continues
    assert "--epsilon 2 is ε/w = 1/2 per step (w = 4)" in text, text
    assert "3 stream(s) of this input" in text and "3 at ε/w = 1/4" in text
    assert "steps 0-119" in text and "continue them with --epsilon 1" in text
    assert "new stream ids" in text
    assert "stream_other_epsilon" not in text and res.stdout == ""
    assert not (home_2 / "prefect").exists(), "Prefect was started before the checks"
    # validate --ledger (which said "0 rejected") now says which ε continues the streams
    res = _run(["validate", str(day2), "--ledger", str(ledger), "--domain", "meters",
                "--format", "json"], home_2, tmp_path)
    assert res.returncode == 0, res.stderr
    fields = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    assert fields["continues released streams"] == (
        "3 stream(s) released at ε/w = 1/4 (continue with --epsilon 1)")
    # the fixes pass the checks: the stream's ε, or the same data as new streams
    kw = dict(domain="meters", out=tmp_path, ledger_path=ledger)
    assert preflight.check_streams_release(input_path=day2, epsilon="1", **kw).amount == 1
    renamed = tmp_path / "renamed.csv"
    pd.read_csv(day2).assign(stream_id="s1").to_csv(renamed, index=False)
    assert preflight.check_streams_release(input_path=renamed, epsilon="2", **kw).amount == 2


def test_the_cli_checks_the_flows_amount_range():
    """preflight.AMOUNT_RANGE (no Prefect import) is the range the flows' specs enforce."""
    from flows import preflight
    from tasks.privatize import AMOUNT_RANGE

    assert preflight.AMOUNT_RANGE == AMOUNT_RANGE


def test_an_id_the_ledger_refuses_is_left_to_the_read(tmp_path, home, streams_csv):
    """The continuation check skips an id the ledger refuses (too long: the release's read
    rejects that user alone); it must not refuse the whole release over it."""
    import pandas as pd

    from flows import preflight

    f = tmp_path / "ids.csv"
    df = pd.read_csv(streams_csv)
    df.loc[df["user_id"] == "meter-1", "user_id"] = "m" * 70_000  # > ledger.checks.MAX_ID_CHARS
    df.to_csv(f, index=False)
    done = preflight.check_streams_release(input_path=f, domain="meters", epsilon="1",
                                           out=tmp_path, ledger_path=home / "ledger.duckdb")
    assert done.amount == 1
