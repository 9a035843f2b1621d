"""A short interpreter switch interval while a release's chunk tasks run in its threads.

The chunk tasks run on the task runner's threads beside the flow thread (which
loads and submits the next chunks), the collector (which checks and encodes
finished ones) and Prefect's client. A stream chunk task releases the GIL for
every segment's keystream fill (numpy's ``Generator.random`` runs without it),
then waits to take it back; with CPython's default switch interval (5 ms) it
can wait that long behind a thread running Python code, and it makes hundreds
of such calls per chunk: a chunk task that takes 44 ms alone took 139 ms beside
one busy Python thread, 75 ms with a 0.5 ms interval (`benchmarks/streams/gil_convoy.py`).
The interval only decides how soon a thread that waits for the GIL is given it;
no result depends on it (the draws are keyed per segment, whatever the order).

`sys.setswitchinterval` is process-wide: nested or concurrent releases in one
process share the setting, the first to enter sets it and the last to leave
restores what was there before.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CHUNK_SWITCH_INTERVAL", "short_switch_interval"]

#: The switch interval (seconds) while chunk tasks run (CPython's default is 0.005).
CHUNK_SWITCH_INTERVAL = 0.0005

_lock = threading.Lock()
_holders = 0
_saved: float | None = None


@contextmanager
def short_switch_interval(seconds: float = CHUNK_SWITCH_INTERVAL) -> Iterator[None]:
    """Run the block with the interpreter's switch interval at most `seconds`, then restore it."""
    global _holders, _saved
    with _lock:
        if _holders == 0:
            _saved = sys.getswitchinterval()
            sys.setswitchinterval(min(seconds, _saved))
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _saved is not None:
                sys.setswitchinterval(_saved)
                _saved = None
