"""Shared pieces of the `privpipe` CLI: console, error mapping, output formats.

Exit codes (documented in the README and in `privpipe --help`):

    0  ok, or the request was admitted
    1  internal error (a bug: please report it with the command line)
    2  bad input: invalid file, policy, argument, or an unreadable/foreign ledger
    3  denied: the privacy budget would be exceeded
    4  integrity failure: the ledger's hash chain or balances do not verify
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import wraps
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from schemas.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, PrivpipeError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


class OutputFormat(StrEnum):
    """How tabular CLI output is printed."""

    table = "table"
    csv = "csv"
    json = "json"


def handle_errors(fn: F) -> F:
    """Run a CLI command, turning privpipe errors into one line and an exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except PrivpipeError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, markup=True)
            raise typer.Exit(err.exit_code) from None
        except (ValueError, OSError) as err:
            # Parameter errors from the pure core (MechanismParameterError is a
            # ValueError) and file-system errors are bad input, not bugs.
            err_console.print(f"[bold red]error:[/] {err}", highlight=False)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(130) from None
        except Exception as err:  # noqa: BLE001 - last resort: a bug, said plainly
            err_console.print(
                f"[bold red]internal error (this is a bug):[/] {type(err).__name__}: {err}",
                highlight=False,
            )
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def print_rows(
    rows: Sequence[dict[str, Any]],
    fmt: OutputFormat = OutputFormat.table,
    title: str | None = None,
    columns: Sequence[str] | None = None,
) -> None:
    """Print rows (dicts) as a rich table, CSV or JSON on stdout."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps([{c: r.get(c) for c in cols} for r in rows], default=str))
        sys.stdout.write("\n")
        return
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({c: r.get(c) for c in cols})
        sys.stdout.write(buf.getvalue())
        return
    table = Table(title=title, show_lines=False)
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*[_cell(r.get(c)) for c in cols])
    console.print(table)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    return str(v)
