"""The sections of a release report, one function each.

A section takes the `ReleaseContext` and returns its Markdown lines, or an
empty list when it has nothing to say (a report never shows an empty
heading). Plots are added to ``ctx.plots`` (name -> PNG) and referenced as
``plots/NAME``. `CURVE_SECTIONS` and `STREAM_SECTIONS` list them in order; a
new section is one function appended to the list.

Everything here reads released outputs, public parameters and ledger
figures only. Rejected users appear as counts per rule: no row, column,
value or user id of a rejection.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ledger import format_fraction
from ledger.summaries import DomainBudget, Spread
from mechanisms import registry
from reports.guarantee import curves_reading, streams_reading
from reports.render import cell, md_table, utc_text
from schemas.continuation_rules import CONTINUATION_RULES

WITHHELD = "not published"
"""What reports, artifacts and the CLI show for a count the domain's policy keeps private."""


@dataclass
class ReleaseContext:
    """Everything a release report may show (no raw data)."""

    rdir: Path
    manifest: dict[str, Any]
    denied: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    charges: Spread | None              # net charge per user (tasks.report.user_charges)
    balances: DomainBudget | None       # Ledger.balance_summary(domain)
    record: dict[str, Any] | None       # Ledger.release(release_id)
    plots: dict[str, bytes] = field(default_factory=dict)
    # w-event, per-user budget: a user's charge is a window over all of its streams
    per_user_windows: bool = False
    # images a task already wrote to plots/ (the population view): embedded, not rewritten
    written_plots: dict[str, bytes] = field(default_factory=dict)

    @property
    def definition(self) -> dict[str, Any]:
        """The domain's public definition recorded in the manifest (empty if absent)."""
        return (self.manifest.get("policy") or {}).get("definition") or {}

    @property
    def notion(self) -> str:
        """``gp``, ``cgp`` or ``wevent``."""
        return str(self.manifest["parameters"].get("notion"))

    @property
    def amount(self) -> Fraction:
        """ε or ρ per curve, or ε per window."""
        p = self.manifest["parameters"]
        return Fraction(str(p.get("amount") or p.get("epsilon")))

    @property
    def released(self) -> int:
        """Users who got an output."""
        return int(self.manifest["counts"]["users_released"])

    def file(self, name: str) -> Path | None:
        """Path of output `name` of this release, or None if it was not written."""
        rel = (self.manifest.get("files") or {}).get(name)
        return self.rdir / rel if rel else None


Section = Callable[[ReleaseContext], list[str]]


def _symbol(notion: str) -> str:
    return "ρ" if notion == "cgp" else "ε"


def header(ctx: ReleaseContext) -> list[str]:
    """Title and the facts a reader checks first: when, what, under which policy."""
    m, rec = ctx.manifest, ctx.record or {}
    per = (f" per window of w = {m['parameters'].get('w')} steps (ε/w per sample)"
           if ctx.notion == "wevent" else " per curve")
    entries = m.get("ledger_entries") or {}
    policy = m.get("policy") or {}
    desc = ctx.definition.get("description")
    lines = [f"# Release {cell(m['release_id'])}", "",
             f"- Domain: `{m['domain']}`" + (f" ({cell(desc)})" if desc else "")
             + f"; metric: {cell(m['units'])}",
             f"- Mechanism: `{m['mechanism']}`; notion `{ctx.notion}`; "
             f"{_symbol(ctx.notion)} = {format_fraction(ctx.amount)}{per}",
             f"- Budget reserved at {utc_text(rec.get('created_at'))} (ledger time; the report "
             "holds no other clock, so a rerun writes the same bytes)",
             f"- Policy digest: `{policy.get('digest', 'not recorded')}`",
             f"- Input fingerprint: `{m['input_fingerprint']}`",
             f"- Ledger entries of this release: seq {entries.get('first_seq')}–"
             f"{entries.get('last_seq')}"]
    head = m.get("ledger_head")
    if head:
        lines += [f"- Ledger head after this release: seq {head['seq']}, hash `{head['hash']}`",
                  f"- Head signature (Ed25519): `{head['signature']}`; signing key "
                  f"fingerprint `{head['key_fingerprint']}` (keep this page: `privpipe ledger "
                  "verify --manifests OUT` detects a later rollback or rewrite)"]
    lines.append(f"- Parameters: `{_compact(m['parameters'])}`")
    return [*lines, ""]


