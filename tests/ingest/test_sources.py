"""CSV, Parquet, DuckDB tables and DataFrames give the same validated users."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from ingest import Rejection, scan
from schemas.errors import ValidationError
from tests.ingest.conftest import make_domain


@pytest.fixture
def frame():
    rng = np.random.default_rng(11)
    rows = []
    for u in ("b", "a", "c'; DROP TABLE x; --"):
        for c in ("1", "2"):
            for t in range(4):
                rows.append((u, c, float(t), float(rng.normal())))
    df = pd.DataFrame(rows, columns=["user_id", "curve_id", "t", "value"])
    df.loc[9, "value"] = np.inf    # user "a", curve 1: row 10 of the file
    return df


def _summary(rep):
    rej = {r.user_id: [(p.row, p.column, p.rule) for p in r.problems] for r in rep.rejected}
    return rep.user_fingerprints, rep.fingerprint, rej, rep.points


def test_all_formats_agree(tmp_path, frame):
    dom = make_domain()
    frame.to_csv(tmp_path / "in.csv", index=False)
    frame.to_csv(tmp_path / "in.csv.gz", index=False, compression="gzip")
    frame.to_parquet(tmp_path / "in.parquet", index=False)
    con = duckdb.connect(str(tmp_path / "in.duckdb"))
    con.register("f", frame)
    con.execute('CREATE TABLE "my table" AS SELECT * FROM f')
    con.close()
    reps = [scan(tmp_path / "in.csv", dom), scan(tmp_path / "in.csv.gz", dom),
            scan(tmp_path / "in.parquet", dom),
            scan(tmp_path / "in.duckdb", dom, table="my table"), scan(frame, dom)]
    first = _summary(reps[0])
    assert first[2] == {"a": [(10, "value", "finite")]}
    assert len(first[0]) == 2
    for r in reps[1:]:
        assert _summary(r) == first


def test_integer_user_ids_are_text(tmp_path):
    df = pd.DataFrame({"user_id": [367073680] * 2, "curve_id": [0, 0], "t": [0, 1],
                       "value": [1.0, 2.0]})
    df.to_parquet(tmp_path / "in.parquet")
    rep = scan(tmp_path / "in.parquet", make_domain())
    assert list(rep.user_fingerprints) == ["367073680"]


def test_duckdb_table_errors(tmp_path, frame):
    con = duckdb.connect(str(tmp_path / "in.duckdb"))
    con.register("f", frame)
    con.execute("CREATE TABLE samples AS SELECT * FROM f")
    con.close()
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path / "in.duckdb", make_domain())
    assert exc.value.problems[0].rule == "table"
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path / "in.duckdb", make_domain(), table="nope")
    assert "samples" in exc.value.problems[0].message
    (tmp_path / "fake.duckdb").write_bytes(b"garbage" * 100)
    with pytest.raises(ValidationError) as exc:
        scan(tmp_path / "fake.duckdb", make_domain(), table="samples")
    assert exc.value.problems[0].rule == "readable"
    with pytest.raises(ValidationError):
        scan(tmp_path / "in.csv", make_domain(), table="samples")


def test_typed_column_of_wrong_type_is_file_error(tmp_path):
    df = pd.DataFrame({"user_id": "u", "curve_id": "c", "t": [0.0, 1.0],
                       "value": [True, False]})
    with pytest.raises(ValidationError) as exc:
        scan(df, make_domain())
    assert [(p.column, p.rule) for p in exc.value.problems] == [("value", "dtype")]


def test_reserved_row_column(tmp_path):
    df = pd.DataFrame({"user_id": "u", "curve_id": "c", "t": [0.0, 1.0], "value": 1.0,
                       "_row": [5, 6]})
    with pytest.raises(ValidationError):
        scan(df, make_domain())


def test_multiline_quoted_field_counts_as_one_row(tmp_path, frame):
    text = ('user_id,curve_id,t,value\n"multi\nline",c,0,1\n"multi\nline",c,1,2\n'
            'x,c,0,1\nx,c,0,2\n')
    (tmp_path / "in.csv").write_text(text, encoding="utf-8")
    rep = scan(tmp_path / "in.csv", make_domain())
    # the quoted line break is one record: x's duplicate t is reported at row 4, not 6
    # (the multi-line id itself is refused: ids have no control characters)
    rows = {r.user_id: (r.problems[0].row, r.problems[0].rule) for r in rep.rejected}
    assert all(isinstance(r, Rejection) for r in rep.rejected)
    assert rows == {"multi\nline": (1, "id without control characters"),
                    "x": (4, "t strictly increasing")}


@pytest.mark.parametrize("column", ["user_id", "t", "value"])
def test_a_frame_column_of_only_none_is_a_row_problem_not_a_dtype(column):
    # pandas gives such a column no type (DuckDB: NULL); each cell is a missing value
    frame = pd.DataFrame({"user_id": ["a", "a", "b", "b"], "curve_id": ["c"] * 4,
                          "t": [0.0, 1.0, 2.0, 3.0], "value": [1.0, 2.0, 3.0, 4.0]})
    frame[column] = None
    report = scan(frame, make_domain())
    found = [(p.row, p.column, p.rule) for r in report.rejected for p in r.problems]
    found += [(p.row, p.column, p.rule) for p in report.file_problems]
    assert report.users == 0
    assert sorted(found) == [(row, column, "required") for row in (1, 2, 3, 4)]
