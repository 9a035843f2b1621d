"""`privpipe.Session`: the analyst's API, DataFrames in and out, errors named by keyword.

The session must be a front end to the CLI's release path, not a second one: a
DataFrame and a CSV of the same values are one release (same fingerprint, same
id, charged once), the staged copy is private and gone afterwards, the tables
returned are the published files. Expected budgets are worked out by hand.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import flows.api
import privpipe
from flows.outcome import ReleaseNotMadeError
from schemas.errors import FileSystemError, ParameterError, PolicyError

REPO = Path(__file__).resolve().parents[2]
POLICY = {"domains": {
    "tracks": {"kind": "curves", "notion": "gp", "cap": "2", "time_unit": "s",
               "value_columns": ["x", "y"], "value_unit": "m",
               "public": {"duration": True, "points": True, "rejections": True}},
    "meters": {"kind": "streams", "notion": "wevent", "cap": "2", "w": 4, "time_unit": "step",
               "value_range": [0.0, 10.0], "value_unit": "kW",
               "public": {"rejections": True}}}}


def _doc_blocks() -> list[str]:
    """The python code blocks of docs/python-api.md's Session section, in order."""
    doc = (REPO / "docs" / "python-api.md").read_text()
    section = doc.split("## privpipe.Session", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_documented_session_runs(tmp_path, monkeypatch):
    blocks = _doc_blocks()
    assert len(blocks) == 2
    lines = [line for line in blocks[0].splitlines() if line.strip()]
    assert len(lines) <= 10, "one curve and one stream release in at most ten lines"
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    scope: dict[str, object] = {}
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, "docs/python-api.md", "exec"), scope)  # noqa: S102
    text = out.getvalue()
    curves, streams = scope["curves"], scope["streams"]
    assert curves["values"].shape == (30 * 1000, 4)  # 30 records on the 1000-point grid
    assert set(streams["reconstruction_units"].columns) >= {"user_id", "step", "value_hat"}
    # ε = 2000 per 10 s record hides 1/(2000·√9.99) mV ≈ 0.16 µV: the report says so
    assert any("protects almost nothing" in w for w in curves.warnings)
    assert "0.1582 µV" in curves.warnings[0]
    # the remaining budgets by hand: 5000 - 2000 per record; 10 - 5 per window
    assert "\n5\n" in text and " 3000 " in text
    assert scope["plan"].counts["users_denied"] == 30  # 2000 + 4000 > 5000: all denied
    assert not Path(scope["session"].work_dir).exists()  # closed: the temporary ledger is gone
    assert list(tmp_path.iterdir()) == []  # nothing written where the analyst stood


def _tracks(n_users: int = 4) -> pd.DataFrame:
    rows = []
    for u in range(n_users):
        for c in range(1 + u % 2):
            t = [float(i) for i in range(40)]
            rows.append(pd.DataFrame({"user_id": f"u{u}", "curve_id": f"c{c}", "t": t,
                                      "x": [3.0 * i + u for i in t],
                                      "y": [((i - 20) / 4) ** 2 for i in t]}))
    return pd.concat(rows, ignore_index=True)


@pytest.fixture()
def session(tmp_path):
    with privpipe.Session(POLICY, work_dir=tmp_path / "work") as s:
        yield s


def test_a_dataframe_and_a_csv_of_it_are_one_release(session, tmp_path):
    df = _tracks()
    rel = session.release(df, domain="tracks", epsilon="1/4")
    csv = tmp_path / "tracks.csv"
    df.to_csv(csv, index=False)
    again = session.release(csv, domain="tracks", epsilon=0.25)
    table = session.release(pa.Table.from_pandas(df), domain="tracks", epsilon="0.25")
    assert rel.release_id == again.release_id == table.release_id  # one fingerprint, one id
    assert rel.manifest["input_fingerprint"] == again.manifest["input_fingerprint"]
    # charged once: u0, u2 have one curve (1/4), u1, u3 two (1/2); the cap is 2
    assert session.remaining_budget("u0", domain="tracks") == Fraction(7, 4)
    assert session.remaining_budget("u1", domain="tracks") == Fraction(3, 2)
    assert session.remaining_budget("nobody", domain="tracks") == Fraction(2)
    every = session.remaining_budget(domain="tracks")
    assert sorted(every["user_id"]) == ["u0", "u1", "u2", "u3"]
    assert set(every["spent"]) == {Fraction(1, 4), Fraction(1, 2)}
    # the tables are the published files
    published = pq.read_table(rel.directory / rel.manifest["files"]["values"])
    assert rel.arrow("values").equals(published)
    pd.testing.assert_frame_equal(rel["values"], published.to_pandas())
    assert rel.names == ("curves", "segments", "values") and rel.counts["users_released"] == 4
    assert rel.report.is_file()
    assert list((session.work_dir / "inputs").iterdir()) == []  # the staged copies are gone


