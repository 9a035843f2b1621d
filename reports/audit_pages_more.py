"""The audit web page's drill-down pages: a release, the denials, policy history, since a head."""

from __future__ import annotations

import json
from typing import Any

from ledger.queries import DENIAL_CAUSES
from reports.audit_html import (
    PAGE_SIZE,
    amount,
    count,
    esc,
    filter_form,
    link,
    pager,
    table,
    when,
)
from reports.audit_pages import _list_filters, _unit


def _parameters(text: str | None) -> str:
    """A release's recorded parameters as “name = value” lines."""
    if not text:
        return ""
    try:
        data = json.loads(text)
    except ValueError:
        return esc(text)
    if not isinstance(data, dict):
        return esc(text)
    return "<br>".join(f"{esc(k)} = {esc(v)}" for k, v in sorted(data.items()))


def _keyset_pager(rows: list[dict[str, Any]], offset: int, after: int, path: str,
                  **params: Any) -> tuple[list[dict[str, Any]], str]:
    """Rows of a page paged by entry number: a First page link, and Next after the last row."""
    shown = rows[:PAGE_SIZE]
    parts = [link("← First page", path, **params)] if after else []
    if shown:
        parts.append(f"<span>Rows {offset + 1:,}–{offset + len(shown):,}</span>")
    if len(rows) > PAGE_SIZE:
        parts.append(link("Next page →", path, **params, after=shown[-1]["seq"],
                          offset=offset + PAGE_SIZE))
    return shown, f'<div class="pager">{" ".join(parts)}</div>'


def release(release_id: str, data: dict[str, Any], notions: dict[str, dict[str, Any]],
            offset: int, after: int) -> str:
    """One release: mechanism and parameters, users admitted and denied, charge spread, users."""
    if not data["domains"]:
        return f"<h2>Release {esc(release_id)}</h2><p class=\"bad\">No such release.</p>"
    spread = {s["domain"]: s for s in data["spread"]}
    facts = [(esc(d["domain"]), esc(d["mechanism"]), _parameters(d["parameters"]),
              when(d["first_at"]), esc(d["actors"]), count(d["admitted"]),
              link(count(d["denied"]), "/denials", release=release_id, domain=d["domain"])
              if d["denied"] else "0") for d in data["domains"]]
    charges = []
    for d in data["domains"]:
        s, unit = spread.get(d["domain"]), _unit(notions, d["domain"])
        if s:
            charges.append((esc(d["domain"]), count(s["accounts"]), amount(s["net_min"], unit),
                            amount(s["net_median"], unit), amount(s["net_max"], unit)))
    users, nav = _keyset_pager(data["users"], offset, after, "/release", id=release_id)
    rows = [(count(u["seq"]), link(u["user_id"], "/user", id=u["user_id"]), esc(u["domain"]),
             esc(u["stream_id"]), '<span class="bad">denied</span>' if u["denied"]
             else "admitted", amount(u["net"], _unit(notions, u["domain"]))) for u in users]
    state = data["state"] or "no manifest (charged through the ledger only)"
    return (f"<h2>Release {esc(release_id)}</h2><p>State: <b>{esc(state)}</b></p>" +
            table(("Domain", "Mechanism", "Parameters", "Started", "Run by",
                   "Users admitted", "Users denied"), facts, numeric=(5, 6)) +
            "<h3>What it charged each account (after refunds)</h3><p class=\"note\">Each "
            "amount is one account's privacy loss; a sum over accounts is no one's loss, so "
            "none is shown.</p>" +
            table(("Domain", "Accounts charged", "Smallest", "Median", "Largest"),
                  charges, numeric=(1, 2, 3, 4), empty="Nothing was charged.") +
            "<h3>Users of this release, in the order they were decided</h3>" +
            table(("Entry", "User", "Domain", "Stream", "Decision", "Net charge"), rows,
                  numeric=(0, 5)) + nav)


def denials(rows: list[dict[str, Any]], offset: int, params: dict[str, str | None],
            notions: dict[str, dict[str, Any]]) -> str:
    """The denials (newest first), narrowed by release, domain, dates and reason, paged."""
    shown, nav = pager(rows, offset, "/denials", **params)
    body = [(count(r["seq"]), when(r["created_at"]), link(r["user_id"], "/user", id=r["user_id"]),
             link(r["release_id"], "/release", id=r["release_id"]), esc(r["domain"]),
             amount(r["requested"], _unit(notions, r["domain"])),
             amount(r["spent"], _unit(notions, r["domain"])),
             amount(r["cap"], _unit(notions, r["domain"])),
             esc(DENIAL_CAUSES.get(r["cause"], "")) + f' <span class="note">('
             f'{esc(r["reason"])})</span>') for r in shown]
    title = "<h2>Denials</h2>"
    if params.get("release"):
        rel = params["release"]
        title = f"<h2>Denials of release {link(rel, '/release', id=rel)}</h2>"
    return (title + '<p class="note">A denied request charged nothing: the user’s spent '
            "plus the request would have exceeded the cap.</p>" +
            _list_filters("/denials", params, reason=True) +
            table(("Entry", "Time", "User", "Release", "Domain", "Requested", "Spent before",
                   "Cap", "Why"), body, numeric=(0, 5, 6, 7),
                  empty="No denial matches these filters.") + nav)


