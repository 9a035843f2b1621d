"""``privpipe worker serve``: run a keyless privpipe worker for ``privpipe+https://`` runners.

See `flows.worker_serve` for what the worker holds and answers, and
docs/scale.md for running it on other hosts. Exit code 2 for refused options
(no TLS without ``--insecure-loopback`` on a loopback address, no
authentication).
"""

from __future__ import annotations

from pathlib import Path

import typer

from flows.cli_common import handle_errors

worker_app = typer.Typer(help="Serve chunk work to a flow on another host (keyless; HTTPS).",
                         no_args_is_help=True)


@worker_app.command("serve")
@handle_errors
def serve_worker_cmd(
    listen: str = typer.Option(..., "--listen", help="HOST:PORT to listen on."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="The worker's certificate "
                                         "(PEM; with its chain)."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="The certificate's key (PEM)."),
    client_ca: Path | None = typer.Option(None, "--client-ca", help="Require a client "
                                          "certificate signed by this CA (PEM)."),
    token_file: Path | None = typer.Option(None, "--token-file", help="File holding the bearer "
                                           "token flows must send (16 characters or more)."),
    insecure_loopback: bool = typer.Option(False, "--insecure-loopback", help="Plain HTTP on a "
                                           "loopback address (tests and one-machine "
                                           "benchmarks only)."),
    threads: int = typer.Option(1, "--threads", min=1, help="Chunks run at once."),
) -> None:
    """Serve chunk work: run each chunk a flow sends and answer its outputs (no ledger, no key)."""
    from flows.worker_serve import serve_worker

    serve_worker(listen, tls_cert=tls_cert, tls_key=tls_key, client_ca=client_ca,
                 token_file=token_file, insecure_loopback=insecure_loopback, threads=threads)
