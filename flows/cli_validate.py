"""``privpipe validate``: check an input file against a policy domain, locally.

Prints a summary (users, curves or streams, points, time span, value ranges,
fingerprint) when the input is valid, or a rejection table (file, row, column,
rule, user, message) when it is not. Raw values appear only with
``--show-values``, and only on this local terminal. Exit code 0 when valid,
2 when any row, user or the file is rejected.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli_common import OutputFormat, err_console, handle_errors, print_rows
from schemas.errors import EXIT_BAD_INPUT, ParameterError, Problem, ValidationError
from schemas.policy import TIME_UNITS, Domain, load_policy

if TYPE_CHECKING:
    from ingest import IngestReport

# ingest (pandas, pandera) is imported when a file is validated, not when the CLI starts;
# these are the keys of ingest.pipeline.INPUT_TIME_UNITS (a test checks they agree).
INPUT_TIME_UNIT_NAMES = ("ns", "us", *TIME_UNITS)


class Kind(str, Enum):  # noqa: UP042 - same style as cli_common.OutputFormat
    """What the input holds."""

    curves = "curves"
    streams = "streams"


PROBLEM_COLUMNS = ("file", "row", "column", "rule", "user", "message")


def problem_rows(problems: list[Problem], *, show_values: bool = False) -> list[dict[str, Any]]:
    """Rows of the rejection table; the ``value`` column only with `show_values`."""
    rows = []
    for p in problems:
        r: dict[str, Any] = {"file": p.file, "row": p.row, "column": p.column, "rule": p.rule,
                             "user": p.user_id, "message": p.message}
        if show_values:
            r["value"] = p.value
        rows.append(r)
    return rows


def summary_rows(report: IngestReport, domain: Domain, note: str | None,
                 tag: str | None = None) -> list[dict[str, Any]]:
    """Rows (field, value) of the summary of a valid input."""
    unit = domain.time_unit
    items = "curves" if report.kind == "curves" else "streams"
    rows: list[dict[str, Any]] = [
        {"field": "file", "value": report.source},
        {"field": "domain", "value": f"{domain.name} ({domain.kind}, {domain.notion}, "
                                     f"{domain.units_label()})"},
    ]
    if note:
        rows.append({"field": "note", "value": note})
    rows += [
        {"field": "rows", "value": report.rows},
        {"field": "users", "value": report.users},
        {"field": items, "value": report.curves_or_streams},
        {"field": "points", "value": report.points},
    ]
    if report.t_span is not None:
        lo, hi = report.t_span
        what = "t span (from each curve's start)" if report.kind == "curves" else "step span"
        rows.append({"field": what, "value": f"{lo:g} .. {hi:g} {unit}"})
    vunit = "(dimensionless)" if domain.value_unit == "1" else domain.value_unit
    for col, (lo, hi) in report.value_ranges.items():
        rows.append({"field": f"range of {col}", "value": f"{lo:.6g} .. {hi:.6g} {vunit}"})
    rows.append({"field": "rejected users", "value": len(report.rejected)})
    rows.append(fingerprint_row(report.fingerprint, tag))
    return rows


def fingerprint_row(content: str, tag: str | None) -> dict[str, Any]:
    """The fingerprint line: the ledger's keyed tag, or the local content hash."""
    if tag is not None:
        return {"field": "fingerprint (keyed by the ledger)", "value": tag}
    return {"field": "content sha256 (local; a release records the keyed one: --ledger)",
            "value": content}


def continuation_row(ledger: Path | None, domain: Domain, file: Path,
                     table: str | None) -> dict[str, Any] | None:
    """For a stream domain of the ledger: which streams of the input it released before.

    A stream keeps the ε/w it was first released at (`flows.preflight`
    refuses a release at another one), so the row says which ``--epsilon``
    continues them. None without a ledger, for curves, or when the ledger has
    no such domain.
    """
    if ledger is None or domain.kind != "streams" or domain.w is None:
        return None
    from flows.preflight import released_streams
    from ledger.remote import open_ledger

    led = open_ledger(ledger)
    if domain.name not in {d["domain"] for d in led.domains()}:
        return None
    found = released_streams(led, domain, file, table)
    if not found:
        return {"field": "continues released streams", "value": "none: every stream is new"}
    parts = [f"{len(v)} stream(s) released at ε/w = {eps}"
             + (f" (continue with --epsilon {eps * domain.w})" if eps > 0 else "")
             for eps, v in sorted(found.items())]
    return {"field": "continues released streams", "value": "; ".join(parts)}


def _input_tag(ledger: Path | None, content: str) -> str | None:
    """The tag `release` would record for this content (None without --ledger)."""
    if ledger is None:
        return None
    from ledger.remote import open_ledger

    return open_ledger(ledger).input_tag(content)  # refuses a missing ledger, a directory, no key


def _pick_domain(policy_path: Path | None, name: str | None, kind: str | None, file: Path,
                 table: str | None, ledger: Path | None) -> tuple[Domain, str | None]:
    """The domain to validate against: the policy's, the ledger's, or a default one.

    ``--domain`` without ``--policy`` reads the domain from the ledger (``--ledger``,
    else the one a release uses: $PRIVPIPE_HOME/ledger.duckdb), as a release would.
    """
    if policy_path is None and name is not None:
        return _ledger_domain(name, kind, ledger), None
    if kind is None:
        raise ParameterError("--kind curves|streams is needed unless --domain names the domain")
    if policy_path is None:
        return _default_domain(kind, file, table)
    policy = load_policy(policy_path)
    if name is not None:
        dom = policy.domain(name)
        if dom.kind != kind:
            raise ParameterError(f"domain {name!r} is a {dom.kind} domain, but --kind is {kind}")
        return dom, None
    matching = [d for d in policy.domains.values() if d.kind == kind]
    if len(matching) == 1:
        return matching[0], None
    names = ", ".join(sorted(d.name for d in matching)) or "(none)"
    raise ParameterError(f"choose a {kind} domain with --domain; the policy has: {names}")


