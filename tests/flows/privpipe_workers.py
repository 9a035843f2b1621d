"""Real `privpipe worker serve` processes on loopback, as the worker-runner tests start them."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dask_cluster import ROOT, free_port

TOKEN = "a-test-token-of-32-characters-ok"


@contextmanager
def privpipe_workers(logs: Path, n: int = 2, *, extra: Sequence[str] = (),
                     https: bool = False, token_file: Path | None = None
                     ) -> Iterator[list[str]]:
    """Start `n` workers on 127.0.0.1; yield their addresses (HOST:PORT); stop them after.

    Plain HTTP (``--insecure-loopback``) unless `https` (then `extra` carries the TLS
    options). The token is `TOKEN` unless `token_file` is given.
    """
    import httpx

    if token_file is None:
        token_file = logs / "worker-token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
    procs, files, addresses = [], [], []
    try:
        for i in range(n):
            address = f"127.0.0.1:{free_port()}"
            log = open(logs / f"worker-{i}.log", "wb")  # noqa: SIM115 - closed below
            files.append(log)
            argv = [sys.executable, "-m", "flows.cli", "worker", "serve", "--listen", address,
                    "--token-file", str(token_file), *extra]
            if not https:
                argv.append("--insecure-loopback")
            procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
            addresses.append(address)
        for proc, address, i in zip(procs, addresses, range(n), strict=True):
            _wait(proc, address, logs / f"worker-{i}.log", https, httpx)
        yield addresses
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in files:
            log.close()


def _wait(proc: subprocess.Popen, address: str, log: Path, https: bool, httpx: object) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited: {log.read_text()[-2000:]}")
        try:
            import socket

            host, port = address.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the worker did not start: {log.read_text()[-2000:]}")


def self_signed(folder: Path, name: str = "worker") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files in `folder`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path
