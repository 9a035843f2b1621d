"""The ``privpipe+https://HOST:PORT,...`` task runner: chunk work on privpipe workers, no pickle.

Prefect's task runs stay in the flow process (a thread pool); only the
mechanism chunk tasks (`tasks.privatize.privatize_curves` / `privatize_streams`)
are swapped, at submission, for their remote twins (`tasks.remote_chunk`),
which send the chunk to a worker (`privpipe worker serve`) in the wire format
(`tasks.wire_chunk`) and read its answer with json and pyarrow only
(`tasks.wire_result`). Every other task runs in the flow process as with
``threads``. `flows.runners.is_remote` counts this runner as remote, so each
chunk's answer is also checked by the local re-execution of a secret sample
(`tasks.recheck`) and by the costs recomputed from its outputs.

Guarantee: nothing a worker sends is unpickled or imported by the flow
process; a worker sees only the chunks it is sent (docs/scale.md).
"""

from __future__ import annotations

from typing import Any

from prefect.task_runners import ThreadPoolTaskRunner

from flows.worker_address import worker_urls


class _ServedFuture:
    """A chunk task's future that knows which worker answered it (for error messages)."""

    def __init__(self, future: Any, pool: Any) -> None:
        self._future, self._pool = future, pool

    def served_by(self) -> str | None:
        """The worker that answered this task run, if one did."""
        return self._pool.served.get(str(self._future.task_run_id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._future, name)


class WorkerTaskRunner(ThreadPoolTaskRunner):
    """A thread pool whose chunk tasks run on privpipe workers (see the module docstring)."""

    def __init__(self, spec: str, max_workers: int | None = None) -> None:
        from tasks.remote_chunk import WorkerPool

        self.spec = spec
        self.pool = WorkerPool(worker_urls(spec))
        super().__init__(max_workers=max_workers or max(4, 2 * len(self.pool.urls)))

    def duplicate(self) -> WorkerTaskRunner:
        """A runner of the same workers (Prefect duplicates runners per flow run)."""
        return type(self)(self.spec, self._max_workers)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.spec == self.spec  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __exit__(self, *exc: Any) -> None:
        """Stop the thread pool, then close the connections to the workers."""
        try:
            super().__exit__(*exc)
        finally:
            self.pool.close()

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None,
               dependencies: Any = None) -> Any:
        """Submit `task`; a mechanism chunk task is sent to a worker instead (remote twin)."""
        from tasks.privatize import privatize_curves, privatize_streams
        from tasks.remote_chunk import remote_curves, remote_streams

        twin = {privatize_curves.name: remote_curves,
                privatize_streams.name: remote_streams}.get(task.name)
        if twin is None:
            return super().submit(task, parameters, wait_for, dependencies)
        future = super().submit(twin, {**parameters, "pool": self.pool}, wait_for, dependencies)
        return _ServedFuture(future, self.pool)
