"""The one CSV dialect privpipe reads, strictly: commas, double quotes, a header line.

A CSV input is UTF-8 text (a byte-order mark is allowed), optionally gzip
compressed (``.gz``), with fields separated by commas, quoted with double
quotes (a quote inside a quoted field doubled, RFC 4180), and a first line
that names the columns. Nothing is guessed: DuckDB's dialect sniffer, which
read a file with one short row as a single column separated by ``|`` (so
every required column was "missing"), is not used. The header is read here
(Python's `csv`), and DuckDB reads the records with the header's field count
and ``strict_mode``: a record with more or fewer fields than the header, or
an unterminated quote, is a file-level problem naming its line and its field
count (`csv_problem`), never a silently shifted row. Blank lines are skipped.

Problems never quote a record's text: DuckDB's message carries the raw line,
which `csv_problem` drops.
"""

from __future__ import annotations

import csv
import gzip
import re
from pathlib import Path

from schemas.errors import Problem, ValidationError

#: read_csv options of the dialect (the columns are given by `csv_relation`)
_OPTIONS = ("header = true, auto_detect = false, delim = ',', quote = '\"', escape = '\"', "
            "strict_mode = true, null_padding = false")

_LINE = re.compile(r"CSV Error on Line: (\d+)")
_COUNT = re.compile(r"Expected Number of Columns: (\d+) Found: (\d+)")


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _first_line(path: Path) -> bytes:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.readline()


def _header_problem(label: str, message: str, column: str | None = None) -> ValidationError:
    return ValidationError(Problem(label, None, column, "csv header", message))


def csv_header(path: Path, label: str) -> list[str]:
    """The column names on the CSV's first line (an empty name becomes ``columnI``).

    Raises:
        ValidationError: the file is empty, its first line is not CSV in the
            dialect (an unterminated quote, not UTF-8), or a name repeats.
    """
    try:
        line = _first_line(path)
        if not line:
            raise ValidationError(Problem(label, None, None, "not empty",
                                          "the file is empty: no header line, no rows"))
        first = next(csv.reader([line.decode("utf-8-sig")], strict=True), None)
    except (csv.Error, UnicodeDecodeError, OSError, EOFError) as err:
        reason = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else (
            "a quoted name is not closed" if isinstance(err, csv.Error) else
            f"cannot be read ({type(err).__name__})")
        raise _header_problem(label, f"line 1 (the header): {reason}") from None
    if not first or first == [""]:
        raise _header_problem(label, "line 1 must name the columns (e.g. user_id,curve_id,t,"
                                     "x,y); it is blank")
    names = [n if n else f"column{i}" for i, n in enumerate(first)]
    seen: dict[str, int] = {}
    for i, n in enumerate(names, start=1):
        if n in seen:
            raise _header_problem(label, f"line 1 (the header) names column {n!r} twice "
                                         f"(fields {seen[n]} and {i})", n)
        seen[n] = i
    return names


def csv_relation(path: Path, columns: dict[str, str]) -> str:
    """SQL relation of the CSV's records with `columns` (name -> DuckDB type), in file order."""
    spec = ", ".join(f"{_quote_literal(c)}: {_quote_literal(t)}" for c, t in columns.items())
    return (f"(SELECT * FROM read_csv({_quote_literal(str(path))}, "  # noqa: S608
            f"{_OPTIONS}, columns = {{{spec}}}))")


def csv_problem(label: str, err: BaseException) -> ValidationError:
    """The file-level problem of a record DuckDB refused: its line, field count, rule.

    ``row`` is the data row (the line DuckDB counts minus the header line); the
    message names the line (the record's line when no quoted field spans
    lines) and, for a ragged record, its field count and the header's. The
    record's text is never repeated.
    """
    text = str(err)
    line = _LINE.search(text)
    count = _COUNT.search(text)
    where = f"line {line.group(1)}" if line else "a record"
    row = int(line.group(1)) - 1 if line else None
    if count:
        expected, found = int(count.group(1)), int(count.group(2))
        hint = ("a field is missing (a truncated row?)" if found < expected
                else "an extra field (an unquoted comma?)")
        message = (f"{where} has {found} field{'s' if found != 1 else ''}, the header has "
                   f"{expected}: {hint}")
        rule = "csv field count"
    elif "unterminated quote" in text:
        message, rule = f"{where}: a quoted field is not closed", "csv quoting"
    elif "unicode" in text.lower() or "utf-8" in text.lower():
        message, rule = f"{where} is not UTF-8 text", "csv encoding"
    else:
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        first = first.split("Original Line")[0][:200]
        message, rule = f"{where} does not parse as CSV: {first}", "csv"
    return ValidationError(Problem(label, row if row and row > 0 else None, None, rule,
                                   message))
