"""The audit web page's pages, rendered on the server from `ledger.audit_views` rows.

Plain HTML (no script): every view is a GET URL an auditor can bookmark and
paste into a sign-off. Words are for people who sign off: each page says what
its figures mean; amounts carry their unit (ε, ρ, or ε per window).
"""

from __future__ import annotations

from typing import Any

from ledger.queries import DENIAL_CAUSES, unit_of
from reports.audit_html import amount, count, esc, filter_form, link, pager, table, when

GUARANTEES = {"gp": "geo-privacy, ε (Laplace noise)", "cgp": "geo-privacy, ρ (Gaussian noise)",
              "wevent": "w-event local privacy, ε per window"}
"""Each notion in words (docs/design.md)."""

ENTRY_KINDS = {"reserve": "charge (reserved)", "settle": "charge confirmed",
               "refund": "refund of unused budget", "close": "refund (release closed)",
               "deny": "DENIED"}


def _unit(notions: dict[str, dict[str, Any]], domain: str) -> str:
    d = notions.get(domain)
    return "" if d is None else unit_of(d["notion"], d.get("w"))


def verification_banner(status: dict[str, Any]) -> str:
    """Whole-chain verification: verifying…, verified up to seq N at T, or FAILED (red)."""
    state = status.get("state")
    if state == "ok":
        return (f'<div class="banner ok">Whole chain verified up to entry '
                f'{count(status["seq"])} at {esc(status["at"])}: every entry\'s hash, every '
                f"balance and the signed head check out.</div>")
    if state == "failed":
        return (f'<div class="banner bad">Chain verification FAILED (checked at '
                f'{esc(status.get("at"))}): {esc(status.get("message"))}</div>')
    return ('<div class="banner wait">Verifying the whole chain… (this runs in the '
            "background; reload the page to see the result)</div>")


def _head_table(head: dict[str, Any], status: dict[str, Any]) -> str:
    sig = ('<span class="ok">valid</span>' if head["signature_ok"] else
           '<span class="bad">NOT VALID for this public key</span>')
    rows = [("Last entry number (seq)", count(head["seq"])),
            ("Last entry's hash", f'<span class="hash">{esc(head["hash"])}</span>'),
            ("Signature of this head", sig),
            ("Public key used", esc(head["key_source"])),
            ("Key fingerprint (SHA-256)", f'<span class="hash">{esc(head["fingerprint"])}'
                                          "</span>"),
            ("Checks the public key cannot do", esc(", ".join(status.get("not_checked", ()))
                                                    or "none"))]
    return table(("Signed head", "Value"), rows)


def overview(head: dict[str, Any], status: dict[str, Any], domains: list[dict[str, Any]]
             ) -> str:
    """The overview: verification, the signed head, and one row per policy domain."""
    rows = [(link(d["domain"], "/releases", domain=d["domain"]),
             esc(GUARANTEES.get(d["notion"], d["notion"])),
             amount(d["cap"], unit_of(d["notion"], d["w"])), esc(d["units"]),
             count(d["accounts"]), amount(d["spent_median"], unit_of(d["notion"], d["w"])),
             amount(d["spent_max"], unit_of(d["notion"], d["w"])),
             count(d["near_cap"]), count(d["above_cap"]), count(d["releases"]),
             link(count(d["denials"]), "/denials", domain=d["domain"]))
            for d in domains]
    return (verification_banner(status) +
            "<h2>Signed head</h2><p class=\"note\">The ledger is a chain of entries, each "
            "sealed with the hash of the one before; its last entry (the head) is signed "
            "with the operator's key. Keep the seq and hash below to check later that "
            "nothing before it was changed (see “Since a checkpoint”).</p>" +
            _head_table(head, status) +
            "<h2>Privacy budget per domain</h2><p class=\"note\">An account is one user "
            "in one domain. Each domain caps the privacy loss (ε or ρ: smaller is more "
            "private) a user may take on over all releases. “Spent” is what the account has "
            "used of its cap; “near cap” counts accounts at 90 % or more of the cap, "
            "“above cap” those above a cap lowered after they spent.</p>" +
            table(("Domain", "Guarantee", "Cap per user", "Data units", "Accounts",
                   "Spent: median", "Spent: largest", "Near cap", "Above cap", "Releases",
                   "Denied requests"), rows, numeric=(2, 4, 5, 6, 7, 8, 9, 10),
                  empty="The ledger has no domains yet."))


