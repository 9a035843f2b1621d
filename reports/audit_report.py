"""The compliance audit report: one self-contained HTML page, its tables as CSV and JSON.

Built from `ledger.audit_data.AuditData` only (ledger figures, never release
outputs or raw data). Per domain: budget spent over time (account balances
after each release, and each release's per-user charge), spend per account
against the cap, accounts near or above the cap, denials per user over
time; then the releases, the denials per user and the policy in force.
"""

from __future__ import annotations

import csv
import io
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from files.report_files import finish_dir, save_text
from ledger import format_fraction
from ledger.audit_data import AuditData, DomainSpend
from ledger.queries import DENIAL_CAUSES, unit_of
from reports import plots
from reports.audit_json import audit_document
from reports.render import cell, md_table, now_text, publish_artifacts, render, utc_text

_SYMBOL = {"gp": "ε", "cgp": "ρ", "wevent": "ε per window"}


def _f(v: Fraction | None) -> str:
    return "" if v is None else format_fraction(v)


def _g(v: Fraction | None) -> str:
    return "" if v is None else f"{float(v):.6g}"


def _quantile(values: list[Fraction], p: float) -> Fraction:
    """The nearest-rank p-quantile of sorted `values` (an actual account's value)."""
    return values[max(0, math.ceil(p * len(values)) - 1)]


def domain_summary(data: AuditData) -> list[dict[str, Any]]:
    """One row per domain of the ledger: cap, spend per account, near/above cap, denials."""
    rows = []
    for d in data.domains:
        accts = [b for b in data.balances if b["domain"] == d["domain"]]
        spent = sorted(b["spent"] for b in accts)
        cap = d["cap"]
        rows.append({
            "domain": d["domain"], "notion": d["notion"], "cap": _f(cap),
            "units": d["units_label"], "accounts": len(accts),
            "spent median / p90 / max": " / ".join(_g(_quantile(spent, p)) for p in
                                                   (0.5, 0.9, 1.0)) if spent else "",
            "accounts ≥ 90% of cap": sum(1 for s in spent if s >= cap * Fraction(9, 10)),
            "accounts above cap": sum(1 for s in spent if s > cap),
            "releases": len(data.spend.get(d["domain"], DomainSpend()).releases),
            "users denied": sum(1 for r in data.denials if r["domain"] == d["domain"])})
    return rows


def _account_row(b: dict[str, Any]) -> dict[str, Any]:
    return {"domain": b["domain"], "user_id": b["user_id"], "stream_id": b["stream_id"],
            "spent": _f(b["spent"]), "cap": _f(b["cap"]), "remaining": _f(b["remaining"])}


def near_cap(data: AuditData, fraction: float) -> list[dict[str, Any]]:
    """Accounts within the cap whose remaining budget is at most `fraction` of it."""
    limit = Fraction(fraction).limit_denominator(10**6)
    return sorted((_account_row(b) for b in data.balances
                   if b["spent"] <= b["cap"] and b["remaining"] <= b["cap"] * limit),
                  key=lambda r: (r["domain"], r["user_id"], r["stream_id"]))


def above_cap(data: AuditData) -> list[dict[str, Any]]:
    """Accounts that spent more than the cap now in force (charged before it was lowered)."""
    return sorted((_account_row(b) for b in data.balances if b["spent"] > b["cap"]),
                  key=lambda r: (r["domain"], r["user_id"], r["stream_id"]))


def policy_rows(data: AuditData) -> list[dict[str, Any]]:
    """The policy change log, from the chain: one row per change, in seq order."""
    return [{"time (UTC)": utc_text(p["created_at"]), "seq": p["seq"], "domain": p["domain"],
             "change": p["change"], "cap": (f"{_f(p['cap_before'])} → " if p["cap_before"]
                                            is not None else "") + _f(p["cap_after"]),
             "fields changed": ", ".join(p.get("changed") or []),
             "accounts above cap": p.get("accounts_above_cap", 0), "actor": p["actor"],
             "reason": p.get("reason", ""), "source": p.get("source", "")}
            for p in data.policy_history]


