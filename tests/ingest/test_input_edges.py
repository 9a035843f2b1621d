"""Input edges of issue #26: steps at 2^53, negative steps, control characters in ids.

Each was accepted by `privpipe validate` on main (a step 2^53 + 1 read as the
float 2^53 and released as that step; negative steps failing only later in the
release; a NUL in one user id): now each is a problem naming file, row, column
and rule, only that user is rejected, and the others are kept.
"""

import json

import typer
from typer.testing import CliRunner

from flows.cli_validate import validate

app = typer.Typer()
app.command("validate")(validate)


@app.command("noop")
def _noop() -> None:  # a second command keeps "validate" a named subcommand
    """Do nothing."""


POLICY = """
[domains.meters]
kind = "streams"
notion = "wevent"
cap = "10"
w = 5
time_unit = "step"
value_range = [0.0, 10.0]
value_unit = "kW"
"""


def _validate(tmp_path, rows: list[str], fmt: str = "json"):
    (tmp_path / "p.toml").write_text(POLICY)
    src = tmp_path / "in.csv"
    src.write_bytes(("user_id,stream_id,t,value\n" + "".join(r + "\n" for r in rows)).encode())
    return CliRunner().invoke(app, ["validate", str(src), "--kind", "streams", "--policy",
                                    str(tmp_path / "p.toml"), "--domain", "meters",
                                    "--format", fmt])


def _problems(res) -> list[dict]:
    assert res.exit_code == 2, res.output
    return json.loads(res.stdout)


def test_a_step_read_as_2_to_the_53_is_refused(tmp_path):
    # 9007199254740993 = 2^53 + 1 reads as the double 2^53: it cannot be told from 2^53
    res = _validate(tmp_path, ["u1,s1,9007199254740990,1", "u1,s1,9007199254740993,2",
                               "u2,s1,9007199254740991,1"])
    probs = _problems(res)
    assert [(p["row"], p["column"], p["rule"], p["user"]) for p in probs] == [
        (2, "t", "step in [0, 2^53)", "u1")]


def test_negative_steps_are_refused_by_validate(tmp_path):
    probs = _problems(_validate(tmp_path, ["u1,s1,-1,1", "u1,s1,0,1", "u2,s1,0,1"]))
    assert [(p["row"], p["rule"], p["user"]) for p in probs] == [(1, "step in [0, 2^53)", "u1")]


def test_a_control_character_in_an_id_rejects_that_user_only_naming_the_row(tmp_path):
    rows = ["u1,s1,0,1", "u\x002,s1,0,1", '"u\t3",s1,0,1', "u4,s\x1b5,0,1", "u5,s1,0,1",
            "u6\x9b,s1,0,1"]
    probs = _problems(_validate(tmp_path, rows))
    assert [(p["row"], p["column"], p["rule"]) for p in probs] == [
        (2, "user_id", "id without control characters"),
        (3, "user_id", "id without control characters"),
        (4, "stream_id", "id without control characters"),
        (6, "user_id", "id without control characters")]
    table = _validate(tmp_path, rows, fmt="table").output
    assert "\x00" not in table and "\x1b" not in table and "u\\x002" in table


def test_a_bad_id_over_several_rows_names_every_row_of_it(tmp_path):
    # ids are checked once per run of equal ids (ingest.batch._missing_or_empty_runs):
    # every row of a bad run is named, runs cut by the other id column included
    rows = ["u1,s1,0,1", "u1,s1,1,1", "u\x002,s1,0,1", "u\x002,s1,1,1", "u\x002,s1,2,1",
            "u3,s1,0,1", "u3,s\x1b2,0,1", "u3,s\x1b2,1,1", "u3,s3,0,1", "u4,s\x1b2,0,1",
            "u5,s1,0,1"]
    probs = _problems(_validate(tmp_path, rows))
    assert [(p["row"], p["column"], p["rule"]) for p in probs] == [
        (3, "user_id", "id without control characters"),
        (4, "user_id", "id without control characters"),
        (5, "user_id", "id without control characters"),
        (7, "stream_id", "id without control characters"),
        (8, "stream_id", "id without control characters"),
        (10, "stream_id", "id without control characters")]
