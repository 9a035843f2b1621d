"""Ledger tasks. They run in the flow process only (called, never submitted).

Workers never touch the ledger: the flow reserves before any chunk is
submitted, hands each chunk's task the noise seeds of its admitted users
(`tasks.stage.load_curve_chunk`), and settles each chunk's actual costs as
its task returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import Any

from prefect import task

from ledger import Request, Settlement
from ledger.remote import open_ledger
from tasks.privatize import ChunkResult
from tasks.stage import StagePlan


def plan_requests(plan: StagePlan, domain: str, notion: str, amount: Fraction | None = None,
                  users: Iterable[str] | None = None) -> list[Request]:
    """One ledger request per (user, curve) of a staged curve input (gp or cgp).

    `users` (default: every staged user, sorted) limits the requests to those
    users, in that order: a release reserves a batch of users at a time. Stream
    releases build theirs from the continuation plan (`tasks.continuation`).
    """
    if notion not in ("gp", "cgp"):
        raise ValueError(f"plan_requests makes curve requests (gp or cgp), not {notion!r}")
    return [Request(user_id=user_id, domain=domain, step=step, notion=notion, amount=amount)
            for user_id in (sorted(plan.steps) if users is None else users)
            for step, _ in plan.steps[user_id]]


def by_user(requests: Sequence[Request], max_users: int) -> Iterator[list[Request]]:
    """The requests in batches of at most `max_users` users; a user's requests share one batch.

    Users come in order of their first request, each user's requests in their
    order; with no request, one empty batch (a release still makes its reserve call).
    """
    if max_users < 1:
        raise ValueError("max_users must be >= 1")
    of_user: dict[str, list[Request]] = {}
    for r in requests:
        of_user.setdefault(r.user_id, []).append(r)
    users = list(of_user)
    for start in range(0, max(len(users), 1), max_users):
        yield [r for u in users[start:start + max_users] for r in of_user[u]]


def reserve_fn(ledger_path: str, release_id: str, requests: list[Request], *, mechanism: str,
               parameters: dict[str, Any], input_fingerprint: str,
               flow_run_id: str | None) -> tuple[set[str], list[dict[str, Any]]]:
    """Reserve every request in one ledger transaction; return admitted users and denials."""
    ledger = open_ledger(ledger_path)
    result = ledger.reserve(release_id, requests, mechanism=mechanism, parameters=parameters,
                            flow_run_id=flow_run_id, input_fingerprint=input_fingerprint)
    admitted = {d.user_id for d in result.admitted}
    denied_users: dict[str, dict[str, Any]] = {}
    for d in result.denied:
        denied_users.setdefault(d.user_id, {"user_id": d.user_id, "reason": d.reason})
    return admitted - set(denied_users), sorted(denied_users.values(), key=lambda r: r["user_id"])


def settle_fn(ledger_path: str, release_id: str, domain: str,
              result: ChunkResult | Sequence[ChunkResult], *,
              input_fingerprint: str | None, parameters: dict[str, Any]) -> None:
    """Settle the actual costs of one or more chunks in one ledger transaction.

    The release's binding (input fingerprint, parameters) is checked in the same
    transaction. Idempotent: a rerun writes nothing new.
    """
    results = [result] if isinstance(result, ChunkResult) else list(result)
    ledger = open_ledger(ledger_path)
    ledger.settle(release_id, [
        Settlement(user_id=u, domain=domain, step=step, cost=cost, stream_id=sid)
        for r in results for u, step, cost, sid in r.costs
    ], input_fingerprint=input_fingerprint, parameters=parameters)


reserve_budget = task(reserve_fn, name="ledger-reserve", persist_result=False)
settle_chunk = task(settle_fn, name="ledger-settle", persist_result=False)
