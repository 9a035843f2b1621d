"""The bounded window through which a release submits its chunks and settles them.

A release submits one mechanism task per chunk of users. `ChunkWindow` keeps at
most `in_flight` of them queued or running at once, so memory does not grow with
the number of users whatever the task runner, and takes their results in chunk
order. Finished chunks are settled together (and at the end) in batches that
grow with what is settled so far: SETTLE_BATCH at first, then as many as are
already settled, up to MAX_SETTLE_BATCH. Each ledger transaction has a fixed
cost that grows with the ledger (open, read the reservations, commit and
checkpoint): 50 batches of 2000 took 20 s for 10^5 users where one took 2.4 s.
A settlement only records the actual cost of budget already reserved, so a
crash between batches loses nothing.

A finished chunk is collected (its claimed costs checked, its outputs encoded
and appended) on one collector thread, in chunk order, while the flow thread
goes on submitting chunks and waiting for the next: the flow thread is never
the mechanism's bottleneck, and at most `in_flight` chunks wait to be
collected (memory stays bounded). A chunk joins a settle transaction only once
it and every chunk before it are collected; a failed collect is raised in the
flow thread at the next take, settle or drain, and the chunks after it are
neither collected nor settled (their reservations stay charged), as when a
collect fails in the flow thread itself.

The first settle transaction runs in the flow thread (the fault points around
it mark the release's first settlement); each later batch is settled on one
settle thread, in batch order, one at a time, while the flow thread goes on
submitting chunks: at 10^6 users a synchronous settle (about 2 s each) left
the chunk threads idle once the window had drained (benchmarks/results/floor.md,
session 5). A background settle waits for its batch's collects; if one fails,
or the ledger refuses the settle, the batch goes back to the unsettled ones and
the error is raised in the flow thread at the next settle or the final one, so
the chunks taken before a failure are still settled by `settle_unsettled`. A
crash loses nothing either way: a settlement only records the actual cost of
budget already reserved.

The window knows nothing of curves or streams: what a finished chunk's outputs
become is the `collect` callback's business, and the ledger call is `settle`'s.
It only orders, batches and frees (a settled chunk's costs are dropped), and
calls the fault points "before_first_settle" and "after_first_chunk" around the
release's first settlement (`flows.faults`).
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from flows import faults
from tasks.privatize import MechanismRunError

SETTLE_BATCH = 2000
"""The settlements of a release's first ledger transaction."""
MAX_SETTLE_BATCH = 10_000
"""The most settlements one ledger transaction of a release takes.

Settles after the first run beside the chunk tasks, so their transactions' memory adds
to the chunks': at 10^6 users 50,000 took the curve release to 2.09 GB and 20,000 the
stream release to 2.03 GB (benchmarks/results/floor.md); the extra transactions of a
smaller cap are hidden behind the chunks."""


