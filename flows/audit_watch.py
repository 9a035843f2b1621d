"""The audit server's background work: whole-chain verification and summaries, per head.

Full verification of a 10^6-user ledger takes seconds (about 16 s for 2 x
10^6 entries), and it is one read transaction that a writer waits for, so it
runs in one background thread: once at start, then again when the chain head
has moved, at most once every `reverify` seconds (the page says up to which
entry and when it last verified). The head is checked every `poll` seconds;
when it moved, the slow summaries (`warmers`: the overview's figures, the
releases, the marks) are computed at once and cached by head, so pages read
them from memory.
Nothing here writes to the ledger: the ledger handle is an auditor's
(read-only connection, no secret key).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger import Ledger, signing
from ledger import audit_views as views


def key_source(ledger_path: Path, public_key: Path | None) -> str:
    """Where the public key that checks the signed head comes from, in words."""
    if public_key is not None:
        return f"the public key file you gave ({public_key})"
    pub = signing.public_key_path(ledger_path)
    if pub.exists():
        return f"the public key file beside the ledger ({pub}); keep your own copy"
    return ("the ledger's own key (NOT independent: anyone who can edit the ledger can "
            "replace it; start the server with --public-key)")


class Watch:
    """Verification status and cached summaries of one ledger, kept by a background thread."""

    def __init__(self, ledger_path: Path, public_key: Path | None, poll: float = 2.0,
                 reverify: float = 300.0):
        """Open the ledger as an auditor (read-only) and prepare the reader; not started yet."""
        self.ledger_path = Path(ledger_path)
        self.ledger = Ledger.open_auditor(self.ledger_path, public_key=public_key)
        self.reader = views.AuditReader(self.ledger_path)
        self.key_source = key_source(self.ledger_path, public_key)
        self.poll, self.reverify = poll, reverify
        self._lock = threading.Lock()
        self._status: dict[str, Any] = {"state": "verifying"}
        self._cache: dict[tuple[Any, ...], Any] = {}
        self.warmers: list[Callable[[tuple[int, str]], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-verify", daemon=True)

    def start(self) -> None:
        """Start the background verification."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the background thread to end and wait for it (at most one verification)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def status(self) -> dict[str, Any]:
        """The last verification's result (state: verifying, ok or failed)."""
        with self._lock:
            return dict(self._status)

    def cached(self, key: tuple[Any, ...], head: tuple[int, str],
               compute: Callable[[], Any]) -> Any:
        """`compute()` once per (key, head); older heads' entries are dropped."""
        with self._lock:
            hit = self._cache.get((*key, head))
        if hit is not None:
            return hit
        value = compute()
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[-1] == head}
            self._cache[(*key, head)] = value
        return value

    def signed_head(self) -> dict[str, Any]:
        """The signed head and whether its signature verifies with the public key."""
        h = self.ledger.head()
        ok = bool(h.public_key) and signing.head_signature_ok(
            bytes.fromhex(h.public_key), h.signature, h.ledger_id, h.schema_version, h.seq,
            h.hash, h.counter)
        return {"seq": h.seq, "hash": h.hash, "signature_ok": ok, "key_source": self.key_source,
                "fingerprint": h.key_fingerprint}

    def _verify_once(self, head: tuple[int, str]) -> None:
        rep = self.ledger.verify()
        at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        status = {"state": "ok" if rep.ok else "failed", "seq": head[0], "hash": head[1],
                  "at": at, "message": rep.message, "entries": rep.entries_checked,
                  "not_checked": tuple(rep.not_checked)}
        with self._lock:
            self._status = status

    def _run(self) -> None:
        warmed: tuple[int, str] | None = None
        verified: tuple[int, str] | None = None
        next_verify = 0.0
        while not self._stop.is_set():
            try:
                head = self.reader.read(views.head)
                if head != warmed:
                    for warm in self.warmers:  # summaries first: pages need them now
                        warm(head)
                    warmed = head
                if head != verified and time.monotonic() >= next_verify:
                    self._verify_once(head)
                    verified, next_verify = head, time.monotonic() + self.reverify
            except Exception as err:  # noqa: BLE001 - shown on the page, retried next poll
                with self._lock:
                    self._status = {"state": "failed", "at": datetime.now(UTC).strftime(
                        "%Y-%m-%d %H:%M:%S UTC"), "message": f"cannot verify: {err}"}
            self._stop.wait(self.poll)
