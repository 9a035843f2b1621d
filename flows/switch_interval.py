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
restores what was there before (`flows.process_setting`).
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager

from flows.process_setting import ProcessSetting

__all__ = ["CHUNK_SWITCH_INTERVAL", "short_switch_interval"]

#: The switch interval (seconds) while chunk tasks run (CPython's default is 0.005).
CHUNK_SWITCH_INTERVAL = 0.0005

_INTERVAL: ProcessSetting[float] = ProcessSetting(
    sys.getswitchinterval, sys.setswitchinterval,
    lambda found: min(CHUNK_SWITCH_INTERVAL, found))


def short_switch_interval() -> AbstractContextManager[None]:
    """Run the block with a switch interval of at most `CHUNK_SWITCH_INTERVAL`, then restore it."""
    return _INTERVAL.held()
