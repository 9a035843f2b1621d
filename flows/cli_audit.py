"""`privpipe audit` (the static HTML/CSV/JSON audit) and `privpipe audit serve` (the web page).

`audit` is a Typer group that runs the static audit when no subcommand is
given, so ``privpipe audit --out X …`` works as before.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer

from flows.cli_common import console, handle_errors
from flows.cli_release import LedgerOpt, _ledger_path, audit_cmd
from ledger.errors import LedgerOpenError
from schemas.errors import ParameterError

SERVE_HELP = """Serve a searchable, read-only audit web page of the ledger (or of a replica).

Pages: overview (signed head, whole-chain verification, budget per domain),
user lookup, releases and denials with domain/date filters and drill-down,
policy history, and "since a checkpoint". Every view is a plain GET URL you
can bookmark. The ledger is opened as an auditor (read-only connections, no
secret key); each page reads in one short transaction, so releases keep
running beside it. A snapshot from `privpipe ledger backup OUT` is served with
--ledger OUT/ledger.duckdb --public-key YOUR_COPY.pub.

Binds 127.0.0.1 by default and has no login and no TLS: to let others reach
it, keep it on loopback and put a reverse proxy with TLS and authentication in
front (docs/audit-web.md). Stop it with Ctrl-C.
"""


def _audit_group(ctx: typer.Context, **kwargs: Any) -> None:
    if ctx.invoked_subcommand is None:
        audit_cmd(**kwargs)


# The group's callback takes audit_cmd's options (and the context), so the
# static audit keeps its exact command line and help.
_AUDIT_SIGNATURE = inspect.signature(audit_cmd, eval_str=True)
_audit_group.__signature__ = _AUDIT_SIGNATURE.replace(  # type: ignore[attr-defined]
    parameters=[inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  annotation=typer.Context),
                *_AUDIT_SIGNATURE.parameters.values()])
_audit_group.__doc__ = audit_cmd.__doc__

audit_app = typer.Typer(no_args_is_help=False)
audit_app.callback(invoke_without_command=True)(_audit_group)


@audit_app.command("serve", help=SERVE_HELP)
@handle_errors
def serve_cmd(
    ledger: Path | None = LedgerOpt,
    public_key: Path | None = typer.Option(
        None, "--public-key", help="The public key file you kept: the signed head is checked "
                                   "with it (default: <ledger>.pub beside the ledger, which is "
                                   "the operator's copy)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default "
                             "loopback only; anything else needs a TLS + auth proxy)."),
    port: int = typer.Option(8765, "--port", help="Port to listen on."),
    reverify_every: float = typer.Option(
        300.0, "--reverify-every", help="Seconds between two whole-chain verifications when "
        "the head moves (a writer waits for each: about 16 s at 2 x 10^6 entries)."),
) -> None:
    """Serve the read-only audit web page (see the help above)."""
    from flows.audit_server import serve

    path = _ledger_path(ledger)
    if not path.exists():
        raise LedgerOpenError(f"no ledger at {str(path)!r}")
    if public_key is not None and not public_key.is_file():
        raise ParameterError(f"--public-key {str(public_key)!r} is not a file")
    if not 0 < port < 65536:
        raise ParameterError("--port must be 1..65535")
    if not reverify_every >= 0:
        raise ParameterError("--reverify-every must be >= 0 seconds")
    console.print(f"audit page of {path} on http://{host}:{port}/ (read-only; Ctrl-C stops)")
    serve(path, public_key, host, port, reverify_every)
