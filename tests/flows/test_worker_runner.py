"""The privpipe worker runner gives the threads bytes and charges, and refuses what it must.

Two real `privpipe worker serve` processes on loopback; the flow runs with
``--task-runner privpipe+http://...`` (plain HTTP is allowed to loopback
workers only) or ``privpipe+https://...`` with a certificate made here.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb
import pytest
from privpipe_workers import TOKEN, privpipe_workers, self_signed

from flows.release import release_curves, release_streams
from flows.runners import is_remote, make_task_runner
from ledger import Ledger
from schemas.errors import ParameterError
from schemas.policy import load_policy
from tasks.remote_chunk import WorkerUnavailableError

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Two plain-HTTP loopback workers (addresses)."""
    with privpipe_workers(tmp_path_factory.mktemp("workers")) as addresses:
        yield addresses


@pytest.fixture()
def token_env(tmp_path, monkeypatch):
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o600)
    monkeypatch.setenv("PRIVPIPE_WORKER_TOKEN_FILE", str(path))
    monkeypatch.setenv("PRIVPIPE_RECHECK_RATE", "1")  # every user re-executed: no false alarm
    return path


def _digest(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.glob("*.parquet"))}


def _entries(ledger_path: Path) -> list[tuple]:
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        return con.execute("SELECT release_id, user_id, step, kind, CAST(amount AS VARCHAR), "
                           "CAST(balance_after AS VARCHAR) FROM entries ORDER BY seq").fetchall()
    finally:
        con.close()


def _twins(tmp_path: Path, policy_file: Path) -> dict[str, Path]:
    """Two copies of one fresh ledger (the same noise key: the same noise)."""
    template = tmp_path / "template"
    template.mkdir()
    Ledger.init(template / "ledger.duckdb").apply_policy(load_policy(policy_file))
    out = {}
    for name in ("threads", "workers"):
        shutil.copytree(template, tmp_path / name)
        out[name] = tmp_path / name / "ledger.duckdb"
    return out


def _release(kind: str, runner: str, ledger: Path, inputs: Path, policy: Path, out: Path,
             rid: str = "same") -> dict:
    flow, extra = ((release_curves, {"domain": "tracks", "epsilon": "0.5", "chunk_users": 2})
                   if kind == "curves" else
                   (release_streams, {"domain": "meters", "epsilon": "1", "chunk_users": 1}))
    return flow.with_options(task_runner=make_task_runner(runner))(
        input_path=str(inputs), ledger_path=str(ledger), policy_path=str(policy),
        release_id=rid, out_dir=str(out), **extra)


@pytest.mark.parametrize("kind", ["curves", "streams"])
def test_two_workers_give_the_threads_bytes_and_charges(kind, workers, token_env, curves_csv,
                                                        streams_csv, policy_file, tmp_path):
    ledgers = _twins(tmp_path, policy_file)
    inputs = curves_csv if kind == "curves" else streams_csv
    spec = "privpipe+http://" + ",".join(workers)
    assert is_remote(make_task_runner(spec))
    threads = _release(kind, "threads", ledgers["threads"], inputs, policy_file,
                       tmp_path / "threads" / "out")
    remote = _release(kind, spec, ledgers["workers"], inputs, policy_file,
                      tmp_path / "workers" / "out")
    assert _digest(Path(remote["out"])) == _digest(Path(threads["out"]))
    assert _digest(Path(remote["out"]))
    assert _entries(ledgers["workers"]) == _entries(ledgers["threads"])
    assert Ledger(ledgers["workers"]).verify().ok


def test_a_retried_chunk_is_the_first_ones_bytes(workers, token_env, curves_csv, policy_file,
                                                 tmp_path):
    """The same chunk sent twice (a retry) comes back byte for byte the same."""
    import numpy as np

    from tasks.privatize import CurveSpec
    from tasks.remote_chunk import WorkerPool
    from tasks.stage import CurveChunk
    from tasks.wire_chunk import encode_curve_request

    t = np.tile(np.arange(50, dtype=float), 4)
    chunk = CurveChunk(0, ("a", "a", "b", "c"), ("c0", "c1", "c0", "c0"), t,
                       np.sin(np.c_[t, t / 3]), np.arange(5) * 50,
                       {"a": 2**255 + 1, "b": 7, "c": 2**200})
    body = encode_curve_request(chunk, ("x", "y"), CurveSpec("privfuncseg", "0.5", None))
    pool = WorkerPool([f"http://{workers[0]}"])
    try:
        first = pool.send(0, body)
        again = pool.send(0, body)
        other = WorkerPool([f"http://{workers[1]}"]).send(0, body)
    finally:
        pool.close()
    assert first[1] == 200 and first[2] == again[2] == other[2]


def test_a_down_worker_is_skipped_and_all_down_is_named(workers, token_env, curves_csv,
                                                        policy_file, ledger_path, tmp_path):
    from dask_cluster import free_port

    dead = f"127.0.0.1:{free_port()}"
    ok = _release("curves", f"privpipe+http://{dead},{workers[0]}", ledger_path, curves_csv,
                  policy_file, tmp_path / "out", rid="one-down")
    assert _digest(Path(ok["out"]))
    with pytest.raises(WorkerUnavailableError, match=f"http://{dead}") as exc:
        _release("curves", f"privpipe+http://{dead}", ledger_path, curves_csv, policy_file,
                 tmp_path / "out", rid="all-down")
    assert exc.value.exit_code == 2
    record = Ledger(ledger_path).release("all-down")
    assert record["state"] == "failed" and dead in record["manifest"]["error"]
    assert not (tmp_path / "out" / "all-down").exists()


