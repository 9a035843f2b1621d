"""Shared pieces of the `privpipe` CLI: consoles, error mapping, output formats, Prefect.

Exit codes (documented in docs/operations.md, the README and `privpipe --help`):

    0  ok, or the request was admitted (a partial denial included: counts printed)
    1  internal error (a bug: please report it with the command line)
    2  bad input: invalid file, policy, argument, or an unreadable/foreign ledger;
       a release whose every user was rejected
    3  denied: the privacy budget would be exceeded (a release in which no user
       was released because of budget)
    4  integrity failure: the ledger's hash chain or balances do not verify

Results go to stdout (``--format table|csv|json``); every message, progress
line and error goes to stderr, so ``--format json`` output parses as it is.
"""

from __future__ import annotations

import contextlib
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
from rich.text import Text

from flows.run_logging import Verbosity
from schemas.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, ParameterError, PrivpipeError

# Messages, progress and errors: stderr. Results: `print_rows` (stdout).
console = Console(stderr=True, soft_wrap=True)
err_console = console

F = TypeVar("F", bound=Callable[..., Any])

# The Prefect session a command opened (`open_prefect`), closed when the command ends.
_prefect = contextlib.ExitStack()


class OutputFormat(StrEnum):
    """How results are printed on stdout."""

    table = "table"
    csv = "csv"
    json = "json"


FORMAT_HELP = "Output format of the results on stdout: table, csv or json."
VERBOSE_HELP = ("Show the run's log lines (stages, counts, final state) on stderr; they always "
                "go to the Prefect API.")
QUIET_HELP = "Print only errors and the result (no progress, no counts line)."


def verbosity(verbose: bool, quiet: bool) -> Verbosity:
    """The terminal's verbosity from ``-v/--verbose`` and ``-q/--quiet`` (not both).

    Raises:
        ParameterError: both were given (exit code 2).
    """
    if verbose and quiet:
        raise ParameterError("--verbose and --quiet cannot be used together")
    return Verbosity.verbose if verbose else Verbosity.quiet if quiet else Verbosity.normal


def open_prefect(mode: Verbosity, preload: Sequence[str] = ()) -> str:
    """Reach Prefect for the rest of the command (configured API, else a temporary server).

    The run's log lines go to the Prefect API at INFO whatever `mode` says; the
    terminal shows what `mode` asks (`flows.run_logging`). The session is
    closed by `handle_errors` when the command returns or fails. Returns the
    API URL.
    """
    from flows.prefect_server import prefect_session
    from flows.run_logging import route_run_logs

    url = _prefect.enter_context(prefect_session(preload=("prefect.main", *preload)))
    # prefect.main ran Prefect's logging dictConfig (a plain `import prefect` is lazy)
    route_run_logs(mode)
    return url


def handle_errors(fn: F) -> F:
    """Run a CLI command, turning privpipe errors into one line and an exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with _prefect:
                return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except PrivpipeError as err:
            # operator_detail: what an error keeps off Prefect's records (e.g. the user a
            # mechanism failed on), for the operator's terminal only
            detail = getattr(err, "operator_detail", None)
            print_error(str(err) if detail is None else f"{err} [{detail}]")
            raise typer.Exit(err.exit_code) from None
        except (ValueError, OSError) as err:
            # Parameter errors from the pure core (MechanismParameterError is a
            # ValueError) and file-system errors are bad input, not bugs.
            print_error(str(err))
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:
            console.print("interrupted")
            raise typer.Exit(130) from None
        except Exception as err:  # noqa: BLE001 - last resort: a bug, said plainly
            print_error(f"{type(err).__name__}: {err}", label="internal error (this is a bug):")
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def print_error(message: str, label: str = "error:") -> None:
    """One error line on stderr (the message is plain text, never markup)."""
    console.print(Text.assemble((label, "bold red"), " ", message), highlight=False)


def _stdout_console() -> Console:
    # Not a terminal (a pipe, a file, a scheduler's log): never wrap or cut a cell,
    # so ids and paths stay on one line and can be grepped.
    if sys.stdout.isatty():
        return Console(soft_wrap=True)
    return Console(width=100_000, soft_wrap=True, color_system=None)


def print_rows(
    rows: Sequence[dict[str, Any]],
    fmt: OutputFormat = OutputFormat.table,
    title: str | None = None,
    columns: Sequence[str] | None = None,
) -> None:
    """Print rows (dicts) as a table, CSV or JSON on stdout.

    An empty result prints ``[]`` (json), the header (csv), or says so on
    stderr (table); it is not an error.
    """
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
    if not rows:
        console.print(f"{title or 'result'}: none", highlight=False, markup=False)
        return
    wide = not sys.stdout.isatty()
    table = Table(title=title, show_lines=False)
    for c in cols:
        table.add_column(c, overflow="ignore" if wide else "fold", no_wrap=wide)
    for r in rows:
        table.add_row(*[Text(_cell(r.get(c))) for c in cols])
    _stdout_console().print(table)


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}


def _cell(v: Any) -> str:
    """A table cell's text; control characters shown escaped (as x00 after a backslash)."""
    if v is None:
        return ""
    return str(v).translate(_CONTROL)
