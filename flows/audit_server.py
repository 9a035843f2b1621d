"""`privpipe audit serve`: the searchable, read-only audit web page (Starlette + uvicorn).

Read-only by construction: the ledger is opened as an auditor (no secret
key; DuckDB connections opened read-only, one short transaction per page,
none held between requests) and every route is GET (anything else gets 405).
Pages are plain server-rendered HTML; every view is a bookmarkable URL.
Binds 127.0.0.1 by default: to show it to others, put a reverse proxy with TLS
and authentication in front (docs/audit-web.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from flows.audit_watch import Watch
from ledger import audit_views as views
from ledger.errors import LedgerBusyError, LedgerOpenError
from ledger.filters import parse_time
from ledger.heads import PlainHead, head_from_dict, parse_expect_head
from reports import audit_pages as pages
from reports import audit_pages_more as more
from reports.audit_html import PAGE_SIZE, page
from schemas.errors import ParameterError

SERVER_TIME = "X-Server-Time-Ms"
"""Response header: how long the server took to build the page (milliseconds)."""


def _number(request: Request, name: str) -> int:
    text = request.query_params.get(name, "0")
    if not text.isdigit() or int(text) > 10**15:
        raise ParameterError(f"{name} must be a whole number")
    return int(text)


def _offset(request: Request) -> int:
    return _number(request, "offset")


def _list_params(request: Request, *names: str) -> dict[str, str | None]:
    return {n: (request.query_params.get(n) or "").strip() or None for n in names}


def _list_filter(params: dict[str, str | None]) -> views.ListFilter:
    """The list filter of a request's domain/since/until/reason (ParameterError: bad date)."""
    since, until = parse_time(params.get("since"), "From"), parse_time(params.get("until"),
                                                                       "Before")
    if since is not None and until is not None and since >= until:
        raise ParameterError("“From” must be before “Before”")
    return views.ListFilter(params.get("domain"), since, until, params.get("reason"))


