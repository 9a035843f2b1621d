"""`--task-runner tls://...` works with Dask's TLS configuration (issue 26).

docs/scale.md recommended ``tls://`` and the CLI refused it. The test makes a
self-signed CA and a certificate with openssl, starts a TLS-only scheduler and
worker with them, and releases through ``tls://`` with the client's
credentials in the Dask configuration: the outputs are the threads runner's
bytes. Without the configuration the runner is refused with exit 2 naming the
keys to set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from dask_cluster import ROOT, dask_cluster, digest

from flows.release import release_curves
from flows.runners import make_task_runner

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture()
def certificates(tmp_path) -> dict[str, str]:
    """A self-signed CA and one certificate it signed (for 127.0.0.1), made here."""
    if shutil.which("openssl") is None:
        pytest.fail("this test needs the openssl command to make its certificates")
    d = tmp_path / "tls"
    d.mkdir(mode=0o700)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=privpipe test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "node.pem", "-days", "2", "-extfile", "san.ext", cwd=d)
    return {"ca": str(d / "ca.pem"), "cert": str(d / "node.pem"), "key": str(d / "node.key")}


@pytest.fixture()
def tls_cluster(tmp_path, certificates):
    """A TLS-only scheduler and one worker, both with the test's certificates."""
    import dask.config
    from distributed.security import Security

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    tls = ["--tls-ca-file", certificates["ca"], "--tls-cert", certificates["cert"],
           "--tls-key", certificates["key"]]
    security = Security(tls_ca_file=certificates["ca"], tls_client_cert=certificates["cert"],
                        tls_client_key=certificates["key"], require_encryption=True)
    config = {"distributed.comm.tls.ca-file": certificates["ca"],
              "distributed.comm.tls.client.cert": certificates["cert"],
              "distributed.comm.tls.client.key": certificates["key"],
              "distributed.comm.require-encryption": True}
    with dask_cluster(tmp_path, env=env, scheduler=tls, worker=tls, protocol="tls",
                      client={"security": security}, what="the TLS Dask cluster") as (address, _), \
            dask.config.set(config):
        yield address


def test_a_tls_runner_releases_the_threads_bytes(tls_cluster, curves_csv, policy_file,
                                                 ledger_path, tmp_path):
    kw = dict(input_path=str(curves_csv), domain="tracks", epsilon="0.5",
              ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=2,
              release_id="over-tls")
    threads = release_curves.with_options(task_runner=make_task_runner("threads"))(
        out_dir=str(tmp_path / "threads"), **kw)
    remote = release_curves.with_options(task_runner=make_task_runner(tls_cluster))(
        out_dir=str(tmp_path / "tls"), **kw)
    assert digest(Path(remote["out"])) == digest(Path(threads["out"]))
    assert len(digest(Path(remote["out"]))) == 3

    # the CLI, which refused tls://, runs it too
    from typer.testing import CliRunner

    from flows.cli import app

    r = CliRunner().invoke(app, [
        "release", "curves", str(curves_csv), "--domain", "tracks", "--epsilon", "0.5",
        "--policy", str(policy_file), "--ledger", str(ledger_path),
        "--out", str(tmp_path / "cli"), "--chunk-users", "2", "--release-id", "over-tls",
        "--task-runner", tls_cluster])
    assert r.exit_code == 0, r.output
    assert digest(tmp_path / "cli" / "over-tls") == digest(Path(threads["out"]))


def test_a_tls_runner_without_dask_tls_configuration_is_refused():
    import dask.config

    from schemas.errors import ParameterError

    with dask.config.set({"distributed.comm.tls.ca-file": None,
                          "distributed.comm.tls.client.cert": None}), \
            pytest.raises(ParameterError, match="distributed.comm.tls.ca-file") as exc:
        make_task_runner("tls://127.0.0.1:8786")
    assert exc.value.exit_code == 2


def test_the_cli_accepts_tls_and_processes_runners(monkeypatch):
    from flows.preflight import task_runner_spec

    # a scheduler on another host needs a Prefect API its workers reach (test_remote_runner_api)
    monkeypatch.setattr("flows.settings.configured_api_url",
                        lambda: "http://prefect-server:4200/api")
    assert task_runner_spec("tls://scheduler:8786") == "tls://scheduler:8786"
    assert task_runner_spec("tls://127.0.0.1:8786") == "tls://127.0.0.1:8786"
    assert task_runner_spec("processes") == "processes"
