"""Policy history: the chain's ``policy`` entries, and the domain rows checked against them.

Every domain row (schema 3) must be exactly the state its domain's latest
``policy`` entry records, and must point at that entry (``policy_seq``).
A row copied back from an older state, or edited with plain SQL, fails this
check even when its keyed MAC matches (an old sealed row), and even without
the noise key (auditor mode).
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from ledger.amounts import from_units
from ledger.filters import Filter
from ledger.policy import state_of_row
from ledger.storage import load_domains


def policy_history(con: duckdb.DuckDBPyConnection, flt: Filter | None = None
                   ) -> list[dict[str, Any]]:
    """Every policy change in seq order (those `flt` selects: domain, since, until).

    Each row: seq, created_at, actor, domain, change (create, change, baseline),
    cap_before and cap_after (exact Fractions; cap_before None for a domain's
    first entry), changed (field names), old and new state (dicts; the new
    state's ``definition`` is the whole domain), accounts_above_cap, source,
    summary, and reason (the operator's ``--reason``; '' in entries written
    before it existed).
    """
    cond, params = (flt or Filter()).where(user=False, release=False)
    rows = con.execute(
        "SELECT seq, created_at, actor, domain, step, CAST(cap AS VARCHAR), "  # noqa: S608
        "CAST(amount AS VARCHAR), detail, reason FROM entries WHERE kind = 'policy' "
        f"AND {cond} ORDER BY seq", params).fetchall()  # `cond`: fixed text, values in params
    out = []
    for seq, at, actor, dom, step, before, after, detail, reason in rows:
        det = json.loads(detail) if detail else {}
        out.append({"seq": int(seq), "created_at": at, "actor": actor, "domain": dom,
                    "change": step,
                    "cap_before": None if before is None else from_units(int(before)),
                    "cap_after": from_units(int(after)), "changed": det.get("changed", []),
                    "old": det.get("old"), "new": det.get("new"),
                    "accounts_above_cap": det.get("accounts_above_cap", 0),
                    "source": det.get("source", ""), "summary": reason or "",
                    "reason": det.get("reason", "")})
    return out


def domain_faults(con: duckdb.DuckDBPyConnection, names: set[str] | None = None) -> str | None:
    """The first domain row (of `names`, or all) not its latest policy entry's state, or None."""
    latest = {d: (int(seq), detail) for d, seq, detail in con.execute(
        "SELECT domain, seq, detail FROM entries WHERE kind = 'policy' "
        "QUALIFY row_number() OVER (PARTITION BY domain ORDER BY seq DESC) = 1").fetchall()}
    for name, row in sorted(load_domains(con).items()):
        if names is not None and name not in names:
            continue
        if name not in latest:
            return f"domain {name!r} has no policy entry in the chain (added outside privpipe)"
        seq, detail = latest[name]
        recorded = json.loads(detail).get("new") if detail else None
        if row.get("policy_seq") != seq or recorded != state_of_row(row):
            return (f"domain {name!r}: its row is not the state its latest policy entry (seq "
                    f"{seq}) records (an older row copied back, or edited outside privpipe)")
    return None
