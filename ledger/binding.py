"""What a reserve or settle call must agree with before anything is written.

- **Release binding.** A release id is bound, by its first reservation, to the
  input fingerprint and the parameters it was reserved for (both are columns of
  every reserve/deny entry, so the binding is in the hash chain). Any later
  reservation, replay or settlement of that id with another input or other
  parameters raises `ReplayConflictError`: otherwise two runs with one release
  id on different inputs would draw the same noise, and subtracting their
  outputs would reveal the difference of the inputs exactly. The check runs in
  the call's own transaction, so two runs that race are serialised by the
  ledger and the second one is refused.
- **Metric.** A registered mechanism is charged only to a domain whose metric
  is the metric of its guarantee (`mechanisms.registry`): the LY23 baseline
  (dist_∞) never to an L2 domain. Manual charges (`privpipe ledger charge`)
  are in the domain's own metric by definition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import duckdb

from ledger.errors import ReplayConflictError
from ledger.schema import first_row
from mechanisms import registry
from schemas.errors import ParameterError

_LEGACY_METRIC = {"wevent": "wevent", "gp": "l2", "cgp": "l2"}


def check_binding(con: duckdb.DuckDBPyConnection, release_id: str,
                  input_fingerprint: str | None, parameters: str | None) -> None:
    """Refuse a call whose input or parameters differ from the release's first reservation.

    Args:
        con: the call's transaction.
        release_id: the release.
        input_fingerprint: the call's input fingerprint (None for manual charges).
        parameters: the call's canonical parameter JSON.

    Raises:
        ReplayConflictError: the release was reserved for another input or parameters.
    """
    row = first_row(con.execute(
        "SELECT input_fingerprint, parameters FROM entries WHERE release_id = ? "
        "AND kind IN ('reserve', 'deny') ORDER BY seq LIMIT 1", [release_id]))
    if row is None:
        return
    bound_input, bound_params = row
    if bound_input != input_fingerprint:
        raise ReplayConflictError(
            f"release id {release_id!r} was reserved for another input (fingerprint "
            f"{_short(bound_input)}, this call {_short(input_fingerprint)}): a rerun must "
            "repeat the same release exactly, so the same noise never meets other data; "
            "use a new --release-id")
    if bound_params != parameters:
        raise ReplayConflictError(
            f"release id {release_id!r} was reserved with other parameters ({bound_params}; "
            f"this call: {parameters}); use a new --release-id")


def _short(fingerprint: str | None) -> str:
    return "none" if fingerprint is None else f"{fingerprint[:16]}…"


def domain_metric(row: dict[str, Any]) -> str:
    """The metric of a domain row: from its stored definition, else by notion (legacy rows)."""
    text = row.get("definition")
    if text:
        metric = json.loads(text).get("metric")
        if metric:
            return str(metric)
    return _LEGACY_METRIC[row["notion"]]


def check_metric(domains: dict[str, dict[str, Any]], names: Iterable[str],
                 mechanism: str) -> None:
    """Refuse to charge a registered mechanism to a domain of another metric.

    Raises:
        ParameterError: the mechanism's guarantee is in another metric (nothing charged).
    """
    if mechanism not in registry.MECHANISMS:
        return  # a manual charge: in the domain's own metric
    offered = registry.metric_of(mechanism)
    for name in sorted(set(names)):
        row = domains.get(name)
        if row is not None and domain_metric(row) != offered:
            raise ParameterError(
                f"mechanism {mechanism!r} is private w.r.t. {offered}, but domain {name!r} "
                f"states its guarantee in {domain_metric(row)}: the ledger charges it only to "
                f"a {offered} domain; nothing was charged")