class ChunkWindow:
    """At most `in_flight` chunk futures pending; results taken and settled in chunk order.

    Args:
        settle: records a batch of finished chunk results in the ledger (one
            transaction); it is given a new list each time.
        collect: takes a finished chunk's outputs (called once per chunk, in
            submission order, before the chunk joins a settle batch).
        in_flight: the most futures pending at once (at least 1).

    Every result is kept in `results` (in chunk order) for the post-processing;
    its `costs` are emptied once settled, so memory does not grow with users.
    A chunk that fails while `submit` takes it (`MechanismRunError`, e.g. a
    remote result that its local re-execution contradicts) is kept in `failed`:
    the caller submits nothing more, and `drain` raises it, so the release
    records the failure where it settles. `close` stops the collector thread
    (the caller calls it however the release ends, before it closes what
    `collect` writes to).
    """

    def __init__(self, settle: Callable[[list[Any]], None], collect: Callable[[Any], None], *,
                 in_flight: int) -> None:
        self._settle, self._collect, self._in_flight = settle, collect, in_flight
        self._pending: deque[Any] = deque()
        self._unsettled: list[Any] = []
        self.results: list[Any] = []
        self.settles = 0
        """Settle transactions made so far."""
        self.settled = 0
        """Settlements (cost records) made so far."""
        self.failed: MechanismRunError | None = None
        """The chunk failure met by `submit` (None: none); `drain` raises it."""
        self._collector = ThreadPoolExecutor(1, thread_name_prefix="privpipe-collect")
        self._collecting: deque[Future[None]] = deque()
        self._stopped = False  # a collect failed, or the window is closed: collect no more
        self._settler = ThreadPoolExecutor(1, thread_name_prefix="privpipe-settle")
        self._settling: Future[None] | None = None  # the batch being settled, if any

    def submit(self, future: Any) -> None:
        """Queue a chunk's future; take the oldest one if `in_flight` are now pending."""
        self._pending.append(future)
        if len(self._pending) >= self._in_flight and self.failed is None:
            try:
                self._take_oldest()
            except MechanismRunError as err:
                self.failed = err

    def drain(self) -> None:
        """Take and collect every pending chunk, in order (a failing chunk's error propagates)."""
        if self.failed is not None:
            raise self.failed
        while self._pending:
            self._take_oldest()
        self._wait_collected(0)

    def settle_unsettled(self) -> None:
        """Settle every taken but unsettled chunk in one transaction (none: nothing).

        Waits for the settle thread's batch, then until every chunk is collected;
        a failed background settle or collect is raised instead.
        """
        self._wait_settled()
        self._wait_collected(0)
        if not self._unsettled:
            return
        if self.settles == 0:
            faults.fault_point("before_first_settle")
        self._settle(list(self._unsettled))
        self.settles += 1
        self.settled += sum(len(r.costs) for r in self._unsettled)
        for r in self._unsettled:
            r.costs = []  # settled: free them (memory must not grow with users)
        self._unsettled.clear()
        if self.settles == 1:
            faults.fault_point("after_first_chunk")

    def close(self) -> None:
        """Stop collecting (chunks not yet collected never will be) and end both threads.

        Returns once no collect and no settle runs: what `collect` writes to may
        then be closed. A background settle's failure is not raised here (the
        release is already ending with `settle_unsettled`'s result or another error).
        """
        self._stopped = True
        self._collector.shutdown(wait=True)
        self._settler.shutdown(wait=True)

    def _settle_in_background(self) -> None:
        """Hand the unsettled chunks to the settle thread (after the previous batch is done)."""
        self._wait_settled()
        if self._stopped:  # a collect failed: the flow thread raises it, `_fail` settles
            return
        batch, collects = list(self._unsettled), list(self._collecting)
        self._unsettled.clear()
        counted = sum(len(r.costs) for r in batch)
        self.settles += 1
        self.settled += counted

        def settle_batch() -> None:
            for done in collects:  # the batch's chunks and every one before them
                if done.exception() is not None:  # raised by the flow thread's own wait
                    raise _BatchNotSettled(batch, counted)
            try:
                self._settle(batch)
            except BaseException as err:
                raise _BatchNotSettled(batch, counted) from err
            for r in batch:
                r.costs = []  # settled: free them (memory must not grow with users)

        self._settling = self._settler.submit(contextvars.copy_context().run, settle_batch)

    def _wait_settled(self) -> None:
        """Wait for the background batch; if it failed, put it back unsettled and raise why.

        A batch stopped by a failed collect is put back without raising: the flow
        thread raises the collect's error where it waits for collects, as without
        a settle thread.
        """
        if self._settling is None:
            return
        running, self._settling = self._settling, None
        try:
            running.result()
        except _BatchNotSettled as failed:
            self.settles -= 1
            self.settled -= failed.counted
            self._unsettled[:0] = failed.batch
            if failed.__cause__ is not None:
                raise failed.__cause__ from None

    def _collect_in_order(self, res: Any) -> None:
        """Collect one chunk on the collector thread; after a failure, drop its costs instead."""
        if self._stopped:
            res.costs = []  # neither collected nor settled: its reservation stays charged
            return
        try:
            self._collect(res)
        except BaseException:
            self._stopped = True
            raise

    def _wait_collected(self, most: int) -> None:
        """Wait until at most `most` chunks are still being collected; raise a failed collect."""
        while len(self._collecting) > most:
            self._collecting.popleft().result()

    def _take_oldest(self) -> None:
        res = self._pending.popleft().result()
        self._wait_collected(self._in_flight - 1)
        self.results.append(res)
        self._unsettled.append(res)
        self._collecting.append(self._collector.submit(self._collect_in_order, res))
        if sum(len(r.costs) for r in self._unsettled) >= max(SETTLE_BATCH,
                                                             min(self.settled, MAX_SETTLE_BATCH)):
            if self.settles == 0:
                self.settle_unsettled()  # the first settlement, between its fault points
            else:
                self._settle_in_background()


class _BatchNotSettled(Exception):
    """A background settle failed (its cause); `batch` is to be settled again."""

    def __init__(self, batch: list[Any], counted: int) -> None:
        super().__init__("a settle batch failed")
        self.batch, self.counted = batch, counted
