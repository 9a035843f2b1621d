"""Flow runs named after their release id and tagged, so the Prefect UI lists releases.

A run starts with the name `run_name` gives it: the release id when the caller
passed one, else ``<flow>-<domain>-pending`` (a derived id needs the input's
fingerprint, known after ingestion). `label_run` then renames the run to the
release id and adds the tags ``domain:NAME``, ``mechanism:NAME`` and
``notion:gp|cgp|wevent``. Labels are public parameters only.
"""

from __future__ import annotations


def run_name() -> str:
    """The initial name of a release flow run (``flow_run_name=`` of the flows)."""
    from prefect.runtime import flow_run

    params = flow_run.parameters or {}
    rid = params.get("release_id")
    if rid:
        return str(rid)
    return f"{flow_run.flow_name}-{params.get('domain', '')}-pending"


def release_tags(domain: str, mechanism: str, notion: str) -> list[str]:
    """The tags of a release run."""
    return [f"domain:{domain}", f"mechanism:{mechanism}", f"notion:{notion}"]


def label_run(release_id: str, tags: list[str], dry_run: bool = False) -> None:
    """Rename the current flow run to `release_id` and add `tags` (no-op outside a run).

    A dry run is named ``<release_id>-dry-run`` and tagged ``dry-run``, so the
    release's own run keeps the plain id.
    """
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None:
        return
    name = f"{release_id}-dry-run" if dry_run else release_id
    merged = sorted(set(run.tags) | set(tags) | ({"dry-run"} if dry_run else set()))
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, name=name, tags=merged)
    run.name, run.tags = name, merged