def test_the_staged_table_is_private_while_it_exists(session, monkeypatch):
    seen = {}
    real = flows.api.release_curves

    def spy(path, **kw):
        st = os.stat(path)
        seen.update(mode=stat.S_IMODE(st.st_mode), suffix=Path(path).suffix,
                    dir_mode=stat.S_IMODE(os.stat(Path(path).parent.parent).st_mode))
        return real(path, **kw)

    monkeypatch.setattr(flows.api, "release_curves", spy)
    session.dry_run(_tracks(), domain="tracks", epsilon=1)
    assert seen == {"mode": 0o600, "suffix": ".parquet", "dir_mode": 0o700}


def test_a_staging_directory_of_another_user_is_refused(session):
    """Attack (review): a co-tenant pre-creates work_dir/inputs (theirs, 0777) to swap the
    staged table before the release reads it. The staging directory must be ours, 0700."""
    if os.geteuid() != 0:
        pytest.fail("this test must run as root (CI does): it gives a directory to uid 65534")
    inputs = session.work_dir / "inputs"
    inputs.mkdir(exist_ok=True)
    os.chown(inputs, 65534, 65534)
    inputs.chmod(0o777)
    with pytest.raises(FileSystemError, match="belongs to uid 65534"):
        session.release(_tracks(), domain="tracks", epsilon="1/4")
    assert session.remaining_budget(domain="tracks").empty  # nothing charged
    assert list(inputs.iterdir()) == []


def test_a_dry_run_charges_nothing(session):
    plan = session.dry_run(_tracks(), domain="tracks", epsilon="3/2")
    # 3/2 per curve: one-curve users fit under 2, two-curve users (3) do not
    assert dict(zip(plan.users.user_id, plan.users.decision, strict=True)) == {
        "u0": "admitted", "u1": "denied", "u2": "admitted", "u3": "denied"}
    assert plan.counts["users_released"] == 2 and plan.counts["users_denied"] == 2
    assert session.remaining_budget(domain="tracks").empty  # no account was even opened


def test_streams_from_a_dataframe(session):
    steps = list(range(48))
    df = pd.DataFrame({"user_id": "m0", "stream_id": "s0", "t": steps,
                       "value": [5.0 + (s % 12) / 3 for s in steps]})
    rel = session.release(df, domain="meters", epsilon=1)
    assert rel["samples_units"]["step"].tolist() == steps
    # w-event: ε per window of w = 4 steps; the cap is 2 per window
    assert session.remaining_budget("m0", domain="meters") == Fraction(1)


