"""Input checks of the ledger API, done before any transaction starts.

Ids (user, domain, step, stream, release, actor, ...) are identifiers, stored
and shown verbatim: any Unicode text up to 65,536 characters without NUL.
A call with several requests or settlements is checked column by column and
the first problem *in request order* is raised (for each request its checks
run in a fixed order: type, user_id, domain, step, stream_id, notion), so the
error does not depend on how the call is batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from ledger.columns import combine, factorize, first_duplicate, key_codes
from ledger.records import Request, Settlement
from ledger.watermark import StreamClaim
from mechanisms.cost import Cost, StepRun, WEventCost
from schemas.errors import ParameterError

MAX_ID_CHARS = 65536
NOTIONS = ("gp", "cgp", "wevent")


def id_problem(value: Any, allow_empty: bool = False) -> str | None:
    """The rule `value` breaks as a ledger id, or None for a valid id."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not value and not allow_empty:
        return "must not be empty"
    if len(value) > MAX_ID_CHARS:
        return f"is longer than {MAX_ID_CHARS} characters"
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (lone surrogate)"
    return None


def check_id(value: Any, what: str, *, allow_empty: bool = False) -> str:
    """Return `value` if it is a valid id, else raise `ParameterError` naming `what`."""
    problem = id_problem(value, allow_empty)
    if problem:
        raise ParameterError(f"{what} {problem}")
    return value


def first_id_problem(values: Sequence[Any], allow_empty: bool = False) -> tuple[int, str] | None:
    """(index, rule) of the first invalid id in `values`, or None if all are valid.

    The rules of `id_problem` are checked for the whole column at once (all
    strings; no NUL, no lone surrogate and the length bounds on the joined
    text); only a column that breaks one is searched for its first bad id.
    """
    if _all_valid(values, allow_empty):
        return None
    for i, problem in enumerate(map(id_problem, values, repeat(allow_empty))):
        if problem:
            return i, problem
    return None


def _all_valid(values: Sequence[Any], allow_empty: bool) -> bool:
    """True iff `id_problem` finds nothing in any value (one pass over the joined text)."""
    if not set(map(type, values)) <= {str}:  # subclasses of str are checked one by one
        return False
    joined = "".join(values)
    if "\x00" in joined:
        return False
    try:
        joined.encode("utf-8")  # a lone surrogate anywhere fails the whole text
    except UnicodeEncodeError:
        return False
    if not values:
        return True
    lengths = list(map(len, values))
    return max(lengths) <= MAX_ID_CHARS and (allow_empty or min(lengths) > 0)


def _first(problems: list[tuple[int, str] | None]) -> tuple[int, str] | None:
    """The problem of the smallest index; on a tie the earlier check in the list."""
    found = [p for p in problems if p is not None]
    return min(found, key=lambda p: p[0]) if found else None


@dataclass(frozen=True)
class RequestColumns:
    """The requests of one reserve call as columns (one list per `Request` field).

    Everything reserve reads from a request is here, in one place.
    """

    users: list[str]
    domains: list[str]
    steps: list[str]
    streams: list[str]
    notions: list[str]
    amounts: list[Any]
    runs: list[tuple[StepRun, ...]]
    claims: list[StreamClaim | None] = field(default_factory=list)
    _codes: dict[str, tuple[np.ndarray, list[str]]] = field(default_factory=dict, repr=False,
                                                            compare=False)

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """`columns.factorize` of one id column (computed once)."""
        if name not in self._codes:
            self._codes[name] = factorize(getattr(self, name))
        return self._codes[name]

    def key(self, *names: str) -> tuple[np.ndarray, int]:
        """Codes of the tuples of several id columns, in order of first appearance."""
        codes, uniques = self.codes(names[0])
        n = len(uniques)
        for name in names[1:]:
            other, values = self.codes(name)
            if len(values) > 1:  # a constant column does not split any key
                codes, n = combine(codes, other)
        return codes, n

    @classmethod
    def of(cls, reqs: Sequence[Request]) -> RequestColumns:
        """Columns of already type-checked requests."""
        return cls([r.user_id for r in reqs], [r.domain for r in reqs], [r.step for r in reqs],
                   [r.stream_id for r in reqs], [r.notion for r in reqs],
                   [r.amount for r in reqs], [r.runs for r in reqs],
                   [r.stream_claim for r in reqs])

    def __len__(self) -> int:
        return len(self.users)

    def take(self, index: Sequence[int]) -> RequestColumns:
        """The requests at `index`, in that order."""
        if len(index) == len(self) and list(index) == list(range(len(self))):
            return self
        return RequestColumns(*([col[i] for i in index] for col in (
            self.users, self.domains, self.steps, self.streams, self.notions, self.amounts,
            self.runs, self.claims)))


