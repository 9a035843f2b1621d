"""Domains from a policy, every change a chain entry.

Creating a domain, changing its cap and every other change of its definition
appends a ``policy`` entry to the hash chain: who (actor), when, which fields,
the domain's whole state before and after (every field of
`schemas.policy.Domain` as canonical JSON, cap in quanta), and how many
accounts the change leaves above a lowered cap. The domain row carries the
same state and the seq of that entry under its keyed MAC, so `verify` can
tell a row copied back from an older state (its state is not the one the
chain's latest policy entry says).

A domain's notion, window w, kind, units and w-event budget (per user or
per stream, `ledger.wevent_budget`) define what its spent budget means, so
they cannot change once the domain has charges; a cap may change
(accounts take the new cap; an account above a lowered cap admits nothing
more, `admission`).
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from ledger import definitions, schema
from ledger.amounts import cap_units, format_units, from_units
from ledger.checks import check_id
from ledger.entries import append, canonical_json, meta
from ledger.errors import PolicyChangeError
from ledger.keyring import Keyring
from ledger.schema import first_row
from ledger.storage import load_domains
from ledger.wevent_budget import with_legacy_reading
from schemas.policy import Domain, Policy

_SYMBOLS = {"gp": "ε", "cgp": "ρ", "wevent": "ε per window"}
MEANING = ("kind", "notion", "w", "time_unit", "value_unit", "wevent_budget")
"""Fields that fix what a domain's spent budget means (frozen once charged)."""
STATE = ("kind", "notion", "cap", "cap_exact", "w", "time_unit", "value_unit", "units_label",
         "definition")
"""A domain's state as the chain records it (cap in quanta, definition as JSON)."""


def state_of(d: Domain) -> dict[str, Any]:
    """The state a policy domain gives its row."""
    return {"kind": d.kind, "notion": d.notion, "cap": str(cap_units(d.cap)),
            "cap_exact": str(d.cap), "w": d.w, "time_unit": d.time_unit,
            "value_unit": d.value_unit, "units_label": d.units_label(),
            "definition": json.loads(definitions.encode(d))}


def state_of_row(row: dict[str, Any]) -> dict[str, Any]:
    """The state a stored domain row holds (`load_domains` row with its definition)."""
    out = {k: row[k] for k in STATE if k not in ("cap", "definition")}
    out["cap"] = str(int(row["cap"]))
    out["definition"] = json.loads(row["definition"]) if row.get("definition") else None
    return out


def _above_cap(con: duckdb.DuckDBPyConnection, name: str, cap_q: int) -> int:
    row = first_row(con.execute(
        "SELECT count(*) FROM accounts WHERE domain = ? AND spent > CAST(? AS HUGEINT)",
        [name, str(cap_q)]))
    return int(row[0]) if row else 0


