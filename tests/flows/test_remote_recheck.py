"""A remote worker does not decide what is published (issue 26, deliverable 3).

The attack: a worker returns outputs of its choosing, e.g. curve values of
424242 or a stream's raw normalised values instead of its Square Wave reports.
Before the check, the release published them and the ledger vouched for them.
With a remote task runner, the flow re-executes a secret sample of each
chunk's users locally and compares bytes: any difference fails the release
(recorded as failed, nothing published, the worker named).

The hostile worker is simulated in-process: a task runner (not Prefect's own
thread pool, so treated as remote) whose chunk futures return a tampered
result; a real Dask worker with a hostile ``--preload`` is in
tests/flows/test_dask_hostile_worker.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from prefect.task_runners import ThreadPoolTaskRunner

from flows.release import release_curves, release_streams
from flows.runners import make_task_runner
from ledger import Ledger
from tasks.recheck import RemoteResultMismatch

pytestmark = pytest.mark.prefect


def _fake_curves(res: Any, chunk: Any) -> Any:
    """Every value of the chunk 424242 (the issue's hostile wrapper)."""
    values = res.tables["values"]
    for col in ("x", "y"):
        i = values.column_names.index(col)
        values = values.set_column(i, col, pa.array(np.full(values.num_rows, 424242.0)))
    res.tables["values"] = values
    return res


def _raw_streams(res: Any, chunk: Any) -> Any:
    """The raw normalised values instead of the randomized reports."""
    samples = res.tables["samples"]
    i = samples.column_names.index("y")
    res.tables["samples"] = samples.set_column(i, "y", pa.array(np.asarray(chunk.values)))
    return res


def _one_user(user: str) -> Any:
    """Shift one user's curve values by a metre: the smallest lie a worker could tell."""
    def tamper(res: Any, chunk: Any) -> Any:
        values = res.tables["values"]
        mine = np.array([u == user for u in values.column("user_id").to_pylist()])
        x = values.column("x").to_numpy() + np.where(mine, 1.0, 0.0)
        res.tables["values"] = values.set_column(values.column_names.index("x"), "x",
                                                 pa.array(x))
        return res
    return tamper


class _Tampered:
    """A chunk future whose result the worker rewrote."""

    def __init__(self, future: Any, chunk: Any, tamper: Any) -> None:
        self._future, self._chunk, self._tamper = future, chunk, tamper
        self.task_run_id = future.task_run_id

    def result(self, *args: Any, **kwargs: Any) -> Any:
        return self._tamper(self._future.result(*args, **kwargs), self._chunk)

    def wait(self, *args: Any, **kwargs: Any) -> None:
        self._future.wait(*args, **kwargs)


def _runner(tamper: Any) -> ThreadPoolTaskRunner:
    """A task runner whose chunk results pass through `tamper` (None: honest)."""
    class Worker(ThreadPoolTaskRunner):
        def submit(self, task, parameters, wait_for=None, dependencies=None):  # type: ignore[override]
            future = super().submit(task, parameters, wait_for, dependencies)
            if tamper is None or not task.name.startswith("privatize"):
                return future
            return _Tampered(future, parameters["chunk"], tamper)

    return Worker(max_workers=2)


def _digest(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.glob("*.parquet"))}


def _curves(runner: Any, curves_csv, policy_file, ledger_path, out: Path, rid: str) -> Any:
    return release_curves.with_options(task_runner=runner)(
        input_path=str(curves_csv), domain="tracks", epsilon="0.5", ledger_path=str(ledger_path),
        policy_path=str(policy_file), chunk_users=2, release_id=rid, out_dir=str(out))


def _failed_unpublished(ledger_path: Path, out: Path, rid: str) -> str:
    """The release is recorded as failed and nothing is published; its recorded error."""
    record = Ledger(ledger_path).release(rid)
    assert record is not None and record["state"] == "failed", record
    assert not (out / rid).exists()
    return str(record["manifest"]["error"])


def test_a_worker_returning_424242_fails_the_release(curves_csv, policy_file, ledger_path,
                                                     tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RemoteResultMismatch, match="table 'values'") as exc:
        _curves(_runner(_fake_curves), curves_csv, policy_file, ledger_path, out, "hostile")
    assert exc.value.exit_code == 4
    error = _failed_unpublished(ledger_path, out, "hostile")
    assert "worker _Tampered of task run" in error and "chunk 0" in error