def _compact(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def stream_title(manifest: dict[str, Any]) -> str:
    """The prose name of a stream release's randomizer (its registry entry's title)."""
    entry = registry.stream(manifest.get("mechanism") or "square_wave")
    return entry.title or entry.name


def guarantee(ctx: ReleaseContext) -> list[str]:
    """The plain-language reading of the guarantee (only when something was released)."""
    if not ctx.released:
        return []
    if ctx.notion == "wevent":
        text = streams_reading(ctx.amount, ctx.definition, stream_title(ctx.manifest))
    else:
        window = ctx.definition.get("window") is not None
        text = curves_reading(ctx.notion, ctx.amount, ctx.definition, median_duration(ctx),
                              "the domain's fixed window" if window else
                              "the median duration of this release, public")
    return ["## What the guarantee means", "", text, ""]


def median_duration(ctx: ReleaseContext) -> float | None:
    """The curve duration the guarantee reading uses: the domain's window, else the median."""
    if ctx.definition.get("window") is not None:  # every curve lies on the domain's window
        return float(ctx.definition["window"])
    path = ctx.file("curves")
    if path is None:
        return None
    durations = pq.read_table(path, columns=["duration"]).column("duration").to_numpy()
    return float(np.median(durations)) if durations.size else None


def users(ctx: ReleaseContext) -> list[str]:
    """Counts: released, denied, rejected, items and points."""
    c = ctx.manifest["counts"]
    # input and rejected counts are absent unless the policy declares public.rejections
    row = {"in input": c.get("users_in_input", WITHHELD), "released": c["users_released"],
           "denied (budget)": c["users_denied"],
           "rejected (invalid input)": c.get("users_rejected", WITHHELD),
           "curves / streams": c["items"]}
    if "points" in c:  # absent when the domain keeps point counts private
        row["points / samples"] = c["points"]
    lines = ["## Users", "", md_table([row], list(row))]
    if not ctx.released:
        lines += ["", "> **Nothing was released.** No user was admitted: no noise was drawn, "
                  "no output data was written (the manifest records the release) and nothing "
                  "was charged.", ""]
    return lines


def charges(ctx: ReleaseContext) -> list[str]:
    """What each user was charged by this release, from the ledger (exact)."""
    spread = ctx.charges
    if spread is None:
        return []
    wevent = ctx.notion == "wevent"
    over_streams = wevent and ctx.per_user_windows
    what = ("net charge per user (all its curves, after refunds)" if not wevent else
            "largest charge over any window of w steps, per user, summed over all of its "
            "streams" if over_streams else
            "largest charge over any window of w steps, per user (the most of any of its "
            "streams; each stream has its own budget)")
    unit = ctx.manifest["units"]
    lines = ["## What each user was charged by this release", "",
             f"From the ledger: {what}, in {_symbol(ctx.notion)} ({cell(unit)}).", "",
             md_table([{"users charged": spread.n, "min": format_fraction(spread.low),
                        "median": format_fraction(spread.median),
                        "max": format_fraction(spread.high)}],
                      ["users charged", "min", "median", "max"])]
    if spread.counts is not None:
        lines += ["", "Users by charge:", "",
                  md_table([{f"charged {_symbol(ctx.notion)}": format_fraction(v),
                             "users": n} for v, n in spread.counts],
                           [f"charged {_symbol(ctx.notion)}", "users"])]
    return [*lines, ""]


def denied(ctx: ReleaseContext) -> list[str]:
    """Denied users: the ledger's reason (requested and remaining budget)."""
    if not ctx.denied:
        return []
    return ["## Denied (the budget would be exceeded: nothing drawn, nothing released)", "",
            md_table(ctx.denied, ["user_id", "reason"], 30), ""]


def rejected(ctx: ReleaseContext) -> list[str]:
    """Rejected users as counts per validation rule (no rows, columns, values or ids).

    Only where the domain's policy declares ``public.rejections = true`` (the
    manifest then counts ``users_rejected``): otherwise a fixed note, the same
    whether or not any user was rejected, so the report says nothing of them.
    """
    if "users_rejected" not in ctx.manifest["counts"]:
        return ["## Rejected (invalid input: nothing charged)", "",
                "Users whose input fails validation are neither charged nor released. How "
                "many there were, and which rules they broke, is not published: it depends on "
                "the raw data, and the domain's policy does not declare it public "
                "(`public.rejections = false`). "
                f"`privpipe validate FILE --domain {ctx.manifest['domain']}` shows the "
                "operator.", ""]
    if not ctx.rejected:
        return []

    per_rule = Counter(rule for r in ctx.rejected for rule in r.get("rules", ["unknown"]))
    rows = [{"rule": rule, "users rejected": n} for rule, n in sorted(per_rule.items())]
    # a stream input that does not continue what was released (tasks/continuation.py)
    continuation = [f"- `{rule}`: the user's input {CONTINUATION_RULES[rule]}."
                    for rule in sorted(per_rule) if rule in CONTINUATION_RULES]
    return ["## Rejected (invalid input: nothing charged)", "",
            f"{len(ctx.rejected)} user(s) rejected as a whole; a user can break several rules. "
            f"`privpipe validate FILE --domain {ctx.manifest['domain']}` locates each problem "
            "(file, row, column) for the operator.", "",
            md_table(rows, ["rule", "users rejected"]), "",
            *([*continuation, ""] if continuation else [])]


def budget(ctx: ReleaseContext) -> list[str]:
    """Spent and remaining budget across the domain's accounts after this release."""
    b = ctx.balances
    if b is None:
        return []

    def mmm(v: Spread) -> str:
        return " / ".join(f"{float(x):.4g}" for x in (v.low, v.median, v.high))

    return ["## Budget of the domain after this release", "",
            f"All {b.accounts} account{'s' if b.accounts != 1 else ''} of domain "
            f"`{ctx.manifest['domain']}` (every release so far), in {_symbol(ctx.notion)} "
            f"({cell(ctx.manifest['units'])}):", "",
            md_table([{"accounts": b.accounts, "cap": format_fraction(b.cap),
                       "spent min / median / max": mmm(b.spent),
                       "remaining min / median / max": mmm(b.remaining),
                       "accounts within 10% of the cap": b.near}],
                     ["accounts", "cap", "spent min / median / max",
                      "remaining min / median / max", "accounts within 10% of the cap"]), ""]


def public_note(ctx: ReleaseContext) -> list[str]:
    """The closing note: what the release published outside the noise (the policy's list)."""
    pub = ctx.manifest.get("public_metadata")
    if isinstance(pub, dict):
        fields = ", ".join(html.escape(str(f)) for f in pub.get("fields", []))
        text = (f"Public, released as-is outside the noise as the domain's policy declares: "
                f"{fields}. Users rejected by validation or denied by the ledger are absent "
                f"from the outputs.")
    else:  # a manifest written before public metadata was declared per domain
        text = html.escape(str(pub or ""))
    return [f"<p class='note'>{text}</p>", ""] if text else []
