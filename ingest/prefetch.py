"""Read ahead: the next blocks of an input are made by a thread while this one is used.

Two such threads work one behind the other (`ingest.pipeline`): one where
DuckDB scans, converts and (for an unsorted input) sorts the rows, one where
the block before is validated and turned into users (numpy, pyarrow compute,
pandera), while the caller uses the users of the block before that (a
release stages them: `files.staging.WriteBehind`); DuckDB, numpy and pyarrow
release the GIL, so the threads use both cores.
The blocks arrive in the order the reader makes them, so users, problems,
fingerprints and staged bytes are those of the reader alone, and the reader
runs in a copy of the caller's context (`contextvars`: numpy's error state,
Prefect's run context), so it warns and logs as the caller would; an
exception of the reader (`NeedsSpill`, `ValidationError`, a bug) is raised
where the reader raised it, after the blocks it yielded before. At most
`DEPTH` blocks wait per thread (memory: a block is whole users of about
``batch_rows`` rows; its users, converted, about as much again).
"""

from __future__ import annotations

import contextvars
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


def prefetched(items: Generator[T, None, None], depth: int = DEPTH,
               name: str = "privpipe-ingest-read") -> Generator[T, None, None]:
    """The items of the generator `items`, made by a background thread up to `depth` ahead.

    The thread is called `name`. An exception of `items` (its generator
    finished, its ``finally`` clauses run in that thread) is raised here, the
    same object, after the items yielded before it.

    Yields the same items in the same order and raises the same exception at
    the same point as iterating `items` directly. When the caller stops early
    (closes this iterator, or an exception leaves its loop), the reader thread
    is stopped at its next item and joined, then `items` is closed in the
    caller's thread (its ``finally`` clauses run there, before the source
    they read is closed by the caller).
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    context = contextvars.copy_context()  # numpy's errstate, Prefect's run context
    reader = threading.Thread(target=context.run, args=(_produce, items, q, stop), daemon=True,
                              name=name)
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
