"""The audit flow: a compliance report of the whole ledger.

Balances per domain (histograms of spent budget against the cap), users near
their cap, denials over time, the release list and the hash-chain
verification result. Reads the ledger only; charges nothing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from prefect import flow, task

from ledger import Ledger
from tasks import plots
from tasks.outputs import write_json
from tasks.report import md_table, publish_artifacts, render
from tasks.safe_files import make_dirs, set_output_modes


def audit_report_fn(ledger_path: str, out_dir: str, near_cap_fraction: float = 0.1
                    ) -> dict[str, Any]:
    """Verify the ledger and write ``OUT/audit/report.{md,html}`` with plots."""
    ledger = Ledger(ledger_path)
    verification = ledger.verify()
    out = Path(out_dir) / "audit"
    make_dirs(out / "plots")
    balances = ledger.balances()
    domains = sorted({r["domain"] for r in balances})
    lines = ["# privpipe compliance audit", "",
             f"Ledger: `{Path(ledger_path).name}`", "",
             "## Hash chain and balances", "",
             f"**{'VERIFIED' if verification.ok else 'FAILED'}**: "
             f"{verification.entries_checked} entries checked. {verification.message}", ""]
    summary_rows: list[dict[str, Any]] = []
    near: list[dict[str, Any]] = []
    above: list[dict[str, Any]] = []
    histograms: list[str] = []
    for dom in domains:
        rows = [r for r in balances if r["domain"] == dom]
        cap = max(float(r["cap"]) for r in rows)
        spent = [float(r["spent"]) for r in rows]
        over = sum(1 for r in rows if float(r["spent"]) > float(r["cap"]))
        summary_rows.append({"domain": dom, "units": rows[0].get("units", ""),
                             "accounts": len(rows), "cap": f"{cap:g}",
                             "total spent": f"{sum(spent):.6g}",
                             "max spent": f"{max(spent):.6g}", "accounts over cap": over})
        for r in rows:
            if r.get("state") == "above a lowered cap":  # a state of its own, never "near"
                above.append({"domain": dom, "user_id": r["user_id"],
                              "stream_id": r.get("stream_id", ""),
                              "spent": f"{float(r['spent']):.6g}", "cap": f"{float(r['cap']):g}"})
            elif float(r["remaining"]) <= near_cap_fraction * float(r["cap"]):
                near.append({"domain": dom, "user_id": r["user_id"],
                             "stream_id": r.get("stream_id", ""),
                             "spent": f"{float(r['spent']):.6g}",
                             "remaining": f"{float(r['remaining']):.6g}"})
        name = plots.plot_histogram(spent, out / "plots" / f"balances_{dom}.png",
                                    f"Budget spent per account: {dom}",
                                    f"spent ({rows[0].get('units', '')})", cap)
        histograms += [f"### Domain `{dom}`", "", f"![balances {dom}](plots/{name})", ""]
    lines += ["## Balances per domain", "",
              md_table(summary_rows, ["domain", "units", "accounts", "cap", "total spent",
                                      "max spent", "accounts over cap"]),
              *histograms,
              f"## Accounts within {near_cap_fraction:.0%} of their cap", "",
              md_table(near, ["domain", "user_id", "stream_id", "spent", "remaining"]),
              "## Accounts above a lowered cap (they admit nothing)", "",
              md_table(above, ["domain", "user_id", "stream_id", "spent", "cap"])]
    denials = ledger.denials()
    per_day = Counter(str(d["created_at"])[:10] for d in denials)
    days = sorted(per_day)
    name = plots.plot_timeline(days, [per_day[d] for d in days], out / "plots" / "denials.png",
                               "Denied requests per day")
    lines += ["## Denials over time", "", f"![denials](plots/{name})", "",
              md_table([{"created_at": d["created_at"], "release_id": d["release_id"],
                         "user_id": d["user_id"], "domain": d["domain"],
                         "reason": d.get("reason", "")} for d in denials],
                       ["created_at", "release_id", "user_id", "domain", "reason"], 30)]
    releases = ledger.releases()
    lines += ["## Releases", "",
              md_table(releases, [c for c in ("release_id", "state", "domain", "created_at",
                                               "users") if not releases or c in releases[0]], 50)]
    text = "\n".join(lines)
    html = render(text, out / "report.md", "privpipe compliance audit")
    result = {"ok": bool(verification.ok), "entries": int(verification.entries_checked),
              "message": verification.message, "domains": summary_rows,
              "near_cap": len(near), "denials": len(denials), "report": str(html)}
    write_json(result, out / "audit.json")
    set_output_modes(out)  # born private; now the operator's modes (docs/files.md)
    publish_artifacts("audit", text, out, summary_rows)
    return result


audit_report = task(audit_report_fn, name="audit-report", persist_result=False)


@flow(name="audit", persist_result=False)
def audit(ledger_path: str = ".privpipe/ledger.duckdb", out_dir: str = "out",
          near_cap_fraction: float = 0.1) -> dict[str, Any]:
    """Compliance report: balances, near-cap users, denials, chain verification."""
    return audit_report(ledger_path, out_dir, near_cap_fraction)
