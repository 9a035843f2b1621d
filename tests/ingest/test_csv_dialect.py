"""The strict CSV reader: a ragged, unterminated or headerless file is named, not guessed.

Replays issue #29's trial: a truncated last row (``u1,0``) was reported as
every required column "missing" (DuckDB's sniffer read the file as one column
separated by ``|``), and a row with an extra field made a data row the header.
"""

from __future__ import annotations

import gzip

import pytest

from ingest import default_domain, scan
from schemas.errors import ValidationError
from tests.ingest.conftest import make_domain

XY = make_domain(value_columns=["x", "y"], time_unit="s", value_unit="m")

GOOD = ["user_id,curve_id,t,x,y", "u1,c1,0,1,2", "u1,c1,1,2,3", "u1,c1,2,3,4"]


def _problem(path):
    with pytest.raises(ValidationError) as exc:
        scan(path, XY)
    (p,) = exc.value.problems
    return p


def _write(tmp_path, lines, name="in.csv", end="\n"):
    f = tmp_path / name
    f.write_text("\n".join(lines) + end, encoding="utf-8")
    return f


def test_a_truncated_last_row_names_its_line_and_field_count(tmp_path):
    f = _write(tmp_path, [*GOOD, "u1,0"], end="")  # cut off mid-record, no final newline
    p = _problem(f)
    # header = line 1, the three good rows = lines 2-4, "u1,0" = line 5, data row 4
    assert (p.row, p.column, p.rule) == (4, None, "csv field count")
    assert "line 5 has 2 fields, the header has 5" in p.message
    assert "missing" not in p.message.split(":")[0]  # not "column is missing"
    assert "u1" not in p.message  # the record's text is not repeated


def test_a_row_with_an_extra_field_is_named_not_taken_for_the_header(tmp_path):
    f = _write(tmp_path, [GOOD[0], "u1,c1,0,1,2", "u2,1,2020-01-01T00:00:00Z,99,3,7",
                          "u1,c1,2,3,4"])
    p = _problem(f)
    assert (p.row, p.rule) == (2, "csv field count")
    assert "line 3 has 6 fields, the header has 5" in p.message
    assert "2020" not in p.message and "the input has" not in p.message


def test_an_unterminated_quote_names_the_line_it_opens(tmp_path):
    f = _write(tmp_path, [GOOD[0], "u1,c1,0,1,2", 'u1,"c1,1,2,3', "u1,c1,2,3,4"])
    p = _problem(f)
    assert (p.row, p.rule) == (2, "csv quoting")
    assert "line 3" in p.message and "not closed" in p.message


def test_a_ragged_row_in_a_gzip_file(tmp_path):
    f = tmp_path / "in.csv.gz"
    f.write_bytes(gzip.compress(("\n".join([*GOOD, "u1,c1,3,4"]) + "\n").encode()))
    p = _problem(f)
    assert (p.row, p.rule) == (4, "csv field count") and "4 fields" in p.message


@pytest.mark.parametrize("first, rule, words", [
    ("user_id,curve_id,t,x,user_id", "csv header", "names column 'user_id' twice (fields 1 and 5)"),
    ('user_id,"curve_id,t,x,y', "csv header", "quoted name is not closed"),
])
def test_header_problems(tmp_path, first, rule, words):
    f = _write(tmp_path, [first, "u1,c1,0,1,2"])
    with pytest.raises(ValidationError) as exc:
        scan(f, default_domain("streams"))
    (p,) = exc.value.problems
    assert p.rule == rule and words in p.message


def test_a_semicolon_file_is_not_guessed_into_shape(tmp_path):
    """Only commas separate fields: the header is one column named as written, so the
    required columns are missing, each named, with the one column the file has."""
    f = _write(tmp_path, ["user_id;stream_id;t;value", "u;s;0;1"])
    with pytest.raises(ValidationError) as exc:
        scan(f, default_domain("streams"))
    assert {p.column for p in exc.value.problems} == {"user_id", "stream_id", "t", "value"}
    assert all("user_id;stream_id;t;value" in p.message for p in exc.value.problems)


def test_blank_lines_a_bom_and_crlf_are_read(tmp_path):
    f = tmp_path / "in.csv"
    f.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([*GOOD, "", ""]).encode())
    r = scan(f, XY)
    assert (r.users, r.rows, r.points) == (1, 3, 3)
