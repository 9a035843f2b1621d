"""Fault injection points for crash tests and the soak script.

A release calls `fault_point(name)` at each step boundary. When the
environment variable PRIVPIPE_FAULT_AT equals `name`, the process either
raises `InjectedFault` (PRIVPIPE_FAULT_MODE=raise, the default) or kills
itself with SIGKILL (PRIVPIPE_FAULT_MODE=kill). Unset, it does nothing.
"""

from __future__ import annotations

import os
import signal

POINTS = ("after_ingest", "between_reserves", "after_reserve", "before_first_settle",
          "after_first_chunk", "after_settle", "between_merges", "after_outputs",
          "after_report", "after_manifest", "before_publish")


class InjectedFault(RuntimeError):
    """A deliberate crash requested by PRIVPIPE_FAULT_AT (tests only)."""


def fault_point(name: str) -> None:
    """Crash here if PRIVPIPE_FAULT_AT asks for it."""
    if os.environ.get("PRIVPIPE_FAULT_AT") != name:
        return
    if os.environ.get("PRIVPIPE_FAULT_MODE", "raise") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"fault injected at {name}")
