"""A real browser for the audit page's tests: headless Chromium, and the server in a subprocess.

Chromium renders each page (``--dump-dom``: the DOM after parsing, as a
browser shows it; ``--screenshot``), so what a test reads is what an auditor
sees. A test follows links by reading their ``href`` from the rendered DOM.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALL = "apt-get update -qq && apt-get install -y -qq chromium"


def chromium() -> str:
    """The Chromium binary; fails (never skips) with the command that installs it."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists()
                                        else None)
    if path is None:
        raise AssertionError(f"chromium is not installed; the audit page's browser test needs "
                             f"it: run `{INSTALL}` (the Makefile's test target does)")
    return path


def _browser_args(profile: Path) -> list[str]:
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
            "--no-first-run", f"--user-data-dir={profile}"]


def dump_dom(url: str, profile: Path) -> str:
    """The page at `url` as Chromium renders it (the serialized DOM)."""
    out = subprocess.run([*_browser_args(profile), "--dump-dom", url], capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout


def screenshot(url: str, png: Path, profile: Path, size: str = "1280,1400") -> float:
    """Save a screenshot of `url`; returns the browser's wall time for load + render (s)."""
    t0 = time.perf_counter()
    subprocess.run([*_browser_args(profile), f"--window-size={size}",
                    f"--screenshot={png}", url], capture_output=True, timeout=120, check=True)
    return time.perf_counter() - t0


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`privpipe audit serve` in a subprocess on a free loopback port."""

    def __init__(self, ledger: Path, public_key: Path | None = None,
                 extra: tuple[str, ...] = ()):
        """Start the server (with `extra` options) and wait until it answers."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "flows.cli", "audit", "serve", "--ledger", str(ledger),
                "--port", str(self.port)]
        if public_key is not None:
            args += ["--public-key", str(public_key)]
        args += list(extra)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited: {self.proc.stdout.read()}")
            try:
                urllib.request.urlopen(self.base + "/policy", timeout=5).close()
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise AssertionError("the server did not answer within 120 s")

    def wait_verified(self, timeout: float = 300, until: str | None = None) -> str:
        """Wait until the overview no longer says "Verifying" (or shows `until`); its HTML."""
        deadline = time.monotonic() + timeout
        while True:
            body = self.get("/")[1]
            done = until in body if until else "Verifying the whole chain" not in body
            if done or time.monotonic() > deadline:
                return body
            time.sleep(0.5)

    def get(self, path: str) -> tuple[int, str, float]:
        """GET `path`: status, body and the server's own time for it (ms, from its header)."""
        try:
            with urllib.request.urlopen(self.base + path, timeout=60) as r:
                return r.status, r.read().decode(), float(r.headers["X-Server-Time-Ms"])
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(), float(err.headers.get("X-Server-Time-Ms") or 0)

    def stop(self) -> None:
        """Stop the server (its own process only)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


@dataclass
class Dom:
    """What a rendered page shows: its text, links (text, href), tables and red (bad) texts."""

    text: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)

    def link(self, text: str) -> str:
        """The href of the first link whose text is `text`."""
        return next(h for t, h in self.links if t == text)

    def rows(self, index: int) -> list[dict[str, str]]:
        """Table `index` as row dicts keyed by its header."""
        t = self.tables[index]
        return [dict(zip(t[0], r, strict=True)) for r in t[1:]]

    def table_with(self, header: str) -> list[dict[str, str]]:
        """The first table that has the column `header`."""
        return next(self.rows(i) for i, t in enumerate(self.tables) if t and header in t[0])


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.dom = Dom()
        self._text: list[str] = []
        self._href: str | None = None
        self._link: list[str] = []
        self._cell: list[str] | None = None
        self._bad: list[str] | None = None
        self._bad_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.dom.tags.append(tag)
        if tag == "a":
            self._href, self._link = a.get("href"), []
        elif tag == "table":
            self.dom.tables.append([])
        elif tag == "tr":
            self.dom.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        if "bad" in (a.get("class") or "").split():
            self._bad, self._bad_depth = [], 1
        elif self._bad is not None:
            self._bad_depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.dom.links.append((" ".join("".join(self._link).split()), self._href))
            self._href = None
        elif tag in ("td", "th") and self._cell is not None:
            self.dom.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        if self._bad is not None:
            self._bad_depth -= 1
            if self._bad_depth == 0:
                self.dom.bad.append(" ".join("".join(self._bad).split()))
                self._bad = None

    def handle_data(self, data: str) -> None:
        if self.lasttag in ("style", "title") and not data.strip().startswith(("Privacy", "<")):
            if self.lasttag == "style":
                return
        self._text.append(data)
        for buf in (self._link if self._href is not None else None, self._cell, self._bad):
            if buf is not None:
                buf.append(data)


def parse(html: str) -> Dom:
    """Read a rendered page."""
    r = _Reader()
    r.feed(html)
    r.close()
    r.dom.text = " ".join(" ".join(r._text).split())
    return r.dom
