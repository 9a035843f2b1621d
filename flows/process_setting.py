"""A process-wide interpreter setting, changed while at least one block holds it.

The garbage collector's thresholds (`flows.collector`) and the thread switch
interval (`flows.switch_interval`) have no per-thread form: releases that run
at once in one process share them. The first block to enter saves what is in
force and sets the new value, the last to leave restores the saved one,
however it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

__all__ = ["ProcessSetting"]

T = TypeVar("T")


class ProcessSetting(Generic[T]):
    """`held()` blocks share one changed setting; the value found first is put back at the end.

    Args:
        get: reads the setting in force.
        put: sets it.
        choose: the value to hold, from the one in force when the first block enters.
    """

    def __init__(self, get: Callable[[], T], put: Callable[[T], object],
                 choose: Callable[[T], T]) -> None:
        self._get, self._put, self._choose = get, put, choose
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: T | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        """Run the block with the chosen value in force."""
        with self._lock:
            if self._holders == 0:
                self._saved = self._get()
                self._put(self._choose(self._saved))
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._saved is not None:
                    self._put(self._saved)
                    self._saved = None
