"""The `privpipe` command line: validate inputs, run releases, audit the ledger.

Exit codes: 0 ok/admitted, 1 internal error (a bug), 2 bad input,
3 denied (budget exceeded), 4 ledger integrity failure.
"""

from __future__ import annotations

import gc

import typer

from files.safe_files import apply_operator_umask
from flows import configure
from flows.cli_audit import audit_app
from flows.cli_common import err_console
from flows.cli_ledger import ledger_app
from flows.cli_ledger_serve import serve as _ledger_serve  # noqa: F401 - registers commands
from flows.cli_population import population_cmd
from flows.cli_release import (
    demo_cmd,
    evaluate_cmd,
    release_app,
    serve_cmd,
)
from flows.cli_validate import validate
from flows.cli_worker import worker_app
from flows.collector import fewer_collections
from schemas.errors import ParameterError

app = typer.Typer(
    name="privpipe",
    help=(
        "Release per-user curves and streams under local privacy, with an audited "
        "DuckDB privacy ledger.\n\nExit codes: 0 ok or admitted; 1 internal error (a bug); "
        "2 bad input; 3 denied (budget exceeded); 4 ledger integrity failure."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command("validate")(validate)
app.add_typer(ledger_app, name="ledger")
app.add_typer(release_app, name="release")
app.add_typer(audit_app, name="audit", help=audit_app.registered_callback.callback.__doc__)
app.command("evaluate")(evaluate_cmd)
app.command("demo")(demo_cmd)
app.command("serve")(serve_cmd)
app.command("population")(population_cmd)
app.add_typer(worker_app, name="worker")


def main() -> None:
    """Console-script entry point: set Prefect up, apply PRIVPIPE_UMASK, then run the command.

    `flows.configure` is the one place Prefect's settings are applied (before
    Prefect is imported; docs/operations.md); PRIVPIPE_UMASK: docs/files.md.
    """
    configure()
    try:
        apply_operator_umask()
    except ParameterError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise SystemExit(err.exit_code) from None
    try:
        # The whole command (a release also tunes its own run, in any process, and
        # undoes it after: flows/collector.py).
        with fewer_collections():
            app()
    finally:
        # The command is done: freeze what it built so the interpreter's exit does
        # not walk it with the cyclic collector (about 0.5 s after a release, half a
        # second of every command's fixed cost; benchmarks/cli/bench_cli.py).
        # Objects are still released and atexit handlers still run.
        gc.freeze()


if __name__ == "__main__":
    main()