def release_rows(data: AuditData) -> list[dict[str, Any]]:
    """The releases table: time, actor, mechanism, notion, amounts per user, user counts."""
    out = []
    for r in data.releases:
        m = r["manifest"]
        params, counts = m.get("parameters") or {}, m.get("counts") or {}
        amount = params.get("amount") or params.get("epsilon")
        per = " per window" if r["notion"] == "wevent" else " per curve"
        out.append({
            "time (UTC)": utc_text(r["first_at"]), "release_id": r["release_id"],
            "domain": r["domain"], "state": r["state"], "actor": r["actors"],
            "mechanism": r["mechanism"] or "", "notion": r["notion"],
            "requested": f"{_f(Fraction(str(amount)))}{per}" if amount else "",
            "charged per user min / median / max": " / ".join(
                _f(r[k]) for k in ("net_min", "net_median", "net_max"))
            if r["net_max"] is not None else "nothing (every request denied)",
            "users released / denied / rejected":
                f"{counts.get('users_released', r['admitted'])} / "
                f"{counts.get('users_denied', r['denied'])} / {counts.get('users_rejected', '–')}",
            "entries": f"{r['first_seq']}–{r['last_seq']}"})
    return out


def spend_rows(domain: str, s: DomainSpend) -> list[dict[str, Any]]:
    """Budget spent over time in one domain: one row per release."""
    return [{"domain": domain, "time (UTC)": utc_text(s.times[i]), "release_id": s.releases[i],
             "charged min": _f(s.charge_min[i]), "charged median": _f(s.charge_median[i]),
             "charged max": _f(s.charge_max[i]), "accounts": s.accounts_after[i],
             "spent median": _g(s.median_after[i]), "spent p90": _g(s.p90_after[i]),
             "spent max": _g(s.max_after[i]), "cap": _f(s.cap[i])}
            for i in range(len(s.releases))]


def _header(data: AuditData, audited_at: str) -> list[str]:
    v, head, signed = data.verification, data.head, data.signed_head
    lines = ["# privpipe compliance audit", "",
             f"- Ledger: {cell(data.ledger_path)}"
             + (" (read as an auditor: public key only)" if data.auditor else ""),
             f"- Audited at: {audited_at}",
             f"- Ledger head: seq {signed['seq']}, hash `{signed['hash']}`"
             + (f", last entry at {utc_text(head['created_at'])}"
                if head.get("created_at") and head["seq"] == signed["seq"] else ""),
             f"- Head signature (Ed25519): `{signed['signature']}`; signing key fingerprint "
             f"`{signed['key_fingerprint']}`",
             f"- Entries exported for this audit: {data.entries}"
             + ("" if head["seq"] == signed["seq"] else
                f" (up to seq {head['seq']}: the ledger grew during the audit)"), "",
             "## Hash chain and balances", "",
             f"**{'VERIFIED' if v.ok else 'FAILED'}**: {v.entries_checked} entries checked. "
             f"{cell(v.message)}", ""]
    if v.not_checked:
        lines += [f"Not checked without the noise key: {cell('; '.join(v.not_checked))}.", ""]
    if not v.ok:
        lines += [f"> **The ledger does not verify** (first bad entry: seq {v.first_bad_seq}). "
                  "The figures below are read from a ledger that has been altered; do not sign "
                  "this audit. Restore the ledger from backup and run `privpipe ledger verify`.",
                  ""]
    return lines


def _filter_lines(data: AuditData) -> list[str]:
    if data.where.empty:
        return []
    shown = ", ".join(f"{k} {'≥' if k == 'since' else '<' if k == 'until' else '='} "
                      f"{cell(v)}" for k, v in data.where.to_dict().items() if v is not None)
    return [f"> **Narrowed listings**: {shown} (times UTC). The verification above covers "
            "the whole chain; every table below covers only the selected entries.", ""]


