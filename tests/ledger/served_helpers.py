"""Helpers of the ledger-service tests: a throwaway CA, server certificate, credentials,
and `privpipe ledger serve` as a subprocess on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.ledger.ledger_helpers import PYTHON, subprocess_env

TOKENS = {"rel-a": ("releaser", None), "rel-b": ("releaser", None), "aud": ("auditor", None),
          "adm": ("admin", None), "old": ("releaser", "2020-01-01T00:00:00Z")}


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_certs(d: Path, name: str = "ca") -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key) for 127.0.0.1 and localhost, in `d`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key, srv_key = _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"privpipe test {name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(hours=1))
          .not_valid_after(now + dt.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    srv = (x509.CertificateBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
           .issuer_name(ca_name).public_key(srv_key.public_key())
           .serial_number(x509.random_serial_number())
           .not_valid_before(now - dt.timedelta(hours=1))
           .not_valid_after(now + dt.timedelta(days=2))
           .add_extension(x509.SubjectAlternativeName([
               x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
               critical=False)
           .sign(ca_key, hashes.SHA256()))
    d.mkdir(parents=True, exist_ok=True)
    paths = d / f"{name}.pem", d / f"{name}-server.pem", d / f"{name}-server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(_pem(srv_key))
    os.chmod(paths[2], 0o600)
    return paths


def write_clients(path: Path) -> dict[str, str]:
    """A clients file with the `TOKENS` credentials; returns name -> token."""
    tokens, lines = {}, []
    for name, (role, expires) in TOKENS.items():
        token = f"token-of-{name}-" + hashlib.sha256(name.encode()).hexdigest()[:16]
        tokens[name] = token
        lines += ["[[client]]", f'name = "{name}"', f'role = "{role}"',
                  f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"']
        if expires:
            lines.append(f"expires = {expires}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    """A running `privpipe ledger serve` and what its clients need."""

    ledger: Path
    url: str
    ca: Path
    tokens: dict[str, str]
    proc: subprocess.Popen
    args: list[str] = field(default_factory=list)

    def env(self, who: str) -> dict[str, str]:
        """Environment of a client process with `who`'s credential."""
        env = subprocess_env()
        env |= {"PRIVPIPE_LEDGER_TOKEN": self.tokens[who], "PRIVPIPE_LEDGER_CA": str(self.ca),
                "PRIVPIPE_LEDGER_RETRY_SECONDS": "30"}
        return env

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.proc = _spawn(self.args)
        wait_up(self)


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, env=subprocess_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def wait_up(served: Served, timeout: float = 60.0) -> None:
    """Wait until the server answers TLS on its port (raise with its stderr if it died)."""
    ctx = ssl.create_default_context(cafile=str(served.ca))
    port = int(served.url.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise RuntimeError(f"ledger serve exited: {served.proc.stderr.read().decode()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                    ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("ledger serve did not come up")


def start_server(ledger: Path, tmp: Path, verify_every: float = 0,
                 extra: tuple[str, ...] = ()) -> Served:
    """Serve `ledger` on a free port of 127.0.0.1 with fresh certificates and clients.

    `verify_every` 0 (no limit on verifications) unless a test checks the limit;
    `extra`: more `ledger serve` options.
    """
    ca, cert, key = make_certs(tmp / "tls")
    clients = tmp / "clients.toml"
    tokens = write_clients(clients)
    port = free_port()
    args = [PYTHON, "-m", "flows.cli", "ledger", "serve", "--ledger", str(ledger),
            "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key),
            "--clients", str(clients), "--verify-every", str(verify_every), *extra]
    served = Served(ledger, f"https://127.0.0.1:{port}", ca, tokens, _spawn(args), args)
    wait_up(served)
    return served


def serve_new_ledger(tmp: Path, extra: tuple[str, ...] = ()) -> Served:
    """A new ledger in `tmp` with the tests' `POLICY` (ledger_helpers), served."""
    from ledger import Ledger
    from schemas.policy import parse_policy
    from tests.ledger.ledger_helpers import POLICY

    path = tmp / "led" / "ledger.duckdb"
    Ledger.init(path, actor="pytest").apply_policy(parse_policy(POLICY, source="p"))
    return start_server(path, tmp, extra=extra)


def client(served: Served, who: str):
    """A `RemoteLedger` of `served` with the credential `who` (a name of `write_clients`)."""
    from ledger.remote import RemoteLedger

    return RemoteLedger(served.url, token=served.tokens[who], ca=str(served.ca))
