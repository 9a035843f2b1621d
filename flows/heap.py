"""The garbage collector while a release runs: young collections rarer, the start-up heap frozen.

CPython's cyclic collector runs a young collection every 700 net allocations
and a full one whenever the survivors grow by a quarter; a full collection
walks every tracked object of the process. A release allocates millions of
short-lived objects (plans, requests, claims, payloads) on top of a heap of
about a million long-lived ones (Prefect, pandas, pandera, DuckDB's and our
modules), so at 5 x 10^4 stream users the collector took 6.3 s of the flow
thread (33 full collections of 0.1-0.46 s each, in the continuation plan and
the ledger's reserve), 0.95 s with this module's settings (no full
collection): measured with `gc.callbacks` in the release process of
`benchmarks/floor.py` (docs/scale.md).

`release_heap` freezes the heap as it is when the release starts (`gc.freeze`:
those objects are never walked again until the release ends) and raises the
young threshold to `YOUNG` allocations, the older ones to `OLDER`
collections, then restores both. Garbage is still freed as before by reference
counting; only cycles wait longer. Releases running at once in one process
(threads of the Python API) share one setting: the first to start sets it, the
last to end restores it. The settings change when memory is reclaimed, never
what a release computes or writes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: net allocations between two young collections during a release (CPython: 700)
YOUNG = 20_000
#: collections of the generation below between two of the next one (CPython: 10, 10)
OLDER = 20

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] = gc.get_threshold()


@contextmanager
def release_heap() -> Iterator[None]:
    """Run the body with the start-up heap frozen and rarer collections (see the module)."""
    global _running, _saved
    with _lock:
        if _running == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(YOUNG, OLDER, OLDER)
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()