def _since_section(data: AuditData) -> list[str]:
    s = data.since
    if s is None:
        return _filter_lines(data)
    lines = [*_filter_lines(data), f"## Changes since the kept head (seq {s['seq']})", ""]
    if "problem" in s:
        return [*lines, f"**The kept head {cell(s['checkpoint'])} (seq {s['seq']}) is not a "
                f"head this ledger's key signed**: {cell(s['problem'])}. Nothing since it can "
                "be listed.", ""]
    if not s["in_chain"]:
        return [*lines, f"**The kept head {cell(s['checkpoint'])} (seq {s['seq']}, hash "
                f"`{s['hash']}`) is not in this ledger's chain**: it was rolled back, "
                "truncated, rewritten or re-keyed since. Nothing since it can be listed.", ""]
    rels = [{**r, "first_at": utc_text(r["first_at"])} for r in s["releases"]]
    charges = [{"domain": c["domain"], "accounts charged": c["accounts_charged"],
                "largest balance increase of one account": _f(c["balance_increase_max"]),
                "unit": _unit(data, c["domain"])} for c in s["charges"]]
    return [*lines, f"From {cell(s['checkpoint'])} to the current head.", "",
            "### Releases", "", md_table(rels, ["first_at", "release_id", "domain",
                                                 "users_admitted", "users_denied"], 100),
            "### Charges per domain", "",
            md_table(charges, list(charges[0]) if charges else [], 100),
            "### Denials", "", md_table(s["denials"], ["domain", "denied_requests",
                                                       "users_denied"], 100),
            "### Policy changes", "",
            md_table([{"seq": p["seq"], "time (UTC)": utc_text(p["created_at"]),
                       "domain": p["domain"], "summary": p["summary"], "actor": p["actor"],
                       "reason": p.get("reason", "")} for p in s["policy_changes"]],
                     ["seq", "time (UTC)", "domain", "summary", "actor", "reason"], 100), ""]


def _unit(data: AuditData, domain: str) -> str:
    d = next((d for d in data.domains if d["domain"] == domain), None)
    return "" if d is None else unit_of(d["notion"], d.get("w"))


def _domain_section(data: AuditData, dom: dict[str, Any], fraction: float,
                    images: dict[str, bytes]) -> list[str]:
    name, unit = dom["domain"], dom["units_label"]
    sym = _SYMBOL[dom["notion"]]
    per_stream = getattr(dom.get("definition"), "wevent_budget", None) == "per_stream"
    account = ("one user, one stream" if per_stream else "one user, all of its streams")
    per = ((f"per window of w = {dom['w']} steps, "
            + ("per user and stream" if per_stream else "per user over all of its streams"))
           if dom.get("w") else "per user")
    lines = [f"## Domain `{name}`", "",
             f"{dom['kind']}, notion `{dom['notion']}`, cap "
             f"{'ρ' if dom['notion'] == 'cgp' else 'ε'} = {_f(dom['cap'])} {per} "
             f"({cell(unit)}).", ""]
    if not any(b["domain"] == name for b in data.balances):
        return [*lines, f"No release has charged domain `{name}` yet.", ""]
    s = data.spend.get(name)
    if s and s.releases:
        images[f"spend_{name}.png"] = plots.spend_over_time(plots.SpendSeries(
            labels=[f"{utc_text(t)[:16]}\n{rid[:18]}" for t, rid in zip(s.times, s.releases,
                                                                          strict=True)],
            max_after=[float(v) for v in s.max_after], p90_after=[float(v) for v in s.p90_after],
            median_after=[float(v) for v in s.median_after],
            charge_max=[float(v) for v in s.charge_max],
            charge_median=[float(v) for v in s.charge_median], cap=[float(v) for v in s.cap]),
            sym, f"Budget spent over time: {name}")
        lines += ["### Budget spent over time", "",
                  f"Per account ({account if dom['notion'] == 'wevent' else 'one user'})"
                  f", never summed across users: top, the balances after each release; bottom, "
                  f"what each release charged a user ({sym}).", "",
                  f"![budget over time {name}](plots/spend_{name}.png)", "",
                  md_table(spend_rows(name, s), ["time (UTC)", "release_id", "charged min",
                                                 "charged median", "charged max", "accounts",
                                                 "spent median", "spent p90", "spent max",
                                                 "cap"], 30)]
    lines += _spend_distribution(data, dom, fraction, images)
    return lines


