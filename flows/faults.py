"""Fault injection points for crash tests and the soak script.

A release calls `fault_point(name)` at each step boundary. When the
environment variable PRIVPIPE_FAULT_AT equals `name`, the process either
raises `InjectedFault` (PRIVPIPE_FAULT_MODE=raise, the default), kills
itself with SIGKILL (PRIVPIPE_FAULT_MODE=kill), or pauses
(PRIVPIPE_FAULT_MODE=pause: it creates the file PRIVPIPE_FAULT_PAUSED and
waits until the file PRIVPIPE_FAULT_RESUME exists, so a test can act while a
release is held at that point). Unset, it does nothing.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from files.safe_files import write_file

POINTS = ("after_ingest", "between_reserves", "after_reserve", "before_first_settle",
          "after_first_chunk", "after_settle", "between_merges", "after_outputs",
          "after_report", "after_manifest", "before_publish")


class InjectedFault(RuntimeError):
    """A deliberate crash requested by PRIVPIPE_FAULT_AT (tests only)."""


def fault_point(name: str) -> None:
    """Crash here if PRIVPIPE_FAULT_AT asks for it."""
    if os.environ.get("PRIVPIPE_FAULT_AT") != name:
        return
    mode = os.environ.get("PRIVPIPE_FAULT_MODE", "raise")
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "pause":
        write_file(os.environ["PRIVPIPE_FAULT_PAUSED"], b"")
        while not Path(os.environ["PRIVPIPE_FAULT_RESUME"]).exists():
            time.sleep(0.05)
        return
    raise InjectedFault(f"fault injected at {name}")
