"""`privpipe ledger serve` and `privpipe ledger serve-token`: the ledger as a service.

``serve`` runs `flows.ledger_server` (HTTPS, per-client credentials with a
role); ``serve-token`` makes a credential: a random token printed once, and
its SHA-256 appended to the clients file (rewritten atomically, mode 0600).
See docs/ledger.md, "A ledger service for many hosts".
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from files.safe_files import write_file
from flows.cli_common import console, handle_errors
from flows.cli_ledger import ledger_app
from ledger.filters import parse_time
from schemas.errors import ParameterError

_NAME = re.compile(r"[A-Za-z0-9._@-]{1,128}")


@ledger_app.command("serve")
@handle_errors
def serve(
    ledger: Annotated[Path, typer.Option("--ledger", help="The ledger file this process owns.")],
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to listen on.")],
    tls_cert: Annotated[Path, typer.Option("--tls-cert", help="Server certificate (PEM).")],
    tls_key: Annotated[Path, typer.Option("--tls-key", help="Server private key (PEM).")],
    clients: Annotated[Path, typer.Option(
        "--clients", help="Clients file (TOML, [[client]] name, role, token_sha256, "
                          "expires); re-read when it changes.")],
    verify_every: Annotated[float, typer.Option(
        "--verify-every", help="Least seconds between two whole-chain verifications run for "
                               "releasers and auditors (writes wait during one); the same "
                               "question at an unchanged head is answered from the last one. "
                               "0: no limit.")] = 60.0,
    max_published_mb: Annotated[int, typer.Option(
        "--max-published-mb", help="Largest published file (MB) a releaser may keep in the "
                                   "ledger's store (PUT /v1/published/...); larger: 413.",
        min=1)] = 4096,
) -> None:
    """Serve the ledger to releasers, auditors and admins on other hosts, over HTTPS.

    This process owns the ledger file and its keys; clients pass
    --ledger https://HOST:PORT with PRIVPIPE_LEDGER_TOKEN (or _TOKEN_FILE) and
    PRIVPIPE_LEDGER_CA. Runs until interrupted.
    """
    from flows.ledger_server import serve_ledger

    serve_ledger(ledger, listen, tls_cert=tls_cert, tls_key=tls_key, clients=clients,
                 verify_every=verify_every, max_published_mb=max_published_mb)


def _expiry(text: str | None) -> str:
    if text is None:
        return ""
    when = parse_time(text, "--expires")
    assert when is not None
    when = when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    if when <= datetime.now(UTC):
        raise ParameterError(f"--expires {text!r} is in the past")
    return f"expires = {when.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"


@ledger_app.command("serve-token")
@handle_errors
def serve_token(
    clients: Annotated[Path, typer.Option("--clients", help="Clients file to add to.")],
    name: Annotated[str, typer.Option("--name", help="Client name (the actor it writes as).")],
    role: Annotated[str, typer.Option("--role", help="releaser, auditor or admin.")],
    expires: Annotated[str | None, typer.Option(
        "--expires", help="ISO 8601 time after which the token is refused.")] = None,
) -> None:
    """Create a client credential: print a new token once, store only its SHA-256.

    The clients file is rewritten atomically with mode 0600; a running
    `ledger serve` picks the new client up on its next request.
    """
    from flows.ledger_server import ROLES, load_clients

    if not _NAME.fullmatch(name):
        raise ParameterError("--name must be 1-128 letters, digits, '.', '_', '@' or '-'")
    if role not in ROLES:
        raise ParameterError(f"--role must be one of {', '.join(ROLES)}")
    old = clients.read_text(encoding="utf-8") if clients.exists() else ""
    if old and any(c.name == name for c in load_clients(clients)):
        raise ParameterError(f"the clients file already has a client named {name!r}")
    token = secrets.token_urlsafe(32)
    digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
    block = (f"\n[[client]]\nname = {_toml_str(name)}\nrole = \"{role}\"\n"
             f"token_sha256 = \"{digest}\"\n{_expiry(expires)}")
    text = (old.rstrip("\n") + "\n" if old else "") + block
    write_file(clients, text.encode("utf-8"))
    load_clients(clients)  # what was written reads back
    sys.stdout.write(token + "\n")  # the token alone on stdout, once
    console.print(f"client {name!r} ({role}) added to {clients}; the token above is not "
                  "stored anywhere: give it to the client now", highlight=False, markup=False)


def _toml_str(text: str) -> str:
    """A TOML basic string (ids have no control characters: `check_id`)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