def policy(rows: list[dict[str, Any]], offset: int, notions: dict[str, dict[str, Any]]) -> str:
    """Every policy change, newest first: when, who, domain, cap before and after, why."""
    shown, nav = pager(rows, offset, "/policy")
    body = [(count(r["seq"]), when(r["created_at"]), esc(r["actor"]), esc(r["domain"]),
             esc(r["summary"]), amount(r["before"], _unit(notions, r["domain"]))
             if r["change"] != "create" else "", amount(r["after"], _unit(notions, r["domain"])),
             esc(r["why"]) or '<span class="note">(no reason given)</span>') for r in shown]
    return ("<h2>Policy history</h2><p class=\"note\">Every change of a domain’s rules is an "
            "entry of the chain, with who made it and the reason they gave.</p>" +
            table(("Entry", "Time", "Changed by", "Domain", "Change", "Cap before",
                   "Cap after", "Reason given"), body, numeric=(0, 5, 6),
                  empty="No policy change recorded.") + nav)


def since_form(text: str | None, error: str | None) -> str:
    """The form asking for a kept head: SEQ:HASH or a checkpoint file's JSON pasted."""
    err = f'<p class="bad">{esc(error)}</p>' if error else ""
    return ("<h2>What changed since a checkpoint</h2><p class=\"note\">Paste the head you "
            "kept at your last sign-off, as <b>SEQ:HASH</b> (from this page or `privpipe "
            "ledger checkpoint`) or the whole checkpoint file's JSON. The page first checks "
            "that the chain still contains it, then lists what was added after it.</p>" + err +
            filter_form("/since", [("head", "Kept head", text)]))


def since(result: dict[str, Any], text: str, notions: dict[str, dict[str, Any]]) -> str:
    """The since-checkpoint diff; a head the chain does not contain is shown in red."""
    form = since_form(text, None)
    if not result["in_chain"]:
        found = ("the chain has no entry with that number" if result["found"] is None else
                 f"entry {result['seq']:,} has another hash: {result['found']}")
        return form + (f'<div class="banner bad">The kept head {count(result["seq"])}:'
                       f'{esc(result["hash"])} is NOT in the chain ({esc(found)}). The history '
                       "you signed off was changed or rolled back.</div>")
    rel = [(link(r["release_id"], "/release", id=r["release_id"]), esc(r["domain"]),
            when(r["first_at"]), count(r["users_admitted"]), count(r["users_denied"]))
           for r in result["releases"]]
    chg = [(esc(c["domain"]), count(c["accounts_charged"]),
            amount(c["increase"], _unit(notions, c["domain"]))) for c in result["charges"]]
    den = [(link(d["domain"], "/denials", domain=d["domain"]), count(d["denied_requests"]),
            count(d["users_denied"])) for d in result["denials"]]
    pol = [(count(p["seq"]), when(p["created_at"]), esc(p["actor"]), esc(p["summary"]),
            esc(p["why"])) for p in result["policy"]]
    return (form + f'<div class="banner ok">The kept head (entry {count(result["seq"])}) is in '
            "the chain: nothing before it was changed.</div>"
            "<h3>Releases since</h3>" + table(("Release", "Domain", "Started", "Users admitted",
                                              "Users denied"), rel, numeric=(3, 4)) +
            "<h3>Charges since, per domain</h3>" +
            table(("Domain", "Accounts charged", "Largest rise of one account"), chg,
                  numeric=(1, 2)) +
            "<h3>Denials since</h3>" + table(("Domain", "Denied requests", "Users denied"), den,
                                             numeric=(1, 2)) +
            "<h3>Policy changes since</h3>" + table(("Entry", "Time", "Changed by", "Change",
                                                     "Reason given"), pol, numeric=(0,)))


def error_page(message: str) -> str:
    """The body of a page whose request could not be answered (bad filter, busy ledger)."""
    return f'<h2>Cannot show this page</h2><p class="bad">{esc(message)}</p>'

