"""`privpipe release ... --dry-run`: who a release would admit, at what cost; nothing charged.

A dry run is the release flow up to its reservation: the input is validated and
staged (then removed), the release id derived as the release would derive it,
each user's requests built by the same `plan_requests`, and the ledger's
`Ledger.plan` gives the decisions `reserve` would make now, writing nothing.
No mechanism runs, so no noise is drawn, and no output, report or ledger entry
is written. It is a forecast: a release that runs later decides against the
balances at its own reservation.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Any

from ledger import Ledger, format_fraction
from tasks.ledger_ops import plan_requests

PLAN_COLUMNS = ("user_id", "decision", "requested", "remaining_after", "units", "reason")


def dry_run_result(ledger: Ledger, release_id: str, plan: Any, domain: str, notion: str,
                   *, amount: Fraction | None = None,
                   mechanism: str, parameters: dict[str, Any],
                   input_fingerprint: str, requests: list[Any] | None = None
                   ) -> dict[str, Any]:
    """The decisions of a release's reservation, computed and not made.

    Args:
        ledger: the release's ledger.
        release_id: the id the release would use.
        plan: the staged input (`tasks.stage.StagePlan`).
        domain: the domain charged.
        notion: ``gp``, ``cgp`` or ``wevent``.
        amount: ε or ρ per curve (gp/cgp).
        mechanism: the release's mechanism (its metric is checked against the domain's).
        parameters: the release's parameters (the release id's binding is checked).
        input_fingerprint: the input's fingerprint.
        requests: the release's requests when they are not `plan_requests` of the
            whole input (a stream release's continuation plan: new steps only;
            required for streams).

    Returns:
        ``release_id``, ``dry_run`` (True), ``input_fingerprint``, ``counts`` and
        ``users``: one row per user (`PLAN_COLUMNS`): admitted or denied, what
        the release would charge them and what would remain (after the charge
        when admitted, before it when denied), in the domain's units.
    """
    if requests is None:
        requests = plan_requests(plan, domain, notion, amount=amount)
    result = ledger.plan(release_id, requests, mechanism=mechanism, parameters=parameters,
                         input_fingerprint=input_fingerprint)
    by_user: dict[str, list[Any]] = defaultdict(list)
    for d in [*result.admitted, *result.denied]:
        by_user[d.user_id].append(d)
    rows = []
    for user, decisions in sorted(by_user.items()):
        admitted = all(d.admitted for d in decisions)
        worst = min(decisions, key=lambda d: d.remaining)
        requested = (max(d.requested for d in decisions) if notion == "wevent"
                     else sum((d.requested for d in decisions), Fraction(0)))
        reason = next((d.reason for d in decisions if not d.admitted), "")
        replayed = all(d.replayed for d in decisions)
        rows.append({"user_id": user, "decision": "admitted" if admitted else "denied",
                     "requested": format_fraction(requested),
                     "remaining_after": format_fraction(worst.remaining),
                     "units": worst.units,
                     "reason": "already charged by this release" if replayed else reason})
    denied = sum(1 for r in rows if r["decision"] == "denied")
    counts = {"users_in_input": plan.users + len(plan.rejected),
              "users_released": len(rows) - denied, "users_denied": denied,
              "users_rejected": len(plan.rejected)}
    return {"release_id": release_id, "dry_run": True, "input_fingerprint": input_fingerprint,
            "counts": counts, "users": rows}