def _named(what: str, problem: tuple[int, str] | None) -> tuple[int, str] | None:
    return None if problem is None else (problem[0], f"{what} {problem[1]}")


def _first_not(items: Sequence[Any], cls: type) -> int:
    return next((i for i, x in enumerate(items) if not isinstance(x, cls)), len(items))


def _claim_problem(cols: RequestColumns) -> tuple[int, str] | None:
    """The first request whose stream claim is not a w-event `StreamClaim` of valid steps."""
    for i, c in enumerate(cols.claims):
        if c is None:
            continue
        if not isinstance(c, StreamClaim):
            return i, "stream_claim must be a ledger.StreamClaim"
        if cols.notions[i] != "wevent":
            return i, "a stream claim is only for w-event requests"
        ints = (c.first_step, c.last_step, c.steps)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints) or (
                c.watermark is not None and not isinstance(c.watermark, int)):
            return i, "a stream claim's steps must be integers"
        if id_problem(c.fingerprint):
            return i, "a stream claim needs a fingerprint"
    return None


def request_columns(reqs: Sequence[Request]) -> RequestColumns:
    """Check the requests of one reserve call and return them as columns.

    Raises:
        ParameterError: the first problem in request order (a non-`Request`, an
            invalid id, an unknown notion), else the first duplicate key
            (user_id, step, stream_id).
    """
    stop = _first_not(reqs, Request)
    cols = RequestColumns.of(reqs[:stop])
    bad_notion = next((i for i, x in enumerate(cols.notions) if x not in NOTIONS), None)
    found = _first([
        _named("user_id", first_id_problem(cols.users)),
        _named("domain", first_id_problem(cols.domains)),
        _named("step", first_id_problem(cols.steps)),
        _named("stream_id", first_id_problem(cols.streams, allow_empty=True)),
        None if bad_notion is None else (bad_notion, "request notion must be gp, cgp or "
                                                     f"wevent, got {cols.notions[bad_notion]!r}"),
    ])
    if found is None:
        found = _claim_problem(cols)
    if found is not None:
        raise ParameterError(found[1])
    if stop < len(reqs):
        raise ParameterError(f"request {stop} is not a ledger.Request")
    dup = first_duplicate(cols.key("users", "steps", "streams")[0])
    if dup is not None:
        raise ParameterError(
            f"duplicate request for user {cols.users[dup]!r}, step {cols.steps[dup]!r}, "
            f"stream {cols.streams[dup]!r} in one reserve call")
    return cols


@dataclass(frozen=True)
class SettlementColumns:
    """The settlements of one settle call as columns."""

    users: list[str]
    domains: list[str]
    steps: list[str]
    streams: list[str]
    costs: list[Cost | WEventCost]

    def __len__(self) -> int:
        return len(self.users)


def settlement_columns(items: Sequence[Settlement]) -> SettlementColumns:
    """Check the settlements of one settle call and return them as columns.

    Raises:
        ParameterError: the first problem in settlement order; per settlement the
            checks are: type, user_id, domain, step, stream_id, cost type, and a
            key (user_id, step, stream_id) already settled earlier in the call.
    """
    stop = _first_not(items, Settlement)
    head = items[:stop]
    cols = SettlementColumns([s.user_id for s in head], [s.domain for s in head],
                             [s.step for s in head], [s.stream_id for s in head],
                             [s.cost for s in head])
    bad_cost = next((i for i, c in enumerate(cols.costs) if not isinstance(c, Cost | WEventCost)),
                    None)
    found = _first([
        _named("user_id", first_id_problem(cols.users)),
        _named("domain", first_id_problem(cols.domains)),
        _named("step", first_id_problem(cols.steps)),
        _named("stream_id", first_id_problem(cols.streams, allow_empty=True)),
        None if bad_cost is None else (bad_cost, "a settlement's cost must be a Cost or "
                                                 "WEventCost"),
    ])
    limit = len(cols) if found is None else found[0]  # the prefix without other problems
    dup = first_duplicate(key_codes(cols.users[:limit], cols.steps[:limit],
                                    cols.streams[:limit])[0])
    if dup is not None:  # a duplicate before the first other problem comes first
        raise ParameterError(
            f"duplicate settlement for user {cols.users[dup]!r}, step {cols.steps[dup]!r}")
    if found is not None:
        raise ParameterError(found[1])
    if stop < len(items):
        raise ParameterError("settlements must be ledger.Settlement objects")
    return cols
