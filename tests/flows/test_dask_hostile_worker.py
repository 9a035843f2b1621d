"""A real Dask worker started with a hostile ``--preload`` cannot choose what is published.

The preload wraps the curve chunk task so that every released value is 424242
(the attack of issue 26). The flow, on ``--task-runner tcp://...``, re-executes
a secret sample of each chunk locally: the release fails, is recorded as
failed, publishes nothing, and the error names the worker's address as the
scheduler knows it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows.release import release_curves
from flows.runners import make_task_runner
from ledger import Ledger
from tasks.recheck import RemoteResultMismatch

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

HOSTILE = textwrap.dedent('''
    """Preloaded by a hostile Dask worker: every curve value it returns is 424242."""
    import numpy as np
    import pyarrow as pa

    import tasks.privatize as privatize

    _honest = privatize.privatize_curve_chunk


    def _lie(chunk, value_columns, spec):
        res = _honest(chunk, value_columns, spec)
        values = res.tables["values"]
        for col in value_columns:
            values = values.set_column(values.column_names.index(col), col,
                                       pa.array(np.full(values.num_rows, 424242.0)))
        res.tables["values"] = values
        return res


    def dask_setup(worker):
        privatize.privatize_curve_chunk = _lie
        privatize.privatize_curves.fn = _lie
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def hostile_cluster(tmp_path):
    """A scheduler and one worker preloaded with the hostile module."""
    (tmp_path / "hostile_preload.py").write_text(HOSTILE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = [open(tmp_path / f"{n}.log", "wb") for n in ("scheduler", "worker")]  # noqa: SIM115
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                               "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              env=env, cwd=tmp_path, stdout=logs[0], stderr=subprocess.STDOUT)]
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
         "--no-dashboard", "--preload", "hostile_preload",
         "--local-directory", str(tmp_path / "space")],
        env=env, cwd=tmp_path, stdout=logs[1], stderr=subprocess.STDOUT))
    from distributed import Client

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with Client(address, timeout=5) as client:
                    workers = list(client.scheduler_info()["workers"])
                    if workers:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                text = "\n".join((tmp_path / f"{n}.log").read_text(errors="replace")[-2000:]
                                 for n in ("scheduler", "worker"))
                pytest.fail(f"the hostile Dask cluster did not start:\n{text}")
            time.sleep(0.5)
        yield address, workers[0]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


def test_a_preloaded_hostile_dask_worker_fails_the_release(hostile_cluster, curves_csv,
                                                           policy_file, ledger_path, tmp_path):
    address, worker = hostile_cluster
    out = tmp_path / "out"
    with pytest.raises(RemoteResultMismatch, match="table 'values'") as exc:
        release_curves.with_options(task_runner=make_task_runner(address))(
            input_path=str(curves_csv), domain="tracks", epsilon="0.5",
            ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=3,
            release_id="preloaded", out_dir=str(out))
    assert exc.value.worker == worker  # the scheduler's record of who computed it
    record = Ledger(ledger_path).release("preloaded")
    assert record is not None and record["state"] == "failed"
    assert f"from worker {worker}" in record["manifest"]["error"]
    assert not (out / "preloaded").exists()

    # the same through the CLI: exit 4, one line naming the worker, nothing published
    from typer.testing import CliRunner

    from flows.cli import app

    r = CliRunner().invoke(app, [
        "release", "curves", str(curves_csv), "--domain", "tracks", "--epsilon", "0.5",
        "--policy", str(policy_file), "--ledger", str(ledger_path), "--out", str(out),
        "--chunk-users", "3", "--release-id", "preloaded-cli", "--task-runner", address])
    assert r.exit_code == 4, r.output
    assert f"from worker {worker}" in r.output and "Traceback" not in r.output
    assert Ledger(ledger_path).release("preloaded-cli")["state"] == "failed"
    assert not (out / "preloaded-cli").exists()