def kept_head(text: str) -> tuple[int, str]:
    """A kept head from the form: ``SEQ:HASH`` or a checkpoint's JSON (never a file path)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise ParameterError("the pasted checkpoint is not JSON") from None
        head = head_from_dict(data.get("head", data) if isinstance(data, dict) else data,
                              "the pasted checkpoint")
        return head.seq, head.hash
    if ":" not in text:
        raise ParameterError("give the kept head as SEQ:HASH or paste the checkpoint's JSON")
    _, parsed = parse_expect_head(text)
    if not isinstance(parsed, PlainHead):  # unreachable: "N:HEX" never names a file
        raise ParameterError("give the kept head as SEQ:HASH")
    return parsed.seq, parsed.hash


class AuditSite:
    """The pages of one ledger; each handler reads in one short read-only transaction."""

    def __init__(self, watch: Watch):
        """Serve the ledger `watch` reads (and verifies in the background)."""
        self.watch = watch
        self.reader = watch.reader
        self.name = str(watch.ledger_path)
        watch.warmers.append(self.warm)

    def warm(self, head: tuple[int, str]) -> None:
        """Cache the overview, the releases, each newest release's facts, the reserve marks."""
        self.watch.cached(("overview",), head, lambda: self.reader.read(views.overview))
        rows = self._releases(head)
        self._marks(head)
        for release_id in dict.fromkeys(r["release_id"] for r in rows[:PAGE_SIZE]):
            self._release(head, release_id)

    def _release(self, head: tuple[int, str], release_id: str) -> dict[str, Any]:
        return self.watch.cached(("release", release_id), head, lambda: self.reader.read(
            lambda con: views.release(con, release_id)))

    def _marks(self, head: tuple[int, str]) -> dict[str, Any]:
        return self.watch.cached(("marks",), head, lambda: self.reader.read(views.marks))

    def _releases(self, head: tuple[int, str]) -> list[dict[str, Any]]:
        return self.watch.cached(("releases",), head, lambda: self.reader.read(views.releases))

    def _notions(self, head: tuple[int, str]) -> dict[str, dict[str, Any]]:
        return self.watch.cached(("notions",), head, lambda: self.reader.read(
            views.domain_notions))

    def overview(self, request: Request) -> tuple[str, str]:
        """Signed head, verification status and per-domain figures."""
        head = self.reader.read(views.head)
        domains = self.watch.cached(("overview",), head,
                                    lambda: self.reader.read(views.overview))
        return "Overview", pages.overview(self.watch.signed_head(), self.watch.status(),
                                          domains)

    def user(self, request: Request) -> tuple[str, str]:
        """One user's balances, charges and denials."""
        user_id = request.query_params.get("id", "")
        if not user_id:
            return "User lookup", more.error_page("type a user id in “Look up a user”")
        offset = _offset(request)
        head, data = self.reader.read(lambda con: (views.head(con), views.user(
            con, user_id, PAGE_SIZE, offset)))
        return f"user {user_id}", pages.user(user_id, data, self._notions(head), offset)

    def releases(self, request: Request) -> tuple[str, str]:
        """The releases list with domain and date filters."""
        params = _list_params(request, "domain", "since", "until")
        flt, offset = _list_filter(params), _offset(request)
        rows = views.select_releases(self._releases(self.reader.read(views.head)), flt)
        return "Releases", pages.releases(rows[offset:offset + PAGE_SIZE + 1], offset, params)

    def release(self, request: Request) -> tuple[str, str]:
        """One release: facts, charge spread, users (paged by entry number: ``after``)."""
        release_id, offset = request.query_params.get("id", ""), _offset(request)
        after = _number(request, "after")
        head, users = self.reader.read(lambda con: (views.head(con), views.release_users(
            con, release_id, PAGE_SIZE, after)))
        data = {**self._release(head, release_id), "users": users}
        return f"release {release_id}", more.release(release_id, data, self._notions(head),
                                                    offset, after)

    def denials(self, request: Request) -> tuple[str, str]:
        """The denials with release, domain, date and reason filters."""
        params = _list_params(request, "release", "domain", "since", "until", "reason")
        flt, offset = _list_filter(params), _offset(request)
        head, rows = self.reader.read(lambda con: (views.head(con), views.denials(
            con, flt, PAGE_SIZE, offset, params["release"])))
        return "Denials", more.denials(rows, offset, params, self._notions(head))

    def policy(self, request: Request) -> tuple[str, str]:
        """Every policy change, with reasons and actors."""
        offset = _offset(request)
        head, rows = self.reader.read(lambda con: (views.head(con), views.policy(
            con, PAGE_SIZE, offset)))
        return "Policy history", more.policy(rows, offset, self._notions(head))

    def since(self, request: Request) -> tuple[str, str]:
        """What changed since a kept head (or the form asking for one)."""
        text = request.query_params.get("head", "").strip()
        if not text:
            return "Since a checkpoint", more.since_form(None, None)
        try:
            seq, digest = kept_head(text)
        except ParameterError as err:
            return "Since a checkpoint", more.since_form(text, str(err))
        head = self.reader.read(views.head)
        summary, marks = self._releases(head), self._marks(head)
        result = self.watch.cached(("since", seq, digest), head, lambda: self.reader.read(
            lambda con: views.since(con, seq, digest, summary, marks)))
        return "Since a checkpoint", more.since(result, text, self._notions(head))


def _endpoint(site: AuditSite, handler: Callable[[Request], tuple[str, str]]
              ) -> Callable[[Request], Any]:
    """A Starlette endpoint: run `handler` in a worker thread, time it, render the frame."""
    from starlette.concurrency import run_in_threadpool

    async def endpoint(request: Request) -> HTMLResponse:
        t0 = time.perf_counter()
        status = 200
        try:
            title, body = await run_in_threadpool(handler, request)
        except ParameterError as err:
            title, body, status = "Bad request", more.error_page(str(err)), 400
        except (LedgerBusyError, LedgerOpenError) as err:
            title, body, status = "Ledger unavailable", more.error_page(str(err)), 503
        resp = HTMLResponse(page(title, body, site.name), status_code=status)
        resp.headers[SERVER_TIME] = f"{(time.perf_counter() - t0) * 1000:.1f}"
        resp.headers["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = "no-store"
        return resp

    return endpoint


def make_app(watch: Watch) -> Starlette:
    """The audit site's Starlette application (GET routes only)."""
    site = AuditSite(watch)
    routes = [Route(path, _endpoint(site, handler), methods=["GET"])
              for path, handler in (("/", site.overview), ("/user", site.user),
                                    ("/releases", site.releases), ("/release", site.release),
                                    ("/denials", site.denials), ("/policy", site.policy),
                                    ("/since", site.since))]
    return Starlette(routes=routes)


def serve(ledger_path: Path, public_key: Path | None, host: str, port: int,
          reverify: float = 300.0) -> None:
    """Verify in the background and serve the audit pages until interrupted."""
    from flows.http_serve import serve_app

    watch = Watch(ledger_path, public_key, reverify=reverify)
    watch.start()
    serve_app(make_app(watch), host=host, port=port, on_stop=watch.stop, log_level="warning")
