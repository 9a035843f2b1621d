"""Whose windows a w-event step adds to: the user's (default) or one stream's.

A streams domain declares ``wevent_budget`` (`schemas.policy.Domain`):

* ``per_user`` (the default): the account is (user, domain). A step t of any
  of the user's streams adds its ε_t to the user's windows, so every window of
  w consecutive steps, summed over all of the user's streams and releases,
  stays at most the cap: the user has ε per window over all streams. The
  account row's ``stream_id`` is ``''`` (`ALL_STREAMS`).
* ``per_stream``: the account is (user, domain, stream); each stream has its
  own windows, so a user with k streams has k·ε per window.

Requests, entries, step runs and watermarks keep their stream id in both
cases; only the account (its row, its window check, its replay in `verify`)
aggregates. The key is part of the sealed definition and cannot change once
the domain has charges (`ledger.policy`).

Domains recorded before the key existed (a schema 2 row without a definition,
or a definition without the key) were charged per stream: that is what their
accounts enforce, so they are read as ``per_stream`` (`LEGACY`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ledger.columns import combine, factorize

if TYPE_CHECKING:
    from ledger.checks import RequestColumns

PER_USER = "per_user"
PER_STREAM = "per_stream"
LEGACY = PER_STREAM
"""The reading of a w-event domain whose stored definition does not state its budget."""
ALL_STREAMS = ""
"""The ``stream_id`` of a per-user account row (its windows cover all the user's streams)."""


def of_definition(definition: Mapping[str, Any] | None, notion: str) -> str | None:
    """The budget of a stored definition (decoded JSON), None for gp/cgp domains."""
    if notion != "wevent":
        return None
    if not definition:
        return LEGACY
    return str(definition.get("wevent_budget") or LEGACY)


def of_row(row: Mapping[str, Any]) -> str | None:
    """The budget of a domain row (`storage.load_domains`), None for gp/cgp domains."""
    text = row.get("definition")
    return of_definition(json.loads(text) if text else None, row["notion"])


def per_user_domains(domains: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The names of the w-event domains whose accounts are per user."""
    return frozenset(name for name, row in domains.items() if of_row(row) == PER_USER)


def account_streams(domains: Sequence[str], streams: Sequence[str],
                    per_user: frozenset[str]) -> list[str]:
    """The account stream of each (domain, stream): `ALL_STREAMS` in a per-user domain."""
    if not per_user:
        return list(streams)
    return [ALL_STREAMS if d in per_user else s for d, s in zip(domains, streams, strict=True)]


def account_key(user: str, domain: str, stream: str, per_user: frozenset[str]
                ) -> tuple[str, str, str]:
    """The account (user, domain, account stream) an entry of `stream` charges."""
    return (user, domain, ALL_STREAMS if domain in per_user else stream)


def account_codes(cols: RequestColumns, per_user: frozenset[str]
                  ) -> tuple[np.ndarray, int, list[str]]:
    """Account codes of a reserve call's requests (first appearance) and their account streams.

    The account is (user, domain, account stream): per-user domains put all of
    a user's streams in one account.
    """
    if not per_user.intersection(cols.codes("domains")[1]):
        return (*cols.key("users", "domains", "streams"), cols.streams)
    streams = account_streams(cols.domains, cols.streams, per_user)
    codes, n = cols.key("users", "domains")
    other, values = factorize(streams)
    if len(values) > 1:
        codes, n = combine(codes, other)
    return codes, n, streams


def with_legacy_reading(definition: dict[str, Any]) -> dict[str, Any]:
    """A decoded stored definition with its budget stated (`LEGACY` when it has none)."""
    if definition.get("kind") == "streams" and not definition.get("wevent_budget"):
        return {**definition, "wevent_budget": LEGACY}
    return definition


def guarantee(budget: str | None) -> str:
    """The per-user reading of the cap, as reports and manifests state it."""
    if budget == PER_USER:
        return "ε per window of w steps per user, over all streams"
    return "ε per window per stream: a user with k streams has k·ε per window"
