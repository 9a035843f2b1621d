"""Flow runs named after their release id and tagged, so the Prefect UI lists releases.

A release run starts with the name `run_name` gives it: the release id when
the caller passed one, else ``<flow>-<domain>-pending`` (a derived id needs
the input's fingerprint, known after ingestion), and the tags ``privpipe``,
``domain:NAME`` (and ``release:ID`` when given; `tag_run`). `label_run` then
renames the run to the release id and adds ``release:ID``, ``mechanism:NAME``
and ``notion:gp|cgp|wevent``. A run that fails before it has a release id is
renamed ``<flow>-<domain>-failed`` (`name_failed_run`), so no finished run
stays ``…-pending``. The audit and evaluate flows are named from their
parameters (`audit_run_name`, `evaluate_run_name`). Labels are public
parameters only, and the process that runs the flow (host, pid, start time:
`flows.lost_runs`).
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path

PENDING = "-pending"

_release_id: ContextVar[str | None] = ContextVar("privpipe_release_id", default=None)


def run_name() -> str:
    """The initial name of a release flow run (``flow_run_name=`` of the flows)."""
    from prefect.runtime import flow_run

    params = flow_run.parameters or {}
    rid = params.get("release_id")
    if rid:
        return str(rid)
    return f"{flow_run.flow_name}-{params.get('domain', '')}{PENDING}"


def audit_run_name() -> str:
    """``audit-<ledger file name>`` (the audit flow's ``flow_run_name=``)."""
    from prefect.runtime import flow_run

    ledger = (flow_run.parameters or {}).get("ledger_path") or "ledger"
    return f"audit-{Path(str(ledger)).name}"


def evaluate_run_name() -> str:
    """``evaluate-<domain>`` or ``evaluate-bundled`` (the evaluate flow's ``flow_run_name=``)."""
    from prefect.runtime import flow_run

    return f"evaluate-{(flow_run.parameters or {}).get('domain') or 'bundled'}"


def release_tags(domain: str, mechanism: str, notion: str) -> list[str]:
    """The tags `label_run` adds to a release run."""
    return [f"domain:{domain}", f"mechanism:{mechanism}", f"notion:{notion}"]


def current_release_id() -> str | None:
    """The release id `label_run` gave the current run (None: not yet named)."""
    return _release_id.get()


def _update(name: str | None, tags: list[str]) -> None:
    """Rename the current flow run (None: keep its name) and add `tags` (no-op outside a run)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None:
        return
    new_name = name or run.name
    merged = sorted(set(run.tags) | set(tags))
    if new_name == run.name and merged == sorted(run.tags):
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, name=new_name, tags=merged)
    run.name, run.tags = new_name, merged


def tag_run(*tags: str) -> None:
    """Add ``privpipe``, the process tag and `tags` to the current flow run (no-op outside a run).

    The process tag (``process:HOST:PID:START``, `flows.lost_runs`) lets a later
    privpipe command mark the run Crashed if this process dies before it ends.
    """
    from flows.lost_runs import process_tag

    _update(None, ["privpipe", process_tag(), *tags])


def start_release(domain: str, release_id: str | None) -> None:
    """Tag a release run as it starts: ``privpipe``, ``domain:NAME``, ``release:ID`` if given.

    Forgets the release id of an earlier run in this thread (a sync flow runs in
    its caller's thread: the demo runs several releases in one).
    """
    _release_id.set(release_id)
    tag_run(f"domain:{domain}", *([f"release:{release_id}"] if release_id else []))


def label_run(release_id: str, tags: list[str], dry_run: bool = False) -> None:
    """Rename the current flow run to `release_id` and add `tags` (no-op outside a run).

    A dry run is named ``<release_id>-dry-run`` and tagged ``dry-run``, so the
    release's own run keeps the plain id.
    """
    _release_id.set(release_id)
    name = f"{release_id}-dry-run" if dry_run else release_id
    _update(name, [*tags, f"release:{release_id}", *(["dry-run"] if dry_run else [])])


def name_failed_run() -> None:
    """Rename a run that failed while still ``…-pending`` to ``…-failed`` (tagged ``failed``)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None or not run.name.endswith(PENDING):
        return
    _update(run.name[: -len(PENDING)] + "-failed", ["failed"])