def _changed(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    if old is None:
        return []
    fields = [k for k in STATE if k != "definition" and old[k] != new[k]]
    if old["definition"] is None:  # a domain migrated from schema 2 gets its whole definition
        was = with_legacy_reading({"kind": old["kind"]}).get("wevent_budget")
        budget = ["wevent_budget"] if was != new["definition"].get("wevent_budget") else []
        return [*fields, *budget, "definition"]
    old_def, new_def = with_legacy_reading(old["definition"]), new["definition"]
    fields += sorted(k for k in new_def if old_def.get(k) != new_def[k]
                     and k not in (*fields, "cap", "name"))
    return fields


def _line(name: str, d: Domain, old: dict[str, Any] | None, new: dict[str, Any],
          fields: list[str], above: int) -> str:
    symbol = _SYMBOLS[d.notion]
    if old is None:
        return (f"added domain {name!r}: {d.notion}, cap {format_units(int(new['cap']))} "
                f"{symbol} ({d.units_label()})")
    parts = []
    meaning = [f for f in fields if f in MEANING]
    if meaning:
        parts.append(f"domain {name!r}: changed {', '.join(meaning)} (no charges yet)")
    if "cap" in fields or "cap_exact" in fields:
        parts.append(f"domain {name!r}: cap {format_units(int(old['cap']))} -> "
                     f"{format_units(int(new['cap']))} {symbol}")
    rest = [f for f in fields if f not in (*MEANING, "cap", "cap_exact")]
    if rest:
        parts.append(f"domain {name!r}: changed {', '.join(rest)}")
    if above:
        parts.append(f"domain {name!r}: {above} account(s) above the lowered cap (they admit "
                     "nothing more)")
    return "; ".join(parts)


def _write_row(con: duckdb.DuckDBPyConnection, name: str, new: dict[str, Any], now: str,
               exists: bool) -> None:
    values = [new["kind"], new["notion"], new["cap"], new["cap_exact"], new["w"],
              new["time_unit"], new["value_unit"], new["units_label"],
              canonical_json(new["definition"], "definition") if new["definition"] else None]
    if exists:
        con.execute(
            "UPDATE domains SET kind = ?, notion = ?, cap = CAST(? AS HUGEINT), cap_exact = ?, "
            "w = ?, time_unit = ?, value_unit = ?, units_label = ?, definition = ?, "
            "updated_at = CAST(? AS TIMESTAMP) WHERE domain = ?", [*values, now, name])
        con.execute("UPDATE accounts SET cap = CAST(? AS HUGEINT) WHERE domain = ?",
                    [new["cap"], name])
    else:
        con.execute(
            "INSERT INTO domains (domain, kind, notion, cap, cap_exact, w, time_unit, "
            "value_unit, units_label, definition, created_at, updated_at) VALUES (?, ?, ?, "
            "CAST(? AS HUGEINT), ?, ?, ?, ?, ?, ?, CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP))",
            [name, *values, now, now])


def _check_meaning(con: duckdb.DuckDBPyConnection, name: str, source: str,
                   fields: list[str]) -> None:
    meaning = [f for f in fields if f in MEANING]
    if not meaning:
        return
    used = first_row(con.execute(
        "SELECT count(*) FROM entries WHERE domain = ? AND user_id <> ''", [name]))
    if used and used[0]:
        raise PolicyChangeError(
            f"policy {source!r} changes {', '.join(meaning)} of domain {name!r}, which "
            f"already has {used[0]} ledger entries; the meaning of its spent budget would "
            f"change. Define a new domain instead.{_budget_hint(meaning)}")


def _budget_hint(meaning: list[str]) -> str:
    if "wevent_budget" not in meaning:
        return ""
    return (" (A w-event domain recorded before `wevent_budget` existed was charged per "
            "stream: state wevent_budget = \"per_stream\" in its policy to keep it.)")


def record(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, now: str,
           changes: list[tuple[str, str, dict[str, Any] | None, dict[str, Any], dict[str, Any]]]
           ) -> None:
    """Append one ``policy`` entry per change and point each domain row at it (resealed).

    Each change is (domain, step, old state or None, new state, extra detail).
    """
    if not changes:
        return
    cols: dict[str, list[Any]] = {c: [] for c in (
        "user_id", "domain", "step", "stream_id", "kind", "amount", "notion", "cap",
        "balance_after", "detail", "reason")}
    for name, step, old, new, extra in changes:
        for c, v in (("user_id", ""), ("domain", name), ("step", step), ("stream_id", ""),
                     ("kind", "policy"), ("amount", int(new["cap"])), ("notion", new["notion"]),
                     ("cap", None if old is None else int(old["cap"])), ("balance_after", None),
                     ("detail", canonical_json({"old": old, "new": new, **extra}, "detail")),
                     ("reason", extra.get("summary", ""))):
            cols[c].append(v)
    seqs = append(con, key, cols, None, meta(now, actor, ""))
    for (name, *_), seq in zip(changes, seqs, strict=True):
        con.execute("UPDATE domains SET policy_seq = ? WHERE domain = ?", [seq, name])
        schema.seal_domain(con, key.noise_key, name, key.version)


def apply_tx(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, policy: Policy,
             now: str, reason: str = "") -> list[str]:
    """Create or update the ledger's domains from `policy` in `con`'s transaction.

    `reason` (the operator's, may be empty) goes into each entry's detail.

    Returns:
        One line per changed domain (empty when the ledger already matches).

    Raises:
        PolicyChangeError: a charged domain's notion, w, kind or units would change.
    """
    current = load_domains(con)
    lines: list[str] = []
    changes = []
    for name, d in sorted(policy.domains.items()):
        check_id(name, "domain name")
        row = current.get(name)
        old = None if row is None else state_of_row(row)
        new = state_of(d)
        if old == new:
            continue
        fields = _changed(old, new)
        _check_meaning(con, name, policy.source, fields)
        _write_row(con, name, new, now, exists=row is not None)
        above = _above_cap(con, name, int(new["cap"])) if row is not None else 0
        line = _line(name, d, old, new, fields, above)
        lines.append(line)
        extra = {"changed": fields, "source": policy.source, "accounts_above_cap": above,
                 "summary": line}
        if reason:
            extra["reason"] = reason
        changes.append((name, "create" if old is None else "change", old, new, extra))
    record(con, key, actor, now, changes)
    return lines


def list_tx(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The ledger's domains: name, kind, notion, cap (exact Fraction), w, units, definition."""
    out = []
    for name, d in sorted(load_domains(con).items()):
        row = {**d, "cap": from_units(int(d["cap"]))}
        row["definition"] = (definitions.decode(d["definition"], name)
                             if d.get("definition") else None)
        out.append(row)
    return out
