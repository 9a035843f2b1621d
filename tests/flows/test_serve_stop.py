"""`privpipe worker serve` and `audit serve` stop at once on SIGTERM, their clean-up done.

The ledger service's own stop (an idle TLS client, a stalled request) is
tests/ledger/test_ledger_served_stop.py; here the other two services, each with
a client that keeps its keep-alive connection open (as the release flow keeps
one to each worker).
"""

from __future__ import annotations

import http.client
import signal
import ssl
import subprocess
import sys
import time

from dask_cluster import ROOT, free_port
from privpipe_workers import TOKEN, self_signed

from flows.http_serve import SHUTDOWN_GRACE_SECONDS, STOPPED_LINE
from ledger import Ledger


def _serve_then_sigterm(argv: list[str], log_path, make_connection) -> None:
    """Start `privpipe ARGV`, hold an idle keep-alive connection, SIGTERM it: at once, clean."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *argv], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
        con = _connect(make_connection, proc)
        took = _sigterm(proc)
        con.close()
    out = log_path.read_text()
    assert took < SHUTDOWN_GRACE_SECONDS / 2, (took, out)
    assert proc.returncode == 128 + signal.SIGTERM and STOPPED_LINE in out, out


def _connect(make, proc: subprocess.Popen) -> http.client.HTTPConnection:
    """A connection that answered one GET /v1/health and stays open (keep-alive)."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the service exited"
        con = make()
        try:
            con.request("GET", "/v1/health")
            con.getresponse().read()
            return con
        except OSError:
            con.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _sigterm(proc: subprocess.Popen) -> float:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(SHUTDOWN_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("no exit within the grace of SIGTERM") from None
    return time.monotonic() - t0


def test_worker_serve_with_an_idle_tls_client_stops_at_once(tmp_path):
    cert, key = self_signed(tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    port = free_port()
    ctx = ssl.create_default_context(cafile=str(cert))
    _serve_then_sigterm(["worker", "serve", "--listen", f"127.0.0.1:{port}", "--token-file",
                         str(token), "--tls-cert", str(cert), "--tls-key", str(key)],
                        tmp_path / "worker.log",
                        lambda: http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                                            timeout=5))


def test_audit_serve_runs_its_clean_up_on_sigterm(tmp_path):
    led = Ledger.init(tmp_path / "ledger.duckdb", actor="pytest")
    port = free_port()
    _serve_then_sigterm(["audit", "serve", "--ledger", str(led.path), "--port", str(port)],
                        tmp_path / "audit.log",
                        lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=5))


def test_a_taken_port_is_exit_2_not_uvicorns_3(tmp_path):
    """uvicorn exits 3 when it cannot bind; privpipe's 3 means a denied release."""
    import socket

    led = Ledger.init(tmp_path / "ledger.duckdb", actor="pytest")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "flows.cli", "audit", "serve", "--ledger",
                              str(led.path), "--port", str(port)], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert f"could not listen on 127.0.0.1:{port}" in run.stderr
