"""The typed read of a CSV (numbers parsed by DuckDB's reader) stands for the text read.

`ingest.spill._spill` reads a CSV whose head holds only numbers in t and
the value columns with those columns typed DOUBLE, and reads it again as text
at the first cell that is not a number. Whatever the file, the outcome must be
the text read's: the same users, rows, problems (row, column, rule, value) and
fingerprints. The head is cut to one row here so that bad cells fall after it,
where only the typed read's own checks can send the file back to the text read.
"""

from __future__ import annotations

import csv
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

import ingest.pipeline as P
import ingest.plan
import ingest.spill
import ingest.straight
from ingest import scan
from schemas.errors import ValidationError
from tests.ingest.conftest import make_domain
from tests.ingest.test_bad_tables_property import HEADER, tables


def _write(path, rows, header=HEADER):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _outcome(path, domain, monkeypatch, *, typed: bool):
    """scan()'s report (or file-level problems), and which reads ran."""
    reads: list[str] = []
    text_scan, typed_scan = ingest.spill._scanned, ingest.spill._typed_scanned

    def text(*a, **k):
        reads.append("text")
        return text_scan(*a, **k)

    def typed_read(*a, **k):
        reads.append("typed")
        return typed_scan(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(ingest.plan, "_PLAN_HEAD_ROWS", 1)
        for module in (ingest.spill, ingest.straight):  # the two reads of `ingest.rows`
            m.setattr(module, "_scanned", text)
            m.setattr(module, "_typed_scanned", typed_read)
        if not typed:
            plan = P._plan
            m.setattr(P, "_plan", lambda *a: dataclasses.replace(plan(*a), typed_sql=None))
        try:
            rep = scan(path, domain, batch_rows=7)
        except ValidationError as err:
            return ("file", repr(err.problems)), reads
    return ("report", repr(rep)), reads


def _both(path, domain, monkeypatch):
    typed, reads = _outcome(path, domain, monkeypatch, typed=True)
    text, text_reads = _outcome(path, domain, monkeypatch, typed=False)
    assert "typed" not in text_reads
    assert typed == text
    return reads


def test_clean_csv_is_read_once_typed(tmp_path, monkeypatch):
    rows = [[f"u{u}", "c", f"{i * 0.5}", f"{(u + 1) * i / 3:.6f}"] for u in range(4)
            for i in range(30)]
    reads = _both(_write(tmp_path / "in.csv", rows), make_domain(), monkeypatch)
    assert reads == ["typed"]  # the text read never ran


# bad cells after the head: each ends the typed read, and the text read names it
LATE_CELLS = {
    "text value": (3, "abc"), "empty value": (3, ""), "date in t": (2, "2020-01-01T00:00:00"),
    "text in t": (2, "soon"), "empty t": (2, ""), "hex": (3, "0x10"), "nan": (3, "nan"),
    "inf": (3, "inf"), "overflow": (3, "1e309"), "spaces": (3, "  "), "padded": (3, " 2.5 "),
}


@pytest.mark.parametrize("cell", sorted(LATE_CELLS))
def test_a_late_cell_gives_the_text_reads_outcome(tmp_path, monkeypatch, cell):
    col, text = LATE_CELLS[cell]
    rows = [[f"u{u}", "c", f"{i}", f"{i * 1.5}"] for u in range(3) for i in range(10)]
    rows[17][col] = text
    reads = _both(_write(tmp_path / "in.csv", rows), make_domain(), monkeypatch)
    assert reads[0] == "typed"


def test_a_quoted_empty_field_is_not_a_missing_value(tmp_path, monkeypatch):
    """"" is text in the text read ("not a number"), null in the typed one: it goes back."""
    body = "".join(f"u1,c,{i},{i}.5\n" for i in range(8)) + 'u1,c,8,""\n'
    path = tmp_path / "in.csv"
    path.write_text("user_id,curve_id,t,value\n" + body, encoding="utf-8")
    reads = _both(path, make_domain(), monkeypatch)
    assert reads == ["typed", "text"]


def test_a_malformed_record_is_the_text_reads_file_problem(tmp_path, monkeypatch):
    body = "".join(f"u1,c,{i},{i}.5\n" for i in range(40)) + "u1,c,41,1.5,extra,cells\n"
    path = tmp_path / "in.csv"
    path.write_text("user_id,curve_id,t,value\n" + body, encoding="utf-8")
    _both(path, make_domain(), monkeypatch)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=tables())
def test_bad_tables_read_typed_as_text(tmp_path, monkeypatch, data):
    rows, _bad, _ids = data
    _both(_write(tmp_path / "in.csv", rows), make_domain(), monkeypatch)