def _entry_row(e: dict[str, Any], notions: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    unit = _unit(notions, e["domain"])
    kind = ENTRY_KINDS.get(e["kind"], e["kind"])
    why = (esc(DENIAL_CAUSES.get(e["cause"], "")) + f' <span class="note">({esc(e["reason"])})'
           "</span>") if e["kind"] == "deny" else ""
    return (count(e["seq"]), when(e["created_at"]), link(e["release_id"], "/release",
                                                        id=e["release_id"]),
            esc(e["domain"]), esc(e["stream_id"]),
            f'<span class="bad">{esc(kind)}</span>' if e["kind"] == "deny" else esc(kind),
            amount(e["amount"], unit), amount(e["balance"], unit), amount(e["cap"], unit), why)


def user(user_id: str, data: dict[str, Any], notions: dict[str, dict[str, Any]],
         offset: int) -> str:
    """One user's balances per domain and their entries (charges and denials), paged."""
    bal = [(esc(b["domain"]), esc(b["stream_id"]), amount(b["spent"], _unit(notions, b["domain"])),
            amount(b["cap"], _unit(notions, b["domain"])),
            amount(b["remaining"], _unit(notions, b["domain"]))) for b in data["balances"]]
    entries, nav = pager(data["entries"], offset, "/user", id=user_id)
    head = f"<h2>User {esc(user_id)}</h2>"
    if not data["balances"] and not entries:
        return head + '<p class="bad">No entry of the ledger names this user.</p>'
    return (head + "<h3>Budget per domain</h3>" +
            table(("Domain", "Stream", "Spent", "Cap", "Remaining"), bal, numeric=(2, 3, 4),
                  empty="No account (the user was only ever denied).") +
            "<h3>Charges and denials, oldest first</h3><p class=\"note\">Each row is one "
            "entry of the chain; the release link shows everything that release did.</p>" +
            table(("Entry", "Time", "Release", "Domain", "Stream", "What", "Amount",
                   "Spent after", "Cap then", "Why denied"),
                  (_entry_row(e, notions) for e in entries), numeric=(0, 6, 7, 8)) + nav)


def releases(rows: list[dict[str, Any]], offset: int, params: dict[str, str | None]) -> str:
    """The releases list (newest first) with its domain and date filters, paged."""
    shown, nav = pager(rows, offset, "/releases", **params)
    body = [(link(r["release_id"], "/release", id=r["release_id"]), esc(r["domain"]),
             esc(r["mechanism"]), when(r["first_at"]), count(r["admitted"]),
             link(count(r["denied"]), "/denials", release=r["release_id"], domain=r["domain"])
             if r["denied"] else "0") for r in shown]
    return ("<h2>Releases</h2>" + _list_filters("/releases", params) +
            table(("Release", "Domain", "Mechanism", "Started", "Users admitted",
                   "Users denied"), body, numeric=(4, 5),
                  empty="No release matches these filters.") + nav)


def _list_filters(path: str, params: dict[str, str | None], reason: bool = False) -> str:
    fields = [("domain", "Domain", params.get("domain")),
              ("since", "From (date, UTC)", params.get("since")),
              ("until", "Before (date, UTC)", params.get("until"))]
    if reason:
        fields.append(("reason", "Reason starts with", params.get("reason")))
    hidden = {"release": params["release"]} if params.get("release") else None
    return (filter_form(path, fields, hidden) +
            '<p class="note">Dates as YYYY-MM-DD (or a full ISO time); “from” is '
            "included, “before” is not.</p>")
