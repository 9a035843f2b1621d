"""Read ahead: the next blocks of an input are read by a thread while this one is validated.

DuckDB scans, converts and (for an unsorted input) sorts the rows while the
calling thread validates and stages the block before (numpy, pandera, Arrow
writes), so the two use both cores. The blocks arrive in the order the reader
makes them, so users, problems, fingerprints and staged bytes are those of
the reader alone; an exception of the reader (`NeedsSpill`, `ValidationError`)
is raised where the reader raised it, after the blocks it yielded before. At
most `DEPTH` blocks wait (memory: a block is whole users of about
``batch_rows`` rows).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar

T = TypeVar("T")

#: blocks read ahead of the one being validated
DEPTH = 1
_ITEM, _END, _ERROR = range(3)


def _put(q: queue.Queue, stop: threading.Event, entry: tuple[int, object]) -> bool:
    """Queue `entry` unless the consumer stopped; False once it has."""
    while not stop.is_set():
        try:
            q.put(entry, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _produce(items: Iterator[T], q: queue.Queue, stop: threading.Event) -> None:
    try:
        for item in items:
            if not _put(q, stop, (_ITEM, item)):
                return
    except BaseException as err:  # handed to the consumer, raised there
        _put(q, stop, (_ERROR, err))
        return
    _put(q, stop, (_END, None))


def prefetched(items: Generator[T, None, None], depth: int = DEPTH) -> Iterator[T]:
    """The items of the generator `items`, made by a background thread up to `depth` ahead.

    Yields the same items in the same order and raises the same exception at
    the same point as iterating `items` directly. When the caller stops early
    (closes this iterator, or an exception leaves its loop), the reader thread
    is stopped at its next item and joined, then `items` is closed in the
    caller's thread (its ``finally`` clauses run there, before the source
    they read is closed by the caller).
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    reader = threading.Thread(target=_produce, args=(items, q, stop), daemon=True,
                              name="privpipe-ingest-read")
    reader.start()
    try:
        while True:
            kind, value = q.get()
            if kind == _ITEM:
                yield value  # type: ignore[misc]
            elif kind == _END:
                return
            else:
                raise value  # type: ignore[misc]
    finally:
        stop.set()
        reader.join()
        items.close()