def _spend_distribution(data: AuditData, dom: dict[str, Any], fraction: float,
                        images: dict[str, bytes]) -> list[str]:
    name, sym = dom["domain"], _SYMBOL[dom["notion"]]
    accts = [b for b in data.balances if b["domain"] == name]
    lines: list[str] = []
    if accts:
        images[f"accounts_{name}.png"] = plots.users_histogram(
            [float(b["spent"]) for b in accts], f"Spend per account: {name}",
            f"spent ({sym})", float(dom["cap"]))
        lines += ["### Spend per account against the cap", "",
                  f"![spend per account {name}](plots/accounts_{name}.png)", ""]
    near = [r for r in near_cap(data, fraction) if r["domain"] == name]
    lines += [f"### Accounts within {fraction:.0%} of the cap", ""]
    lines += ([md_table(near, ["user_id", "stream_id", "spent", "cap", "remaining"], 50)]
              if near else
              [f"No account of `{name}` has less than {fraction:.0%} of its cap left.", ""])
    lines += _above_cap_section(data, name)
    days = data.denials_per_day.get(name, [])
    lines += ["### Denials over time", ""]
    if days:
        images[f"denials_{name}.png"] = plots.denials_per_day(
            [d for d, _ in days], [n for _, n in days], f"Users denied per day: {name}")
        lines += [f"![denials {name}](plots/denials_{name}.png)", ""]
    else:
        lines += [f"No request of domain `{name}` was denied.", ""]
    return lines


def _above_cap_section(data: AuditData, name: str) -> list[str]:
    above = [r for r in above_cap(data) if r["domain"] == name]
    if not above:
        return []
    lowered = [p for p in data.policy_history if p["domain"] == name
               and p["cap_before"] is not None and p["cap_after"] < p["cap_before"]]
    when = (f" (seq {lowered[-1]['seq']}, {utc_text(lowered[-1]['created_at'])}: "
            f"{_f(lowered[-1]['cap_before'])} → {_f(lowered[-1]['cap_after'])})"
            if lowered else "")
    return ["### Accounts above a lowered cap", "",
            f"The cap was lowered after these accounts were charged{when}. Every admission "
            "was checked against the cap recorded on its entry (`verify` re-checks it); they "
            "are admitted nothing until the cap is raised.", "",
            md_table(above, ["user_id", "stream_id", "spent", "cap", "remaining"], 50), ""]


def _policy(data: AuditData) -> list[str]:
    rows = _policy_rows(data)
    log = policy_rows(data)
    return ["## Policy in force (the ledger's domains)", "",
            md_table(rows, list(rows[0]) if rows else []), "",
            "## Policy change log (from the hash chain)", "",
            md_table(log, ["time (UTC)", "seq", "domain", "change", "cap", "fields changed",
                           "accounts above cap", "actor", "reason", "source"], 100)
            if log else "No policy change is recorded.\n", ""]


#: Columns of the CSV files whose tables can be empty (an empty table keeps its header).
CSV_COLUMNS = {
    "accounts_near_cap": ["domain", "user_id", "stream_id", "spent", "cap", "remaining"],
    "accounts_above_cap": ["domain", "user_id", "stream_id", "spent", "cap", "remaining"],
    "policy_changes": ["time (UTC)", "seq", "domain", "change", "cap", "fields changed",
                       "accounts above cap", "actor", "reason", "source"],
    "denials_per_user": ["domain", "user_id", "denied_requests", "releases", "first_denied",
                         "last_denied", "causes", "last_reason"],
    "denial_causes": ["domain", "cause", "requests", "users", "meaning"],
    "releases": ["time (UTC)", "release_id", "domain", "state", "actor", "mechanism", "notion",
                 "requested", "charged per user min / median / max",
                 "users released / denied / rejected", "entries"],
    "spend_over_time": ["domain", "time (UTC)", "release_id", "charged min", "charged median",
                        "charged max", "accounts", "spent median", "spent p90", "spent max",
                        "cap"],
}