def test_a_worker_returning_raw_streams_fails_the_release(streams_csv, policy_file, ledger_path,
                                                          tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RemoteResultMismatch, match="table 'samples'"):
        release_streams.with_options(task_runner=_runner(_raw_streams))(
            input_path=str(streams_csv), domain="meters", epsilon="1",
            ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=1,
            release_id="raw", out_dir=str(out))
    _failed_unpublished(ledger_path, out, "raw")


def test_one_altered_user_is_caught_at_rate_one(curves_csv, policy_file, ledger_path, tmp_path,
                                                monkeypatch):
    monkeypatch.setenv("PRIVPIPE_RECHECK_RATE", "1")
    out = tmp_path / "out"
    with pytest.raises(RemoteResultMismatch, match="differ for 'user-3'"):
        _curves(_runner(_one_user("user-3")), curves_csv, policy_file, ledger_path, out, "one")
    _failed_unpublished(ledger_path, out, "one")


def test_more_chunks_than_in_flight_fail_at_the_first_bad_one(curves_csv, policy_file,
                                                              ledger_path, tmp_path):
    """Six chunks of one user, four in flight: the mismatch met while submitting fails it too."""
    out = tmp_path / "out"
    with pytest.raises(RemoteResultMismatch, match="chunk 0"):
        release_curves.with_options(task_runner=_runner(_fake_curves))(
            input_path=str(curves_csv), domain="tracks", epsilon="0.5",
            ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=1,
            release_id="many", out_dir=str(out))
    _failed_unpublished(ledger_path, out, "many")


def test_an_honest_remote_runner_publishes_the_threads_bytes(curves_csv, policy_file,
                                                             ledger_path, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVPIPE_RECHECK_RATE", "1")  # every user re-executed: no false alarm
    threads = _curves(make_task_runner("threads"), curves_csv, policy_file, ledger_path,
                      tmp_path / "threads", "same")
    remote = _curves(_runner(None), curves_csv, policy_file, ledger_path, tmp_path / "remote",
                     "same")
    assert _digest(Path(remote["out"])) == _digest(Path(threads["out"]))
    assert len(_digest(Path(remote["out"]))) == 3


def test_only_prefects_own_pools_and_a_started_local_cluster_are_trusted():
    from prefect.task_runners import ProcessPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from flows.runners import is_remote

    assert not is_remote(ThreadPoolTaskRunner(max_workers=1))
    assert not is_remote(ProcessPoolTaskRunner(max_workers=1))
    assert is_remote(_runner(None))  # a derived class may send work anywhere
    assert is_remote(DaskTaskRunner(address="tcp://127.0.0.1:8786"))
    assert is_remote(DaskTaskRunner(address="tls://127.0.0.1:8786"))
    assert is_remote(DaskTaskRunner())  # not started: its cluster is not known to be local


@pytest.mark.parametrize("bad", ["-1", "2", "abc", "nan"])
def test_a_bad_rate_fails_before_a_remote_runner_is_made(bad, monkeypatch):
    from schemas.errors import ParameterError

    monkeypatch.setenv("PRIVPIPE_RECHECK_RATE", bad)
    with pytest.raises(ParameterError, match="PRIVPIPE_RECHECK_RATE must be a number in"):
        make_task_runner("tcp://127.0.0.1:8786")
    make_task_runner("threads")  # a local runner re-executes nothing: the rate is not read


def test_a_worker_gets_the_seeds_of_its_chunks_users_only(curves_csv, policy_file, ledger_path,
                                                          tmp_path):
    seen: list[Any] = []

    class Recording(ThreadPoolTaskRunner):
        def submit(self, task, parameters, wait_for=None, dependencies=None):  # type: ignore[override]
            if task.name.startswith("privatize"):
                seen.append(parameters["chunk"])
            return super().submit(task, parameters, wait_for, dependencies)

    _curves(Recording(max_workers=2), curves_csv, policy_file, ledger_path, tmp_path / "o", "s")
    assert len(seen) == 3  # six users, two a chunk
    users = [set(c.user_ids) for c in seen]
    assert all(set(c.seeds) == u and len(u) == 2 for c, u in zip(seen, users, strict=True))
    assert set().union(*users) == {f"user-{i}" for i in range(6)}
    assert len({s for c in seen for s in c.seeds.values()}) == 6  # no seed twice
