"""The audit as machine-readable JSON (``audit.json``, ``audit --format json``).

Stable snake_case keys (ASCII, no display text), numbers as JSON numbers, and
every amount ``x`` also as ``x_exact``: its exact value as text (a decimal
when it terminates, else ``p/q``). Amounts are per account in the cap's unit
(``unit``: ``ε``, ``ρ`` or ``ε per window of w steps``), never summed across
users. The schema is `docs/audit.schema.json` (documented in docs/ledger.md).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from ledger import format_fraction
from ledger.audit_data import AuditData, DomainSpend
from ledger.queries import unit_of

FORMAT = "privpipe-audit-v1"
"""The document's ``format``; a change of its keys or their meaning gets a new version."""


def _time(v: Any) -> str | None:
    """A ledger time (naive UTC) as ISO 8601 text."""
    if v is None:
        return None
    if isinstance(v, str):
        v = datetime.fromisoformat(v)
    return v.isoformat()


def amounts(**values: Fraction | None) -> dict[str, Any]:
    """``name`` (a float, None when absent) and ``name_exact`` (exact text) of each amount."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        out[k] = None if v is None else float(v)
        out[f"{k}_exact"] = None if v is None else format_fraction(v)
    return out


def _quantile(values: list[Fraction], p: float) -> Fraction | None:
    return values[max(0, math.ceil(p * len(values)) - 1)] if values else None


def _domains(data: AuditData) -> list[dict[str, Any]]:
    out = []
    for d in data.domains:
        spent = sorted(b["spent"] for b in data.balances if b["domain"] == d["domain"])
        cap = d["cap"]
        denied = [r for r in data.denials if r["domain"] == d["domain"]]
        out.append({
            "domain": d["domain"], "kind": d["kind"], "notion": d["notion"], "w": d.get("w"),
            "unit": unit_of(d["notion"], d.get("w")), "units": d["units_label"],
            **amounts(cap=cap, spent_median=_quantile(spent, 0.5),
                      spent_p90=_quantile(spent, 0.9), spent_max=_quantile(spent, 1.0)),
            "accounts": len(spent),
            "accounts_near_cap": sum(1 for s in spent if cap * Fraction(9, 10) <= s <= cap),
            "accounts_above_cap": sum(1 for s in spent if s > cap),
            "releases": len(data.spend.get(d["domain"], DomainSpend()).releases),
            "users_denied": len(denied),
            "denied_requests": sum(int(r["denied_requests"]) for r in denied)})
    return out


def _releases(data: AuditData) -> list[dict[str, Any]]:
    return [{"release_id": r["release_id"], "domain": r["domain"], "state": r["state"],
             "first_at": _time(r["first_at"]), "actors": r["actors"],
             "mechanism": r["mechanism"], "notion": r["notion"],
             "unit": unit_of(r["notion"], _w(data, r["domain"])),
             **amounts(cap=r["cap"], charged_min=r["net_min"], charged_median=r["net_median"],
                       charged_max=r["net_max"]),
             "users_admitted": int(r["admitted"]), "users_denied": int(r["denied"]),
             "first_seq": int(r["first_seq"]), "last_seq": int(r["last_seq"])}
            for r in data.releases]


def _w(data: AuditData, domain: str) -> int | None:
    return next((d.get("w") for d in data.domains if d["domain"] == domain), None)


def account_rows(data: AuditData, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Balances as JSON rows (user, domain, stream, spent/cap/remaining, unit, state)."""
    return [{"domain": b["domain"], "user_id": b["user_id"], "stream_id": b["stream_id"],
             **amounts(spent=b["spent"], cap=b["cap"], remaining=b["remaining"]),
             "unit": b.get("unit") or unit_of(b["notion"], _w(data, b["domain"])),
             "state": b.get("state", "")} for b in rows]


def _policy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"seq": p["seq"], "created_at": _time(p["created_at"]), "domain": p["domain"],
             "change": p["change"], **amounts(cap_before=p["cap_before"],
                                              cap_after=p["cap_after"]),
             "changed": list(p.get("changed") or []),
             "accounts_above_cap": int(p.get("accounts_above_cap", 0)), "actor": p["actor"],
             "reason": p.get("reason", ""), "source": p.get("source", "")} for p in rows]


def _since(data: AuditData) -> dict[str, Any] | None:
    s = data.since
    if s is None:
        return None
    out = {k: s[k] for k in ("checkpoint", "seq", "hash", "in_chain", "problem") if k in s}
    if not s["in_chain"]:
        return out
    return {**out,
            "releases": [{**r, "first_at": _time(r["first_at"]), "first_seq": int(r["first_seq"]),
                          "users_admitted": int(r["users_admitted"]),
                          "users_denied": int(r["users_denied"])} for r in s["releases"]],
            "charges": [{"domain": c["domain"], "accounts_charged": int(c["accounts_charged"]),
                         **amounts(balance_increase_max=c["balance_increase_max"]),
                         "unit": unit_of(_notion(data, c["domain"]), _w(data, c["domain"]))}
                        for c in s["charges"]],
            "denials": [{k: (int(v) if k != "domain" else v) for k, v in r.items()}
                        for r in s["denials"]],
            "policy_changes": _policy(s["policy_changes"])}


def _notion(data: AuditData, domain: str) -> str:
    return next((d["notion"] for d in data.domains if d["domain"] == domain), "gp")


def audit_document(data: AuditData, near: list[dict[str, Any]], above: list[dict[str, Any]],
                   report: str) -> dict[str, Any]:
    """The whole audit as one JSON-ready dict (schema: docs/audit.schema.json)."""
    v = data.verification
    audited_at = datetime.now(UTC).replace(microsecond=0, tzinfo=None).isoformat()
    return {
        "format": FORMAT, "ok": bool(v.ok), "entries_checked": int(v.entries_checked),
        "entries": int(data.entries), "message": v.message, "not_checked": list(v.not_checked),
        "ledger": data.ledger_path, "audited_at": audited_at, "auditor": bool(data.auditor),
        "head": data.signed_head, "filter": data.where.to_dict(),
        "domains": _domains(data), "releases": _releases(data),
        "accounts_near_cap": account_rows(data, near),
        "accounts_above_cap": account_rows(data, above),
        "denials": sum(int(r["denied_requests"]) for r in data.denials),
        "users_denied": len(data.denials),
        "denials_per_user": [{
            "domain": r["domain"], "user_id": r["user_id"],
            "denied_requests": int(r["denied_requests"]), "releases": int(r["releases"]),
            "first_denied": _time(r["first_denied"]), "last_denied": _time(r["last_denied"]),
            "last_reason": r["last_reason"] or "", "causes": dict(r["causes"])}
            for r in data.denials],
        "denial_causes": [dict(c) for c in data.denial_causes],
        "policy_changes": _policy(data.policy_history),
        "spend_over_time": _spend(data),
        "since_checkpoint": _since(data), "report": report}


def _spend(data: AuditData) -> list[dict[str, Any]]:
    return [{"domain": dom, "release_id": s.releases[i], "time": _time(s.times[i]),
             "accounts": int(s.accounts_after[i]),
             **amounts(charged_min=s.charge_min[i], charged_median=s.charge_median[i],
                       charged_max=s.charge_max[i], spent_median=s.median_after[i],
                       spent_p90=s.p90_after[i], spent_max=s.max_after[i], cap=s.cap[i])}
            for dom, s in sorted(data.spend.items()) for i in range(len(s.releases))]