def _csv(rows: list[dict[str, Any]], columns: list[str] | None) -> str:
    buf = io.StringIO()
    fields = columns or (list(rows[0]) if rows else [])
    if fields:
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _tables(data: AuditData, fraction: float) -> dict[str, list[dict[str, Any]]]:
    """The report's tables, as shown (display columns), each also written as CSV."""
    return {
        "domains": domain_summary(data), "releases": release_rows(data),
        "accounts_near_cap": near_cap(data, fraction),
        "accounts_above_cap": above_cap(data), "policy_changes": policy_rows(data),
        "denials_per_user": [{**r, "first_denied": utc_text(r["first_denied"]),
                              "last_denied": utc_text(r["last_denied"]),
                              "causes": "; ".join(f"{k}: {n}" for k, n in r["causes"].items())}
                             for r in data.denials],
        "denial_causes": [{**c, "meaning": DENIAL_CAUSES.get(c["cause"], "")}
                          for c in data.denial_causes],
        "spend_over_time": [row for dom, s in sorted(data.spend.items())
                            for row in spend_rows(dom, s)],
        "policy": _policy_rows(data)}


def _denials_section(data: AuditData, tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    if not data.denials:
        return ["## Denials per user", "", "No request was denied.", ""]
    n = len(tables["denials_per_user"])
    return ["## Why requests were denied", "",
            "Requests and users per cause (from the reason recorded on each `deny` entry).", "",
            md_table(tables["denial_causes"], ["domain", "cause", "requests", "users",
                                               "meaning"], 100), "",
            "## Denials per user", "",
            f"One row per user and domain (a user denied for several curves counts once); "
            f"{n} rows, the first 50 shown here, every row in `denials_per_user.csv` and "
            "`audit.json` (`privpipe ledger denials --user U` lists each request with its "
            "reason).", "",
            md_table(tables["denials_per_user"], ["domain", "user_id", "denied_requests",
                                                  "releases", "first_denied", "last_denied",
                                                  "causes", "last_reason"], 50), ""]


def write_audit_report(data: AuditData, out_dir: str | Path, near_cap_fraction: float = 0.1
                       ) -> dict[str, Any]:
    """Write ``OUT/audit/report.{md,html}``, ``plots/``, the tables as CSV and ``audit.json``.

    Returns the `reports.audit_json.audit_document` written to ``audit.json``.
    """
    out = Path(out_dir) / "audit"
    audited_at = now_text()
    images: dict[str, bytes] = {}
    tables = _tables(data, near_cap_fraction)
    summary = tables["domains"]
    lines = _header(data, audited_at) + _since_section(data)
    lines += ["## Domains", "", md_table(summary, list(summary[0]) if summary else []), ""]
    for dom in data.domains:
        lines += _domain_section(data, dom, near_cap_fraction, images)
    lines += _denials_section(data, tables)
    lines += ["## Releases", "", md_table(tables["releases"], list(tables["releases"][0])
                                          if tables["releases"] else [], 100), ""]
    lines += _policy(data)
    lines += ["## Files", "", "Next to this page: " + ", ".join(
        f"`{k}.csv`" for k in tables) + ", and `audit.json` (everything, exact amounts; "
        "schema in docs/ledger.md). Re-check the chain yourself: `privpipe ledger verify "
        "--ledger PATH`; query the ledger read-only with `duckdb -readonly PATH` (views "
        "`balances`, `release_summary`, `denials`, `near_cap`, `user_history`).", ""]
    text = "\n".join(lines)
    html = render(text, out, "privpipe compliance audit", images)
    for name, rows in tables.items():
        save_text(out / f"{name}.csv", _csv(rows, CSV_COLUMNS.get(name)))
    near = [b for b in data.balances if b["spent"] <= b["cap"]
            and b["remaining"] <= b["cap"] * Fraction(near_cap_fraction).limit_denominator(10**6)]
    result = audit_document(data, near,
                            [b for b in data.balances if b["spent"] > b["cap"]], str(html))
    save_text(out / "audit.json", json.dumps(result, indent=2, sort_keys=True, default=str)
              + "\n")
    finish_dir(out)  # born private; now the operator's modes (docs/files.md)
    publish_artifacts("audit", text, out, summary)
    return result


def _policy_rows(data: AuditData) -> list[dict[str, Any]]:
    return [{"domain": d["domain"], "kind": d["kind"], "notion": d["notion"], "cap": _f(d["cap"]),
             "w": d.get("w") or "", "time_unit": d["time_unit"], "value_unit": d["value_unit"],
             "units": d["units_label"]} for d in data.domains]
