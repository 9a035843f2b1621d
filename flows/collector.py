"""Fewer garbage collections while a release runs (`fewer_collections`).

CPython's cyclic collector runs a young-generation pass every 700 container
allocations and, every so often, a full pass over every live object. A
release allocates millions of short-lived containers (per-user ids, tuples,
plans, requests, claims, Prefect's task states) in a process that already
holds a few hundred thousand long-lived ones (Prefect, pandas, pandera,
matplotlib), so each full pass costs 0.1 to 0.5 s. At CPython's default
thresholds a 10,000-user curve release spent about 1.1 CPU s (9 % of its
flow CPU) in the collector, 0.95 s of it in four full passes
(`benchmarks/flows/bench_flows.py`), and a 5 x 10^4-user stream release
6.3 s of its flow thread, 5.2 s in 33 full passes during the continuation
plan and the ledger's reserve (`benchmarks/floor.py`'s release process;
both measured with `gc.callbacks`).

Inside the block the young threshold is 50,000 allocations, which makes every
generation run about seventy times less often, and the heap found at the
start is frozen (`gc.freeze`): the start-up heap is never walked again until
the block ends. The same stream release then spends under 0.8 s collecting,
with no full pass (the process's seven ran at its start-up, before the
release). Every release runs in such a block (`flows.release._release`:
whatever process runs it, the CLI, a Prefect worker's flow-run process or a
Python caller), and the CLI's whole command too; the thresholds and the
freeze are undone when the last block ends. Memory is unchanged in practice:
reference counting still frees every object that is not in a cycle at once,
and what waits for the collector is the cycles made meanwhile. Nothing here
touches the release's data or its privacy: only when unreachable cycles are
freed.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

#: Collector thresholds while a release runs (CPython's defaults: 700, 10, 10).
RELEASE_THRESHOLDS = (50_000, 10, 10)

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with `RELEASE_THRESHOLDS` and the heap found frozen, then undo both.

    Process-wide (the collector has no per-thread setting); nested or
    concurrent blocks share one setting, and the thresholds in force before
    the first block are restored (and the heap unfrozen) when the last one
    ends, however it ends. Thresholds already higher than these (set by the
    caller) are kept. Also a decorator (``@fewer_collections()``).
    """
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(*(max(a, b) for a, b in zip(RELEASE_THRESHOLDS, _saved,
                                                          strict=True)))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                gc.unfreeze()
                _saved = None
