"""A real Dask scheduler and workers in subprocesses, as the remote-runner tests start them."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (at the time of the call)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def digest(out: Path) -> dict[str, str]:
    """SHA-256 of each Parquet file of a release directory, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.glob("*.parquet"))}


@contextmanager
def dask_cluster(logs: Path, *, env: dict[str, str], scheduler: Sequence[str] = (),
                 worker: Sequence[str] = (), workers: int = 1, protocol: str = "tcp",
                 python: str = sys.executable, client: dict[str, Any] | None = None,
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen,
                 what: str = "the Dask cluster") -> Iterator[tuple[str, list[str]]]:
    """Start a scheduler and a worker process; yield (scheduler address, worker addresses).

    `scheduler` and `worker` are extra command-line arguments; `workers` is how many
    worker addresses to wait for (a `--nworkers` in `worker` starts them); `client`
    holds the keyword arguments of the probing `distributed.Client` (e.g. `security`).
    Each process logs to `logs/<name>.log`, whose tail a start-up failure shows; every
    process is terminated (then killed) on exit.
    """
    port = free_port()
    address = f"{protocol}://127.0.0.1:{port}"
    files = []
    procs = []

    def start(argv: list[str], name: str) -> None:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed below
        files.append(log)
        procs.append(popen(argv, env=env, cwd=logs, stdout=log, stderr=subprocess.STDOUT))

    start([python, "-m", "distributed.cli.dask_scheduler", "--protocol", protocol, "--host",
           "127.0.0.1", "--port", str(port), "--no-dashboard", *scheduler], "scheduler")
    start([python, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
           "--no-dashboard", "--local-directory", str(logs / "space"), *worker], "worker")
    try:
        yield address, _wait_for_workers(address, workers, procs, logs, client or {}, what)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in files:
            log.close()


def _wait_for_workers(address: str, workers: int, procs: list[subprocess.Popen], logs: Path,
                      client: dict[str, Any], what: str) -> list[str]:
    from distributed import Client

    deadline = time.monotonic() + 90
    while True:
        try:
            with Client(address, timeout=5, **client) as c:
                found = list(c.scheduler_info()["workers"])
                if len(found) >= workers:
                    return found
        except OSError:
            pass
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            text = "\n".join((logs / f"{n}.log").read_text(errors="replace")[-2000:]
                             for n in ("scheduler", "worker"))
            pytest.fail(f"{what} did not start:\n{text}")
        time.sleep(0.5)
