"""`ledger export --format parquet`: plain Parquet files any DuckDB or pandas reads (issue #29).

Values are checked against the charges the test makes (policy of `ledger_helpers`: ais gp
cap 1 ε).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli_ledger import ledger_app
from ledger import Ledger, Request

TABLES = ("entries", "balances", "releases", "denials")


@pytest.fixture
def exported(led: Ledger, tmp_path: Path) -> Path:
    # r1: a 1/2, b 1/4; r2: b asks 1 with 1/4 spent of 1: denied
    led.reserve("r1", [Request("a", "ais", amount=Fraction(1, 2)),
                       Request("b", "ais", amount=Fraction(1, 4))], mechanism="m", parameters={})
    led.reserve("r2", [Request("b", "ais", amount=1)], mechanism="m", parameters={})
    out = tmp_path / "export"
    r = CliRunner().invoke(ledger_app, ["export", "--ledger", str(led.path), "--out", str(out),
                                        "--format", "parquet", "--table", "all"])
    assert r.exit_code == 0, r.output
    return out


def test_all_tables_are_plain_parquet_1_0(exported):
    assert sorted(p.name for p in exported.iterdir()) == sorted(f"{t}.parquet" for t in TABLES)
    for t in TABLES:
        meta = pq.ParquetFile(exported / f"{t}.parquet").metadata
        assert meta.format_version == "1.0", t
        for i in range(meta.num_columns):  # no nanosecond or unsigned logical types
            col = meta.schema.column(i)
            assert "NANOS" not in str(col.logical_type) and "UINT" not in col.physical_type


def test_duckdb_and_pandas_read_the_figures(exported):
    con = duckdb.connect()
    rel = con.execute("SELECT release_id, accounts, spent_max, spent_mean_exact, cap, unit "
                      "FROM read_parquet(?) ORDER BY release_id",
                      [str(exported / "releases.parquet")]).fetchall()
    # r1: a 1/2 and b 1/4 -> max 1/2, mean 3/8; r2 charged no account
    assert rel == [("r1", 2, 0.5, "0.375", 1.0, "ε"), ("r2", 0, None, None, 1.0, "ε")]
    bal = dict(con.execute("SELECT user_id, spent_quanta FROM read_parquet(?)",
                           [str(exported / "balances.parquet")]).fetchall())
    units = int(con.execute("SELECT any_value(CAST(cap_quanta AS HUGEINT)) FROM read_parquet(?)",
                            [str(exported / "balances.parquet")]).fetchone()[0])  # cap 1
    assert {u: Fraction(int(q), units) for u, q in bal.items()} == {
        "a": Fraction(1, 2), "b": Fraction(1, 4)}
    pd = pytest.importorskip("pandas")
    den = pd.read_parquet(exported / "denials.parquet")
    assert den["user_id"].tolist() == ["b"] and den["release_id"].tolist() == ["r2"]
    ent = pd.read_parquet(exported / "entries.parquet")
    assert ent["seq"].is_monotonic_increasing and str(ent["created_at"].dtype).startswith(
        "datetime64")


def test_a_bad_table_names_the_flag(led, tmp_path):
    r = CliRunner().invoke(ledger_app, ["export", "--ledger", str(led.path), "--out",
                                        str(tmp_path / "x"), "--table", "accountz"])
    assert r.exit_code == 2 and "--table" in r.output
