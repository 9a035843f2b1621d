"""Release reports: ``report.md``, a self-contained ``report.html`` and PNG plots.

A release report shows only private outputs, counts, ledger figures, public
parameters and data-independent error bounds: never a raw value, and
rejections only as counts per rule. Raw data is plotted only by the
`evaluate` flow, on public or synthetic data. The sections are listed in
`CURVE_SECTIONS` and `STREAM_SECTIONS` (see `reports.release_sections`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from ledger import Ledger
from ledger.remote import open_ledger
from ledger.summaries import Spread
from reports import kind_sections as kinds
from reports import release_sections as sec
from reports.caveats import curve_caveats
from reports.release_sections import WITHHELD, ReleaseContext, Section
from reports.render import publish_artifacts, render

CURVE_SECTIONS: tuple[Section, ...] = (
    sec.header, sec.guarantee, curve_caveats, sec.users, sec.charges, sec.denied, sec.rejected,
    sec.budget, kinds.curve_error_bounds, kinds.curve_outputs, kinds.curve_plots)


def stream_history(ctx: ReleaseContext) -> list[str]:
    """The stream's history and population sections (`tasks.stream_post`; post-processing)."""
    from tasks.stream_post import report_lines

    for name in (ctx.manifest.get("population") or {}).get("plots", []):
        # written by the population task into this private build directory
        ctx.written_plots[name] = (ctx.rdir / "plots" / name).read_bytes()
    return report_lines(ctx.manifest)


STREAM_SECTIONS: tuple[Section, ...] = (
    sec.header, sec.guarantee, sec.users, sec.charges, sec.denied, sec.rejected, sec.budget,
    kinds.stream_error_bounds, kinds.reconstruction, stream_history, kinds.stream_outputs,
    kinds.stream_plots)


def user_charges(ledger: Ledger, release_id: str, notion: str) -> tuple[Spread | None, bool]:
    """The spread of what the release charged each user, and whether it is per-user windows.

    Both aggregated without a row per user in memory: ε-GP and ρ-CGP, the sum
    of the user's net charges (`Ledger.charge_summary`); w-event, the user's
    largest window over all of its streams in a per-user domain, else the most
    charged stream's (`Ledger.window_charge_summary`).
    """
    if notion != "wevent":
        return ledger.charge_summary(release_id), False
    return ledger.window_charge_summary(release_id)


def release_context(rdir: str, manifest: dict[str, Any], denied: list[dict[str, Any]],
                    rejected: list[dict[str, Any]], ledger_path: str) -> ReleaseContext:
    """Gather what the report shows: the manifest and the ledger's figures for the release."""
    ledger = open_ledger(ledger_path)
    rid = manifest["release_id"]
    charged, per_user_windows = user_charges(ledger, rid,
                                             str(manifest["parameters"].get("notion")))
    return ReleaseContext(
        rdir=Path(rdir), manifest=manifest, denied=denied, rejected=rejected,
        charges=charged, balances=ledger.balance_summary(manifest["domain"]),
        record=ledger.release(rid), per_user_windows=per_user_windows)


def write_release_report_fn(rdir: str, manifest: dict[str, Any], denied: list[dict[str, Any]],
                            rejected: list[dict[str, Any]], ledger_path: str,
                            publish_dir: str | None = None) -> dict[str, str]:
    """Write ``report.md``, ``report.html`` (images embedded) and ``plots/`` for one release.

    `rdir` is where the files are written (the release's private build
    directory); `publish_dir` (default `rdir`) is where they will be once the
    release is published, which the returned paths name. Reads the release's
    own outputs and the ledger; charges nothing.
    """
    ctx = release_context(rdir, manifest, denied, rejected, ledger_path)
    sections = STREAM_SECTIONS if ctx.notion == "wevent" else CURVE_SECTIONS
    lines: list[str] = []
    for section in sections:
        lines += section(ctx)
    lines += sec.public_note(ctx)
    text = "\n".join(lines)
    out = Path(rdir)
    render(text, out, f"privpipe release {manifest['release_id']}", ctx.plots,
           written=ctx.written_plots)
    counts = manifest["counts"]
    # images are embedded from where they are now (the private build directory)
    publish_artifacts(manifest["release_id"], text, out, [
        {"release_id": manifest["release_id"], "domain": manifest["domain"],
         "released": counts["users_released"], "denied": counts["users_denied"],
         "rejected": counts.get("users_rejected", WITHHELD)}])
    final = Path(publish_dir) if publish_dir is not None else out
    return {"md": str(final / "report.md"), "html": str(final / "report.html")}


write_release_report = task(write_release_report_fn, name="release-report", persist_result=False)