def _default_ledger(ledger: Path | None, policy: Path | None, domain: str | None
                    ) -> Path | None:
    """`ledger`, else the release's default one when the domain comes from a ledger."""
    if ledger is not None or policy is not None or domain is None:
        return ledger
    from flows.settings import privpipe_home

    return privpipe_home() / "ledger.duckdb"


def _ledger_domain(name: str, kind: str | None, path: Path | None) -> Domain:
    from ledger import LedgerOpenError
    from ledger.remote import open_ledger

    assert path is not None, "_default_ledger names the ledger of a --domain without --policy"
    try:
        dom = open_ledger(path).domain(name)
    except (ParameterError, LedgerOpenError) as err:
        raise ParameterError(f"{err} (--domain without --policy reads the domain from the "
                             "ledger: pass --ledger LEDGER, or --policy FILE)") from None
    if kind is not None and dom.kind != kind:
        raise ParameterError(f"the ledger's domain {name!r} holds {dom.kind}, but --kind is {kind}")
    return dom


def _default_domain(kind: str, file: Path, table: str | None) -> tuple[Domain, str | None]:
    from ingest import default_domain

    dom = default_domain(kind, file, table=table)
    if kind == "curves":
        note = (f"no --policy: default curves domain (value columns "
                f"{', '.join(dom.value_columns)}; plain-number t as given, ISO 8601 t in "
                f"seconds from each curve's start)")
    else:
        note = ("no --policy: default streams domain (t = integer step; values checked "
                "for finiteness only, no declared range, not normalised)")
    return dom, note


@handle_errors
def validate(
    file: Annotated[Path, typer.Argument(help="CSV, Parquet or DuckDB file to check.")],
    kind: Annotated[Kind | None, typer.Option(
        "--kind", help="What the file holds (default: the domain's kind).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy TOML; without it and --domain a permissive default domain "
                         "is used.")] = None,
    domain: Annotated[str | None, typer.Option(
        "--domain", help="Domain of the policy, or without --policy of the ledger (what a "
                         "release charges).")] = None,
    table: Annotated[str | None, typer.Option(
        "--table", help="Table name inside a DuckDB file.")] = None,
    input_time_unit: Annotated[str | None, typer.Option(
        "--input-time-unit",
        help=f"Unit of plain numbers in t ({', '.join(INPUT_TIME_UNIT_NAMES)}); default: "
             "already in the domain's time unit.")] = None,
    ledger: Annotated[Path | None, typer.Option(
        "--ledger", help="Ledger whose key tags the fingerprint as `release` records it "
                         "(without it: the local content hash only); with --domain and no "
                         "--policy, the ledger whose domain is used (default: "
                         "$PRIVPIPE_HOME/ledger.duckdb).")] = None,
    show_values: Annotated[bool, typer.Option(
        "--show-values", help="Also print offending raw values (local terminal only).")] = False,
    fmt: Annotated[OutputFormat, typer.Option(
        "--format", help="Output format.")] = OutputFormat.table,
) -> None:
    """Validate an input file; exit 0 when valid, 2 when anything is rejected."""
    from ingest import scan

    ledger = _default_ledger(ledger, policy, domain)
    dom, note = _pick_domain(policy, domain, None if kind is None else kind.value, file, table,
                             ledger)
    try:
        report = scan(file, dom, table=table, input_time_unit=input_time_unit)
    except ValidationError as err:
        if fmt is OutputFormat.table:
            err_console.print(f"[bold red]invalid:[/] {file}", highlight=False)
        cols = (*PROBLEM_COLUMNS, "value") if show_values else PROBLEM_COLUMNS
        print_rows(problem_rows(err.problems, show_values=show_values), fmt,
                   title="file rejected", columns=cols)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    tag = _input_tag(ledger, report.fingerprint)
    if report.valid:
        rows = summary_rows(report, dom, note, tag)
        rows += [r for r in [continuation_row(ledger, dom, file, table)] if r is not None]
        print_rows(rows, fmt, title=f"{file}: valid", columns=("field", "value"))
        return
    cols = (*PROBLEM_COLUMNS, "value") if show_values else PROBLEM_COLUMNS
    if fmt is OutputFormat.table:
        print_rows(summary_rows(report, dom, note, tag), fmt, title=f"{file}: accepted part",
                   columns=("field", "value"))
    else:  # stdout holds the problems only; the summary line goes with the messages
        err_console.print(f"accepted part: {report.users} user(s); rejected: "
                          f"{len(report.rejected)} user(s); "
                          + ": ".join(map(str, fingerprint_row(report.fingerprint, tag)
                                          .values())), highlight=False, markup=False)
    print_rows(problem_rows(report.problems, show_values=show_values), fmt,
               title=f"rejected: {len(report.rejected)} user(s), "
                     f"{len(report.file_problems)} row(s) without a user", columns=cols)
    raise typer.Exit(EXIT_BAD_INPUT)
