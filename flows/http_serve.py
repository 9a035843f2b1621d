"""Serve an ASGI app until SIGTERM or Ctrl-C, and stop promptly with the service's clean-up done.

The three privpipe services (`privpipe ledger serve`, `worker serve`, `audit
serve`) run through `serve_app`. Plain `uvicorn.run` stops badly for them:

* it waits for every open connection to close. An idle keep-alive TLS
  connection (every release worker keeps one to the ledger service) closes only
  when its client answers the TLS close_notify, which an idle client never
  does: asyncio gives up after 30 s, long after Docker's 10 s stop has
  SIGKILLed the service;
* a request in flight (or half sent by a slow or hostile client) holds the
  stop for as long as the client likes;
* after its shutdown it re-raises SIGTERM with the default action, which kills
  the process before the caller's ``finally`` runs: the ledger service's
  closing checkpoint never ran.

`serve_app` closes idle connections at once, gives requests in flight at most
`SHUTDOWN_GRACE_SECONDS` to finish (then cancels them: a client sees its
connection drop and retries elsewhere or later; a ledger write already running
still commits or rolls back whole, as the service's close waits for it), runs
``on_stop`` and writes `STOPPED_LINE` to stderr. A SIGTERM exits with status
143 (128 + 15), Ctrl-C with 0; a server that could not bind its port exits 2
(`ParameterError`), not uvicorn's 3, which privpipe's exit codes give to a denial.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

from schemas.errors import ParameterError

SHUTDOWN_GRACE_SECONDS = 8.0
"""How long requests in flight may run after SIGTERM (under Docker's default 10 s stop)."""

STOPPED_LINE = "privpipe: stopped; the service's files are closed"
"""Written to stderr once the service has stopped and run its clean-up."""

_UVICORN_STARTUP_FAILURE = 3


def _server(config: Any) -> Any:
    """A `uvicorn.Server` whose shutdown first closes the connections with no request in flight."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            for conn in list(self.server_state.connections):
                _close_if_idle(conn)
            await super().shutdown(sockets)

    return Server(config)


def _close_if_idle(conn: Any) -> None:
    """Abort a connection that has no request in flight (no TLS goodbye to wait for).

    uvicorn's HTTP protocols keep the request in flight as ``cycle`` (None
    between requests) and their transport as ``transport``; a connection of
    another shape is left to the grace.
    """
    transport = getattr(conn, "transport", None)
    if transport is None or not hasattr(conn, "cycle"):
        return
    if conn.cycle is None or conn.cycle.response_complete:
        transport.abort()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def serve_app(app: Any, *, host: str, port: int, on_stop: Callable[[], None] = lambda: None,
              **options: Any) -> None:
    """Serve `app` on host:port until SIGTERM or SIGINT, then run `on_stop` (module docstring).

    `options` are uvicorn's (TLS files, log level, ...).

    Raises:
        ParameterError: the server could not start (its port taken, say): exit 2.
    """
    import uvicorn

    # uvicorn re-raises the SIGTERM it caught once it has shut down; with this handler
    # that raises SystemExit here, so the clean-up below runs before the process ends.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server = _server(uvicorn.Config(app, host=host, port=port,
                                        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
                                        **options))
        try:
            server.run()
        except KeyboardInterrupt:   # Ctrl-C, re-raised the same way
            pass
        except SystemExit as stop:  # uvicorn's exit 3 (STARTUP_FAILURE): it could not bind
            if server.started or stop.code != _UVICORN_STARTUP_FAILURE:
                raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        on_stop()
        print(STOPPED_LINE, file=sys.stderr, flush=True)
    if not server.started:
        raise ParameterError(f"could not listen on {host}:{port} (the reason is above)")
