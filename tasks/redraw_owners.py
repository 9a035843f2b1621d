"""Refuse a stream continuation that a served ledger would refuse its seeds, before reserving.

A stream release repeats each earlier range of a stream by redrawing it with the
noise seed of the release that drew it (`tasks.continuation.seeded_segments`).
A served ledger (`privpipe ledger serve`) gives a release's noise seeds only to
the client that reserved that release, or to an admin (`flows.ledger_server`).
So a releaser continuing streams that another releaser's credential released
would reserve its new steps and only then be refused the earlier seeds: the
release would stay reserved, its budget held, and only an admin could refund it
(`ledger close`). This check runs on each group's continuation plan before its
reserve and stops the release (exit 2) naming the release, its owner and the fix.

Privacy: reads only release ids, user ids and entry actors from the ledger;
nothing is drawn or charged.
"""

from __future__ import annotations

from typing import Any

from ledger import Filter
from ledger.remote import LedgerAccessError


def earlier_releases(plans: dict[int, dict[str, dict[str, Any]]], release_id: str
                     ) -> dict[str, str]:
    """Earlier release id -> a user whose stream this plan repeats a range of it.

    `plans`: chunk index -> user -> stream -> `StreamPlan`; ranges of `release_id`
    itself (a rerun) are left out.
    """
    earlier: dict[str, str] = {}
    for users in plans.values():
        for user, streams in users.items():
            for plan in streams.values():
                for seg in plan.segments:
                    if not seg.new and seg.release_id != release_id:
                        earlier.setdefault(seg.release_id, user)
    return earlier


def check_redraw_owners(ledger: Any, release_id: str,
                        plans: dict[int, dict[str, dict[str, Any]]]) -> None:
    """Refuse to continue streams whose earlier ranges another client of the service drew.

    Only for a served ledger (one with ``whoami``) and a non-admin credential;
    an embedded ledger gives every seed to whoever opens it with its key.
    Cost: one `history` call of one user per earlier release repeated.

    Raises:
        LedgerAccessError: an earlier release repeated by this plan was reserved by
            another credential (exit 2), naming it, its owner and the fix.
    """
    whoami = getattr(ledger, "whoami", None)
    earlier = earlier_releases(plans, release_id) if whoami is not None else {}
    if not earlier:
        return
    me = whoami()
    if me["role"] == "admin":
        return
    for rid, user in sorted(earlier.items()):
        rows = ledger.history(where=Filter(release=rid, user=user))
        owner = next((r["actor"] for r in rows if r["kind"] == "reserve"), None)
        if owner is not None and owner != me["name"]:
            raise LedgerAccessError(
                f"release {release_id!r} continues streams that release {rid!r} of client "
                f"{owner!r} released (e.g. user {user!r}); their earlier steps are redrawn "
                f"with {rid!r}'s noise seeds, which the ledger service gives only to "
                f"{owner!r} or an admin: release with that credential (or an admin's). "
                "This release reserved nothing for these users")
