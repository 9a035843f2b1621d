"""Domains from a policy: create them, change caps, refuse changes of meaning.

A domain's notion, window w, kind and units define what its spent budget
means, so they cannot change once the domain has entries; a cap may change
(it applies to future requests; accounts take the new cap). Every change
reseals the domain row's keyed MAC.
"""

from __future__ import annotations

from typing import Any

import duckdb

from ledger import schema
from ledger.amounts import cap_units, format_units, from_units
from ledger.checks import check_id
from ledger.errors import PolicyChangeError
from ledger.schema import first_row
from ledger.storage import load_domains
from schemas.policy import Domain, Policy

_SYMBOLS = {"gp": "ε", "cgp": "ρ", "wevent": "ε per window"}


def _add(con: duckdb.DuckDBPyConnection, key: bytes, name: str, d: Domain, now: str) -> str:
    cap_q = cap_units(d.cap)
    con.execute(
        "INSERT INTO domains VALUES (?, ?, ?, CAST(? AS HUGEINT), ?, ?, ?, ?, ?, "
        "CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP), NULL)",
        [name, d.kind, d.notion, str(cap_q), str(d.cap), d.w, d.time_unit, d.value_unit,
         d.units_label(), now, now],
    )
    schema.seal_domain(con, key, name)
    return (f"added domain {name!r}: {d.notion}, cap {format_units(cap_q)} "
            f"{_SYMBOLS[d.notion]} ({d.units_label()})")


def _change(con: duckdb.DuckDBPyConnection, key: bytes, name: str, d: Domain,
            old: dict[str, Any], source: str, now: str) -> list[str]:
    """Update one existing domain; return the change lines.

    Raises:
        PolicyChangeError: the notion, w, kind or units of a charged domain would change.
    """
    changes = []
    cap_q = cap_units(d.cap)
    new = {"kind": d.kind, "notion": d.notion, "w": d.w, "time_unit": d.time_unit,
           "value_unit": d.value_unit}
    diffs = [k for k, v in new.items() if old[k] != v]
    if diffs:
        used = first_row(con.execute("SELECT count(*) FROM entries WHERE domain = ?", [name]))
        if used and used[0]:
            raise PolicyChangeError(
                f"policy {source!r} changes {', '.join(diffs)} of domain {name!r}, which "
                f"already has {used[0]} ledger entries; the meaning of its spent budget would "
                "change. Define a new domain instead.")
        con.execute(
            "UPDATE domains SET kind = ?, notion = ?, w = ?, time_unit = ?, value_unit = ?, "
            "units_label = ?, updated_at = CAST(? AS TIMESTAMP) WHERE domain = ?",
            [d.kind, d.notion, d.w, d.time_unit, d.value_unit, d.units_label(), now, name])
        changes.append(f"domain {name!r}: changed {', '.join(diffs)} (no charges yet)")
    if int(old["cap"]) != cap_q or old["cap_exact"] != str(d.cap):
        con.execute("UPDATE domains SET cap = CAST(? AS HUGEINT), cap_exact = ?, "
                    "updated_at = CAST(? AS TIMESTAMP) WHERE domain = ?",
                    [str(cap_q), str(d.cap), now, name])
        con.execute("UPDATE accounts SET cap = CAST(? AS HUGEINT) WHERE domain = ?",
                    [str(cap_q), name])
        changes.append(f"domain {name!r}: cap {format_units(int(old['cap']))} -> "
                       f"{format_units(cap_q)} {_SYMBOLS[d.notion]}")
    elif old["units_label"] != d.units_label() and not diffs:
        con.execute("UPDATE domains SET units_label = ? WHERE domain = ?",
                    [d.units_label(), name])
    schema.seal_domain(con, key, name)
    return changes


def apply_tx(con: duckdb.DuckDBPyConnection, key: bytes, policy: Policy, now: str) -> list[str]:
    """Create or update the ledger's domains from `policy` in `con`'s transaction.

    Returns:
        One line per change (empty when the ledger already matches the policy).

    Raises:
        PolicyChangeError: a charged domain's notion, w, kind or units would change.
    """
    current = load_domains(con)
    changes: list[str] = []
    for name, d in sorted(policy.domains.items()):
        check_id(name, "domain name")
        old = current.get(name)
        if old is None:
            changes.append(_add(con, key, name, d, now))
        else:
            changes += _change(con, key, name, d, old, policy.source, now)
    return changes


def list_tx(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The ledger's domains: name, kind, notion, cap (exact Fraction), w and units."""
    return [{**d, "cap": from_units(int(d["cap"]))} for _, d in sorted(load_domains(con).items())]
