"""Task runners: threads (default), processes, Dask (local or a cluster), Ray.

Whatever the runner, only the flow process touches the ledger, the noise key
and the staging files: each mechanism task receives its chunk as arrays (the
admitted users' samples and noise seeds, `tasks.stage.CurveChunk`) and returns
its output tables and costs, so a worker on another machine needs no shared
file system and no access to the ledger. docs/scale.md says what travels over
the network and how to run on an existing Dask cluster or on Ray.
"""

from __future__ import annotations

import os
from typing import Any

from schemas.errors import ParameterError

RECHECK_RATE_ENV = "PRIVPIPE_RECHECK_RATE"
"""The environment variable that sets the share of each remote chunk's users re-executed
locally (`tasks.recheck`; default `tasks.recheck.DEFAULT_RATE`, at least one user a chunk)."""


def make_task_runner(spec: str = "threads", *, workers: int = 2) -> Any:
    """Build a Prefect task runner from a spec string.

    Args:
        spec: ``threads``; ``processes`` (a pool of `workers` processes on this
            machine); ``dask`` (a LocalCluster of `workers` processes);
            ``tcp://HOST:PORT`` or ``tls://HOST:PORT`` (an existing Dask
            scheduler; TLS credentials from the Dask configuration);
            ``ray://HOST:PORT`` (needs prefect-ray);
            ``privpipe+https://HOST:PORT,HOST:PORT`` (privpipe workers,
            `flows.worker_runner`; ``privpipe+http://`` to loopback workers only).
        workers: worker threads or processes for the local runners.
    """
    if spec not in ("threads", "processes", "dask"):
        recheck_rate()  # a remote runner's check: a bad rate fails before anything runs
        problem = remote_api_problem(spec, os.environ.get("PREFECT_API_URL") or _api_url())
        if problem is not None:
            raise ParameterError(problem)
    if spec.startswith(("privpipe+https://", "privpipe+http://")):
        from flows.worker_runner import WorkerTaskRunner

        return WorkerTaskRunner(spec)
    if spec == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if spec == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=workers)
    if spec == "dask" or spec.startswith(("tcp://", "tls://")):
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as err:
            raise ParameterError(
                "the dask task runner needs the 'dask' extra: pip install 'privpipe[dask]'"
            ) from err
        if spec == "dask":
            return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "processes": True,
                                                  "threads_per_worker": 1,
                                                  "dashboard_address": None})
        if spec.startswith("tls://"):
            _check_tls_config(spec)
        return DaskTaskRunner(address=spec)
    if spec.startswith("ray://"):
        try:
            from prefect_ray import RayTaskRunner  # type: ignore[import-not-found]
        except ImportError as err:
            raise ParameterError("the ray task runner needs prefect-ray: pip install prefect-ray"
                                 ) from err
        return RayTaskRunner(address=spec)
    raise ParameterError(
        f"unknown task runner {spec!r}: use threads, processes, dask, tcp://HOST:PORT, "
        "tls://HOST:PORT, ray://HOST:PORT or privpipe+https://HOST:PORT[,HOST:PORT...]")


_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "").lower()


def _is_loopback(host: str) -> bool:
    return host in _LOOPBACK or host.startswith("127.")


def remote_api_problem(spec: str, api_url: str | None) -> str | None:
    """Why Dask or Ray workers of `spec` could not report to the Prefect API, or None.

    A ``tcp://``, ``tls://`` or ``ray://`` scheduler on another host runs its tasks in
    processes that report their task runs to the Prefect API: with no API configured
    (the CLI's temporary server, on 127.0.0.1, dies with the command) or a loopback one,
    they cannot, and the release would fail after its reserve. A scheduler on this
    host, and privpipe workers (their task runs stay in the flow process), are fine.
    """
    if not spec.startswith(("tcp://", "tls://", "ray://")) or _is_loopback(_host(spec)):
        return None
    if api_url and not _is_loopback(_host(api_url)):
        return None
    where = (f"the Prefect API {api_url} is on loopback" if api_url else
             "no Prefect API is configured (the temporary server listens on 127.0.0.1 "
             "and stops with this command)")
    return (f"task runner {spec}: its workers run on other hosts and report to the Prefect "
            f"API, but {where}; set PREFECT_API_URL to a Prefect server they can reach "
            "(docs/deployment.md), or use privpipe+https:// workers, which need no Prefect API")


def _api_url() -> str | None:
    from flows.settings import configured_api_url

    return configured_api_url()


def recheck_rate() -> float:
    """The local re-execution rate of remote chunks (`PRIVPIPE_RECHECK_RATE`, default 0.01).

    Raises:
        ParameterError: the variable is set to anything but a number in [0, 1].
    """
    from tasks.recheck import DEFAULT_RATE, check_rate

    value = os.environ.get(RECHECK_RATE_ENV)
    return DEFAULT_RATE if value is None or value == "" else check_rate(value, RECHECK_RATE_ENV)


def is_remote(runner: Any) -> bool:
    """Whether `runner` may run tasks on workers this process did not start (checked work).

    Local, and trusted as this process is: exactly Prefect's thread or process
    pool, or a `DaskTaskRunner` on a `LocalCluster` it started itself (no
    scheduler address). Anything else, a scheduler address (``tcp://``,
    ``tls://``), Ray, any other or derived runner class, is remote: its chunk
    results are re-executed on a sample before use (`tasks.recheck`).
    """
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

    if type(runner) in (ThreadPoolTaskRunner, ProcessPoolTaskRunner):
        return False
    try:
        from distributed import LocalCluster
        from prefect_dask import DaskTaskRunner
    except ImportError:
        return True
    return not (type(runner) is DaskTaskRunner and runner.address is None
                and runner.cluster_class is None
                and isinstance(getattr(runner, "_cluster", None), LocalCluster))


def worker_of(future: Any) -> str:
    """The worker that holds a finished remote task's result, as its scheduler knows it.

    A privpipe worker runner's future: the worker URL that answered it; a
    Dask future: the address(es) the scheduler records as holding the result
    (not what the worker says of itself); any other future: its runner's
    future type and task run id.
    """
    served_by = getattr(future, "served_by", None)
    if callable(served_by) and (who := served_by()):
        return str(who)
    wrapped = getattr(future, "wrapped_future", None)
    client = getattr(wrapped, "client", None)
    if client is not None:
        try:
            where = client.who_has([wrapped]).get(wrapped.key, ())
        except Exception:  # noqa: BLE001 - a closed client or a lost result: say so
            where = ()
        if where:
            return ", ".join(sorted(where))
    return f"{type(future).__name__} of task run {getattr(future, 'task_run_id', '?')}"


_TLS_KEYS = ("distributed.comm.tls.ca-file", "distributed.comm.tls.client.cert")


def _check_tls_config(spec: str) -> None:
    """Refuse a ``tls://`` runner when Dask's configuration gives the client no TLS credentials.

    The Dask client takes its certificates from the Dask configuration (a YAML
    file under ``~/.config/dask/`` or ``DASK_DISTRIBUTED__COMM__TLS__...``
    environment variables): the CA that signed the scheduler's certificate and
    the client's own certificate (and key, unless the certificate file holds it).
    """
    import dask.config

    missing = [k for k in _TLS_KEYS if not dask.config.get(k, None)]
    if missing:
        raise ParameterError(
            f"task runner {spec!r} needs Dask's TLS configuration: set {', '.join(missing)} "
            "(and distributed.comm.tls.client.key) in the Dask configuration, e.g. "
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE=ca.pem "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=client.pem "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=client.key (docs/scale.md)")
