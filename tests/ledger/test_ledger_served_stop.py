"""`privpipe ledger serve` stops promptly on SIGTERM and closes its ledger first.

Attacks and accidents replayed against the real server process:

* a client that keeps its keep-alive TLS connection open and idle (every
  release worker does): the server used to wait for the client's TLS
  close_notify (asyncio's 30 s) and Docker's 10 s stop then SIGKILLed it;
* a client that sends half a request and stalls (a slow or hostile worker):
  without a bound the stop waited for it;
* in both cases uvicorn re-raised SIGTERM after its own shutdown, which killed
  the process before the service's ``finally`` checkpointed and closed the
  ledger.
"""

from __future__ import annotations

import signal
import socket
import ssl
import time

import pytest
from served_helpers import client, serve_new_ledger

from flows.http_serve import SHUTDOWN_GRACE_SECONDS, STOPPED_LINE


def _stop(served, timeout: float) -> tuple[float, int, str]:
    """SIGTERM the server; (seconds it took to exit, exit code, stderr). Kill it after `timeout`."""
    t0 = time.monotonic()
    served.proc.send_signal(signal.SIGTERM)
    try:
        served.proc.wait(timeout)
    except Exception:
        served.proc.kill()
        served.proc.wait(10)
        pytest.fail(f"the server did not exit within {timeout} s of SIGTERM")
    return time.monotonic() - t0, served.proc.returncode, served.proc.stderr.read().decode()


def test_an_idle_keep_alive_client_does_not_hold_the_stop(tmp_path):
    served = serve_new_ledger(tmp_path)
    remote = client(served, "adm")
    assert remote.verify().ok  # leaves this thread's keep-alive TLS connection open and idle
    took, code, err = _stop(served, timeout=SHUTDOWN_GRACE_SECONDS)
    assert took < SHUTDOWN_GRACE_SECONDS / 2, took   # at once, not after the grace
    assert code == 128 + signal.SIGTERM, err
    assert STOPPED_LINE in err                      # the ledger was checkpointed and closed


def test_a_stalled_request_holds_the_stop_no_longer_than_the_grace(tmp_path):
    served = serve_new_ledger(tmp_path)
    ctx = ssl.create_default_context(cafile=str(served.ca))
    port = int(served.url.rsplit(":", 1)[1])
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        tls.sendall(b"POST /v1/verify HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Authorization: Bearer " + served.tokens["adm"].encode() + b"\r\n"
                    b"Content-Length: 1000\r\n\r\n{")   # 1 byte of 1000, then nothing
        time.sleep(0.5)
        took, code, err = _stop(served, timeout=SHUTDOWN_GRACE_SECONDS + 20)
    finally:
        tls.close()
    assert took < SHUTDOWN_GRACE_SECONDS + 5, took
    assert code == 128 + signal.SIGTERM, err
    assert STOPPED_LINE in err