def test_a_wrong_token_is_refused(workers, token_env, curves_csv, policy_file, ledger_path,
                                  tmp_path, monkeypatch):
    bad = tmp_path / "bad-token"
    bad.write_text("not-the-token-of-this-worker-xx")
    bad.chmod(0o600)
    monkeypatch.setenv("PRIVPIPE_WORKER_TOKEN_FILE", str(bad))
    with pytest.raises(WorkerUnavailableError, match="HTTP 401"):
        _release("curves", f"privpipe+http://{workers[0]}", ledger_path, curves_csv,
                 policy_file, tmp_path / "out", rid="bad-token")
    monkeypatch.delenv("PRIVPIPE_WORKER_TOKEN_FILE")
    with pytest.raises(WorkerUnavailableError, match="HTTP 401"):
        _release("curves", f"privpipe+http://{workers[0]}", ledger_path, curves_csv,
                 policy_file, tmp_path / "out", rid="no-token")


def test_plain_http_is_refused_off_loopback_on_both_sides(tmp_path):
    from flows.worker_serve import serve_worker

    with pytest.raises(ParameterError, match="plain HTTP only to a loopback"):
        make_task_runner("privpipe+http://10.0.0.1:8443")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    with pytest.raises(ParameterError, match="HTTPS only"):
        serve_worker("0.0.0.0:8443", tls_cert=None, tls_key=None, client_ca=None,
                     token_file=token)
    with pytest.raises(ParameterError, match="loopback address only"):
        serve_worker("0.0.0.0:8443", tls_cert=None, tls_key=None, client_ca=None,
                     token_file=token, insecure_loopback=True)
    cert, key = self_signed(tmp_path)
    with pytest.raises(ParameterError, match="needs an authentication"):
        serve_worker("127.0.0.1:8443", tls_cert=cert, tls_key=key, client_ca=None,
                     token_file=None)


def test_https_workers_with_a_client_certificate(tmp_path, token_env, curves_csv, policy_file,
                                                 monkeypatch):
    """TLS with a CA made here; the worker also requires a client certificate."""
    cert, key = self_signed(tmp_path, "worker")
    client_cert, client_key = self_signed(tmp_path, "client")
    ledgers = _twins(tmp_path, policy_file)
    threads = _release("curves", "threads", ledgers["threads"], curves_csv, policy_file,
                       tmp_path / "threads" / "out")
    extra = ["--tls-cert", str(cert), "--tls-key", str(key), "--client-ca", str(client_cert)]
    with privpipe_workers(tmp_path, 1, extra=extra, https=True) as addresses:
        spec = f"privpipe+https://{addresses[0]}"
        monkeypatch.setenv("PRIVPIPE_WORKER_CA", str(cert))
        with pytest.raises(WorkerUnavailableError):  # no client certificate: refused
            _release("curves", spec, ledgers["workers"], curves_csv, policy_file,
                     tmp_path / "workers" / "out", rid="no-cert")
        monkeypatch.setenv("PRIVPIPE_WORKER_CERT", str(client_cert))
        monkeypatch.setenv("PRIVPIPE_WORKER_KEY", str(client_key))
        remote = _release("curves", spec, ledgers["workers"], curves_csv, policy_file,
                          tmp_path / "workers" / "out")
        monkeypatch.setenv("PRIVPIPE_WORKER_CA", str(client_cert))  # not the worker's CA
        with pytest.raises(WorkerUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            _release("curves", spec, ledgers["workers"], curves_csv, policy_file,
                     tmp_path / "workers" / "out", rid="wrong-ca")
    assert _digest(Path(remote["out"])) == _digest(Path(threads["out"]))


def test_the_cli_and_the_python_api_accept_the_spec_before_prefect_starts():
    from flows.preflight import task_runner_spec

    spec = "privpipe+https://w1.example:8443,10.0.0.2:8443"
    assert task_runner_spec(spec) == spec
    assert task_runner_spec("privpipe+http://127.0.0.1:9000") == "privpipe+http://127.0.0.1:9000"
    for bad in ("privpipe+http://w1.example:80", "privpipe+https://w1.example",
                "privpipe+ftp://w1:1"):
        with pytest.raises(ParameterError):
            task_runner_spec(bad)


def test_worker_serve_refuses_plain_http_off_loopback_with_exit_2(tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    r = CliRunner().invoke(app, ["worker", "serve", "--listen", "0.0.0.0:8443",
                                 "--token-file", str(token), "--insecure-loopback"])
    assert r.exit_code == 2, r.output
    assert "loopback address only" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("kind", ["curves", "streams"])
def test_workers_with_a_served_ledger_give_the_threads_bytes(kind, workers, token_env,
                                                             curves_csv, streams_csv,
                                                             policy_file, tmp_path, monkeypatch):
    """A flow whose ledger is served holds no noise key: the recheck keys of its remote
    chunks come from the service (`recheck_keys`), and the release is the threads one."""
    from tests.ledger.served_helpers import start_server

    ledgers = _twins(tmp_path, policy_file)
    inputs = curves_csv if kind == "curves" else streams_csv
    threads = _release(kind, "threads", ledgers["threads"], inputs, policy_file,
                       tmp_path / "threads" / "out")
    served = start_server(ledgers["workers"], tmp_path / "service")
    try:
        monkeypatch.setenv("PRIVPIPE_LEDGER_TOKEN", served.tokens["rel-a"])
        monkeypatch.setenv("PRIVPIPE_LEDGER_CA", str(served.ca))
        remote = _release(kind, "privpipe+http://" + ",".join(workers), served.url, inputs,
                          policy_file, tmp_path / "workers" / "out")
    finally:
        served.stop()
    assert _digest(Path(remote["out"])) == _digest(Path(threads["out"]))
    assert _entries(ledgers["workers"]) == _entries(ledgers["threads"])
    assert Ledger(ledgers["workers"]).verify().ok
