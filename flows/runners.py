"""Task runners: threads (default), Dask (local cluster or a scheduler address).

Ray works the same way through `prefect-ray` (`RayTaskRunner(address=...)`):
install `prefect-ray` and pass ``--task-runner ray://HOST:PORT``; it is not a
dependency of privpipe and not tested here. Only the flow process touches the
ledger whatever the runner: workers receive chunk paths and parameters.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import ParameterError


def make_task_runner(spec: str = "threads", *, workers: int = 2) -> Any:
    """Build a Prefect task runner from a spec string.

    Args:
        spec: ``threads``; ``dask`` (a LocalCluster of `workers` processes);
            ``tcp://HOST:PORT`` (an existing Dask scheduler); ``ray://HOST:PORT``
            (needs prefect-ray).
        workers: worker threads or processes for the local runners.
    """
    if spec == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if spec == "dask" or spec.startswith("tcp://"):
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
        f"unknown task runner {spec!r}: use threads, dask, tcp://HOST:PORT or ray://HOST:PORT")
