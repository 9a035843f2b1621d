"""What a run tells Prefect: stage log lines, events and the final state's message.

Log lines go through `prefect.get_run_logger` (the run's logger, whose records
Prefect's API handler sends to the server: the UI's log tab, ``/api/logs``);
outside a run they go to this module's logger. Events go through
`prefect.events.emit_event`, so automations can react to them (docs/operations.md
lists them, with an automation reacting to ``privpipe.release.denied``).

Only public or aggregate facts are said: counts of users and chunks, the
release and domain ids, validation rule names, file names. How many users
validation rejected (and by which rules) is a function of raw data: it is said
only when the domain's policy declares ``public.rejections = true``, as in the
manifest (`flows.outcome.rejection_counts`); otherwise a fixed sentence says
that rejections are not published, whether or not there were any. No user id,
value, or per-user amount is ever logged or sent.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

_log = logging.getLogger(__name__)

NEAR_CAP_FRACTION = "0.9"
"""An account is near its cap when it has spent at least 90% of it (`ledger.queries`)."""

EVENTS = ("privpipe.release.settled", "privpipe.release.partial", "privpipe.release.denied",
          "privpipe.release.rejected", "privpipe.release.failed",
          "privpipe.budget.near-cap", "privpipe.ledger.integrity-failed")
"""Every event privpipe emits (docs/operations.md#prefect-events)."""


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The current Prefect run's logger (sent to the API), else this module's logger."""
    from prefect.context import FlowRunContext, TaskRunContext

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return _log
    from prefect import get_run_logger

    return get_run_logger()


def say(message: str) -> None:
    """Log one public line at INFO in the current run."""
    run_logger().info(message)


def release_resource(release_id: str | None, domain: str | None) -> dict[str, str]:
    """The event resource of a release (``privpipe.release.<id>``; ``unknown``: not yet named)."""
    return {"prefect.resource.id": f"privpipe.release.{release_id or 'unknown'}",
            "prefect.resource.name": release_id or "unknown", "privpipe.domain": domain or ""}


def _related(domain: str | None) -> list[dict[str, str]]:
    if not domain:
        return []
    return [{"prefect.resource.id": f"privpipe.domain.{domain}",
             "prefect.resource.role": "domain", "prefect.resource.name": domain}]


def emit(event: str, *, release_id: str | None, domain: str | None,
         payload: dict[str, Any]) -> None:
    """Emit one privpipe event (Prefect adds the flow run, flow and tags as related)."""
    from prefect.events import emit_event

    assert event in EVENTS, f"undocumented event {event}"
    emit_event(event, resource=release_resource(release_id, domain),
               related=_related(domain), payload=payload)


# --------------------------------------------------------------------------- stage lines


def log_staged(dom: Any, plan: Any) -> None:
    """After ingestion: chunks staged, and the rejections only if the policy makes them public."""
    say(f"staged {len(plan.chunks)} chunk(s) of domain {dom.name!r}")
    if not dom.rejections_public:
        say("rejections: not published for this domain (public.rejections = false); "
            "users rejected by validation, if any, are not released")
        return
    if not plan.rejected:
        say("rejected by validation: 0 users")
        return
    rules = Counter(rule for r in plan.rejected for rule in r["rules"])
    by_rule = ", ".join(f"{rule}: {n}" for rule, n in sorted(rules.items()))
    say(f"rejected by validation: {len(plan.rejected)} user(s) (by rule: {by_rule})")


def log_admission(rid: str, admitted: int, denied: int) -> None:
    """After the reserve: how many users were admitted and denied (both in the manifest)."""
    say(f"release {rid}: budget reserved for {admitted} user(s); {denied} denied (budget)")


def publish_counts(counts: dict[str, Any]) -> dict[str, Any]:
    """The public counts an event carries (the manifest's, without file row counts)."""
    keys = ("users_released", "users_denied", "users_unchanged", "users_in_input",
            "users_rejected", "items")
    return {k: counts[k] for k in keys if k in counts}


def outcome_event(counts: dict[str, Any]) -> str:
    """The event a finished release emits, from its public counts."""
    if counts["users_released"] == 0:
        return ("privpipe.release.denied" if counts["users_denied"] > 0
                else "privpipe.release.rejected")
    if counts["users_denied"] > 0:
        return "privpipe.release.partial"
    return "privpipe.release.settled"


def release_finished(res: dict[str, Any]) -> None:
    """Log and emit the outcome of a published (or replayed) release."""
    manifest = res["manifest"]
    counts = publish_counts(manifest["counts"])
    rid, domain = res["release_id"], manifest.get("domain")
    say(f"release {rid}: outputs written to {res['out']} ({len(manifest.get('files', {}))} "
        f"file(s)); report: {res['report']}")
    emit(outcome_event(counts), release_id=rid, domain=domain,
         payload={"counts": counts, "flow": manifest.get("flow"),
                  "mechanism": manifest.get("mechanism")})


def published(res: dict[str, Any], near_cap_users: Callable[[], int] | None = None) -> None:
    """Tell Prefect a release is published (or replayed); never fails the release.

    The outputs are written and the ledger records the release by now: a
    failure to log, emit or count the near-cap users is a warning, not an error.

    Args:
        res: the release's result.
        near_cap_users: counts its users now near the cap (None: a replay, not counted).
    """
    try:
        release_finished(res)
        if near_cap_users is not None:
            near_cap(res["release_id"], res["manifest"]["domain"], near_cap_users())
    except Exception as err:  # noqa: BLE001 - published already; say so, do not fail it
        run_logger().warning("release %s: could not report it to Prefect (%s)",
                             res["release_id"], type(err).__name__)


def release_failed(err: BaseException, *, release_id: str | None, domain: str | None) -> None:
    """Emit ``privpipe.release.failed``: the error's class and exit code, not its text.

    The text names files and rules; it stays in the run's log (and the CLI's error
    line). An event carries only what any automation may read.
    """
    emit("privpipe.release.failed", release_id=release_id, domain=domain,
         payload={"error": type(err).__name__, "exit_code": getattr(err, "exit_code", 1)})


def near_cap(release_id: str, domain: str, users: int) -> None:
    """Log and emit ``privpipe.budget.near-cap`` when `users` (> 0) reached 90% of the cap."""
    if users <= 0:
        return
    say(f"release {release_id}: {users} user(s) of domain {domain!r} have now spent at least "
        f"90% of their cap")
    emit("privpipe.budget.near-cap", release_id=release_id, domain=domain,
         payload={"users_near_cap": users, "fraction": NEAR_CAP_FRACTION})


@contextlib.contextmanager
def reported_release(domain: str, release_id: str | None) -> Iterator[None]:
    """Tag a release run as it starts; on an error, name the run and emit ``…failed``.

    The error is re-raised unchanged (the CLI prints it, Prefect records the
    Failed state); telling Prefect about it never hides it.
    """
    from flows.run_labels import current_release_id, name_failed_run, start_release
    from flows.run_logging import route_run_logs

    route_run_logs()  # this run's INFO lines reach the API, whoever started it
    start_release(domain, release_id)
    try:
        yield
    except Exception as err:
        try:
            name_failed_run()
            release_failed(err, release_id=current_release_id(), domain=domain)
        except Exception as tell:  # noqa: BLE001 - the release's own error matters more
            run_logger().warning("could not report the failure to Prefect: %s",
                                 type(tell).__name__)
        raise
