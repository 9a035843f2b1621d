"""Task runners: threads (default), processes, Dask (local or a cluster), Ray.

Whatever the runner, only the flow process touches the ledger, the noise key
and the staging files: each mechanism task receives its chunk as arrays (the
admitted users' samples and noise seeds, `tasks.stage.CurveChunk`) and returns
its output tables and costs, so a worker on another machine needs no shared
file system and no access to the ledger. docs/scale.md says what travels over
the network and how to run on an existing Dask cluster or on Ray.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import ParameterError


def make_task_runner(spec: str = "threads", *, workers: int = 2) -> Any:
    """Build a Prefect task runner from a spec string.

    Args:
        spec: ``threads``; ``processes`` (a pool of `workers` processes on this
            machine); ``dask`` (a LocalCluster of `workers` processes);
            ``tcp://HOST:PORT`` or ``tls://HOST:PORT`` (an existing Dask
            scheduler; TLS credentials from the Dask configuration);
            ``ray://HOST:PORT`` (needs prefect-ray).
        workers: worker threads or processes for the local runners.
    """
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
        "tls://HOST:PORT or ray://HOST:PORT")
