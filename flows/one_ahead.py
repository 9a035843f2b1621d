"""One item ahead: a generator's next item is made on a thread while the caller uses this one.

A stream release plans its users' continuations group by group and reserves
each group's requests in one ledger transaction (`flows.release_stages.reserve`).
Planning a group is mostly keyed hashing of the staged values (hashlib releases
the GIL) and Python; reserving one is mostly DuckDB (which releases it). So the
next group is planned while this one is reserved, on both cores.

Unlike `ingest.prefetch.prefetched` (a queue, items made up to two ahead), the
thread makes the next item only when the caller takes this one: at most two
items exist at once, the caller's and the one being made, so a release holds
at most two groups' plans and requests.
"""

from __future__ import annotations

import contextvars
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import TypeVar

T = TypeVar("T")

_END = object()


def one_ahead(items: Generator[T, None, None], name: str) -> Generator[T, None, None]:
    """The items of `items` in order, each next one made on a thread named `name`.

    The thread runs in a copy of the caller's context (Prefect's run context,
    numpy's error state), one item at a time. An exception of `items` is raised
    here, the same object, after the items made before it. When the caller
    stops early (closes this generator, or an exception leaves its loop), the
    item being made is finished and dropped, the thread is joined, and `items`
    is closed in the caller's thread: nothing of `items` runs after this
    generator has returned.
    """
    context = contextvars.copy_context()
    with ThreadPoolExecutor(1, thread_name_prefix=name) as pool:
        making = pool.submit(context.run, next, items, _END)
        try:
            while (item := making.result()) is not _END:
                making = pool.submit(context.run, next, items, _END)
                yield item  # type: ignore[misc]
        finally:
            futures_wait([making])  # its exception, if any, is dropped with the item
            items.close()