def test_errors_name_keyword_arguments(session, tmp_path, monkeypatch):
    def no_prefect() -> None:
        raise AssertionError("Prefect reached before the checks")

    monkeypatch.setattr(flows.api, "_prefect", no_prefect)
    df = _tracks()
    cases = [
        (dict(epsilon=0), r"^epsilon must be > 0; got 0$"),
        (dict(epsilon=1, rho=1), r"^give exactly one of epsilon or rho$"),
        (dict(epsilon="x"), r"^epsilon must be a positive number"),
        (dict(epsilon=1, options={"nope": 1}), r"has no option 'nope'"),
        (dict(epsilon=1, reconstruct="cpr"), r"^reconstruct applies to stream domains only"),
        (dict(epsilon=1, table="t"), r"^table names the table of a DuckDB file"),
        (dict(epsilon=1, evaluate_on="x"), r"^evaluate_on must be one of grid, input"),
        (dict(epsilon=1, release_id="../x"), r"^release_id '\.\./x' is not a safe name"),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(ParameterError, match=pattern) as err:
            session.release(df, domain="tracks", **kwargs)
        assert "--" not in str(err.value), str(err.value)
    with pytest.raises(ParameterError, match=r"^rho applies to curve domains only; domain "
                                             r"'meters' holds streams$"):
        session.release(df, domain="meters", epsilon=1, rho=1)
    with pytest.raises(ParameterError, match=r"^data must be a pandas DataFrame, a pyarrow "
                                             r"Table or the path .*; got builtins\.list$"):
        session.release([1, 2], domain="tracks", epsilon=1)
    with pytest.raises(ParameterError, match=r"^unknown domain 'nope'"):
        session.remaining_budget(domain="nope")
    # a file the checks refuse is named by the keyword it came in as
    missing = df.drop(columns=["y"])
    with pytest.raises(ParameterError) as err:
        session.release(missing, domain="tracks", epsilon=1)
    assert "data" in str(err.value) and "'y'" in str(err.value)
    assert str(session.work_dir) not in str(err.value)  # not the staged copy's path


def test_the_cli_keeps_its_option_names():
    from flows.api import keyword_text

    assert keyword_text("--epsilon must be > 0") == "epsilon must be > 0"
    # a command quoted in backticks is left as the CLI spells it
    text = "no ledger at 'l'; create one with `privpipe ledger init --ledger l`"
    assert keyword_text(text) == text
    assert keyword_text("or release without --policy") == "or release without policy_path"


def test_the_inline_policy_is_validated_by_key(tmp_path):
    bad = {"domains": {"tracks": {**POLICY["domains"]["tracks"], "cap": "-1"}}}
    with pytest.raises(PolicyError, match=r"domains\.tracks\.cap"):
        privpipe.Session(bad)
    with pytest.raises(ParameterError, match=r"^policy must be a dict"):
        privpipe.Session(["tracks"])


def test_a_ledger_file_outlives_its_sessions(tmp_path):
    ledger = tmp_path / "ledger.duckdb"
    with privpipe.Session(POLICY, ledger_path=ledger) as first:
        first.release(_tracks(2), domain="tracks", epsilon=1)
        work = first.work_dir
    assert not work.exists() and ledger.exists()  # the temporary work dir went, not the ledger
    with privpipe.Session(ledger_path=ledger) as second:  # no policy: the ledger's domains
        assert second.remaining_budget("u1", domain="tracks") == Fraction(0)  # 2 curves x 1
        with pytest.raises(ReleaseNotMadeError) as denied:
            second.release(_tracks(2), domain="tracks", epsilon=2)
        assert denied.value.exit_code == 3


def test_the_functions_of_flows_name_their_keywords_too(tmp_path, monkeypatch):
    def no_prefect() -> None:
        raise AssertionError("Prefect reached before the checks")

    monkeypatch.setattr(flows.api, "_prefect", no_prefect)
    with privpipe.Session(POLICY, work_dir=tmp_path / "work") as s:
        ledger = s.ledger.path
    csv = tmp_path / "tracks.csv"
    _tracks().to_csv(csv, index=False)
    (tmp_path / "a-file").write_text("")
    kw = dict(domain="tracks", ledger_path=ledger)
    cases = [(dict(epsilon=0), r"^epsilon must be > 0; got 0$"),
             (dict(epsilon=1, table="t"), r"^table only applies to DuckDB inputs"),
             (dict(epsilon=1, out_dir=tmp_path / "a-file"), r"^out_dir '.*a-file' exists and "
                                                            r"is not a directory$")]
    for extra, pattern in cases:
        with pytest.raises(ParameterError, match=pattern):
            flows.api.release_curves(csv, **kw, **extra)
    # on main a DataFrame here was a bare TypeError from inside the checks
    with pytest.raises(ParameterError, match=r"^input_path must be a path .*got "
                                             r"pandas\.DataFrame.*privpipe\.Session"):
        flows.api.release_curves(_tracks(), epsilon=1, **kw)


def test_importing_privpipe_starts_nothing(tmp_path):
    import subprocess
    import sys

    code = ("import os, sys; before = dict(os.environ); import privpipe; "
            "assert dict(os.environ) == before; assert 'prefect' not in sys.modules; "
            "print(privpipe.Session.__module__)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "privpipe.session" and list(tmp_path.iterdir()) == []
