"""The audit flow: a compliance report of the whole ledger.

Verifies the hash chain and balances, then writes one self-contained HTML
page (with its tables as CSV and JSON) a compliance officer can sign: the
ledger's path and head, the audit's time, per domain the budget spent over
time, spend per account against the cap, accounts near or above the cap,
denials per user over time; the releases and the policy in force. Reads the
ledger only; charges nothing.

The run is named ``audit-<ledger file name>`` and tagged ``privpipe`` and
``audit``; its state's message says whether the ledger verified, and a ledger
that does not verify (or cannot be opened as itself) emits
``privpipe.ledger.integrity-failed`` (docs/operations.md#prefect-events).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from prefect import flow, task

from flows import signals
from flows.run_labels import audit_run_name, tag_run
from flows.run_logging import route_run_logs
from ledger.audit_data import collect
from ledger.errors import LedgerIntegrityError
from ledger.filters import Filter
from reports.audit_report import write_audit_report
from schemas.errors import ParameterError


def audit_report_fn(ledger_path: str, out_dir: str, near_cap_fraction: float = 0.1,
                    public_key: str | None = None, expect_heads: list[str] | None = None,
                    where: dict[str, str | None] | None = None,
                    since_checkpoint: str | None = None) -> dict[str, Any]:
    """Verify the ledger and write ``OUT/audit/`` (report, plots, CSV, JSON).

    `public_key` (a file the auditor kept) opens the ledger as an auditor;
    `expect_heads` are kept heads (checkpoint files or ``SEQ:HASH``) the chain
    must contain. `where` (user, domain, release, since, until; times ISO
    8601) narrows the listings, never the verification; `since_checkpoint` is
    a kept head: the report lists what changed after it.
    """
    if not 0 < near_cap_fraction < 1:
        raise ParameterError("near_cap_fraction must be in (0, 1), e.g. 0.1 for 10%")
    data = collect(ledger_path, public_key, expect_heads or [],
                   Filter.parse(**(where or {})), since_checkpoint)
    return write_audit_report(data, out_dir, near_cap_fraction)


audit_report = task(audit_report_fn, name="audit-report", persist_result=False)


def _integrity_failed(ledger_path: str, payload: dict[str, Any]) -> None:
    """Log and emit ``privpipe.ledger.integrity-failed`` (the ledger's id and path, counts)."""
    from prefect.events import emit_event

    path = str(Path(ledger_path).absolute())
    name = Path(path).name
    signals.say(f"ledger {name}: integrity check FAILED")
    emit_event("privpipe.ledger.integrity-failed",
               resource={"prefect.resource.id": ledger_resource_id(path),
                         "prefect.resource.name": name, "privpipe.ledger.path": path},
               payload=payload)


def ledger_resource_id(path: str) -> str:
    """``privpipe.ledger.<first 16 hex of SHA-256 of the ledger's absolute path>``.

    One id per ledger file whatever its file name (every ledger is called
    ``ledger.duckdb`` by default), so an automation can match one ledger.
    """
    return "privpipe.ledger." + hashlib.sha256(path.encode()).hexdigest()[:16]


@flow(name="audit", flow_run_name=audit_run_name, persist_result=False)
def audit(ledger_path: str = ".privpipe/ledger.duckdb", out_dir: str = "out",
          near_cap_fraction: float = 0.1, public_key: str | None = None,
          expect_heads: list[str] | None = None, where: dict[str, str | None] | None = None,
          since_checkpoint: str | None = None) -> Any:
    """Compliance report: chain verification, budgets over time, near-cap users, denials."""
    from prefect.states import Completed

    route_run_logs()  # INFO lines reach the API (flows.run_logging)
    tag_run("audit")
    try:
        res = audit_report(ledger_path, out_dir, near_cap_fraction, public_key, expect_heads,
                           where, since_checkpoint)
    except LedgerIntegrityError as err:
        _integrity_failed(ledger_path, {"error": type(err).__name__, "entries_checked": None})
        raise
    if not res["ok"]:
        _integrity_failed(ledger_path, {"error": "verification failed",
                                        "entries_checked": res["entries_checked"]})
        message = (f"ledger does NOT verify ({res['entries_checked']} entries checked); "
                   f"report: {res['report']}")
    else:
        message = (f"ledger verifies ({res['entries_checked']} entries); "
                   f"{len(res['accounts_near_cap'])} account(s) near the cap; "
                   f"{res['users_denied']} user(s) ever denied")
    signals.say(message)
    return Completed(message=message, data=res)
