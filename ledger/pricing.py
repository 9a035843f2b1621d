"""What a request costs, and what a settlement actually spent, in the domain's notion.

`price_requests` turns the requests of one reserve call into charges in exact
quanta (ε for gp, ρ for cgp with ε²/2 for an ε-GP request, per-step runs for
w-event) and `price_settlements` does the same for the costs mechanisms
report. Both need the ledger's domains and raise the first problem in request
order. Equal inputs are priced once: requests with the same domain, notion and
amount share one charge, settlements with equal costs share one breakdown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ledger import accounting
from ledger.accounting import Run
from ledger.amounts import charge_units
from ledger.checks import RequestColumns
from ledger.columns import combine, factorize, object_array
from ledger.entries import canonical_json
from ledger.errors import NotionMismatchError
from mechanisms.cost import Cost, StepRun, WEventCost, exact
from schemas.errors import ParameterError

Domains = dict[str, dict[str, Any]]


def unknown_domain(name: str, domains: Domains) -> ParameterError:
    """The error for a domain the ledger does not know, listing the ones it does."""
    known = ", ".join(sorted(domains)) or "(none)"
    return ParameterError(f"unknown domain {name!r}; the ledger knows: {known}. A domain is "
                          "defined in the ledger first: privpipe ledger policy apply FILE")


def object_codes(values: Sequence[Any],
                 key: Callable[[Any], Any] | None = None) -> np.ndarray:
    """Group codes of arbitrary objects: equal codes for the same object or equal values.

    Values of different types never share a code (``1`` and ``True`` differ);
    unhashable values get a code of their own. This is a memo: callers compute
    one result per code, which is the result of every value with that code.
    `key`, if given, maps a value to what is compared instead of the value: a
    hashable that is equal exactly for equal values (e.g. `cost_key`).
    """
    ids = list(map(id, values))
    if not ids or ids.count(ids[0]) == len(ids):  # one object for all (a shared amount)
        return np.zeros(len(ids), np.int64)
    if key is not None:
        memo: dict[Any, int] = {}  # setdefault's default is the next code
        return np.fromiter((memo.setdefault((type(v), key(v)), len(memo)) for v in values),
                           np.int64, len(values))
    by_id: dict[int, int] = {}
    by_value: dict[Any, int] = {}
    codes = np.empty(len(values), np.int64)
    for i, v in enumerate(values):  # `values` keeps every object alive: ids are unique
        k = by_id.get(id(v))
        if k is None:
            try:
                k = by_value.setdefault((type(v), v), len(by_id))
            except TypeError:
                k = len(by_id)
            by_id[id(v)] = k
        codes[i] = k
    return codes


@dataclass(frozen=True)
class Prices:
    """The charges of one reserve call, aligned with its requests.

    Attributes:
        notions: the charged account's notion per request.
        units: charge in quanta per request (``object`` array of ints; w-event:
            the total over steps).
        signatures: text identifying the request for replays.
        details: the entry detail of each request (shared dicts: do not mutate).
        runs: w-event per-step charges per request (``[]`` for gp/cgp).
    """

    notions: list[str]
    units: np.ndarray
    signatures: list[str]
    details: list[dict[str, Any]]
    runs: list[list[Run]]

    def take(self, index: Sequence[int]) -> Prices:
        """The charges of the requests at `index`, in that order."""
        if len(index) == len(self.notions) and list(index) == list(range(len(self.notions))):
            return self
        return Prices([self.notions[i] for i in index], self.units[np.asarray(index, np.int64)],
                      [self.signatures[i] for i in index], [self.details[i] for i in index],
                      [self.runs[i] for i in index])


def _price_wevent(user: str, domain: str, notion: str, amount: Any,
                  runs: tuple[StepRun, ...], dom_notion: str) -> tuple:
    if dom_notion != notion:
        accounting.charged_amount(dom_notion, notion, Fraction(0))  # raises
    if amount is not None:
        raise ParameterError("a w-event request gives per-step costs in `runs`, not `amount`")
    if not runs:
        raise ParameterError(f"w-event request for user {user!r} has no runs")
    raw = []
    for run in runs:
        if not isinstance(run, StepRun):
            raise ParameterError("w-event runs must be mechanisms.cost.StepRun")
        raw.append((run.start, run.stop, charge_units(run.epsilon)))
    prof = accounting.profile(raw)
    signature = json.dumps(["wevent", domain, [[a, b, str(q)] for a, b, q in prof]])
    detail = {"request_notion": "wevent",
              "runs": [[run.start, run.stop, str(exact(run.epsilon))] for run in runs]}
    return dom_notion, accounting.total(prof), signature, detail, prof


def _price_one(user: str, domain: str, notion: str, amount: Any, runs: tuple[StepRun, ...],
               domains: Domains) -> tuple:
    """(account notion, quanta, signature, detail, runs) of one request, or raise."""
    dom = domains.get(domain)
    if dom is None:
        raise unknown_domain(domain, domains)
    if dom["notion"] == "wevent" or notion == "wevent":
        return _price_wevent(user, domain, notion, amount, runs, dom["notion"])
    if runs:
        raise ParameterError("runs are only for w-event requests")
    if amount is None:
        raise ParameterError(f"request for user {user!r} needs an amount (ε or ρ)")
    try:
        value = exact(amount)
    except ValueError as err:
        raise ParameterError(f"invalid amount: {err}") from None
    if value <= 0:
        raise ParameterError(f"a requested amount must be > 0, got {value}")
    charged = accounting.charged_amount(dom["notion"], notion, value)
    detail = {"request_notion": notion, "request_amount": str(value)}
    if notion != dom["notion"]:
        detail["converted"] = "rho = epsilon^2 / 2"
    return (dom["notion"], charge_units(charged), json.dumps([notion, domain, str(value)]),
            detail, [])


def runs_key(runs: Any) -> Any:
    """What identifies a tuple of `StepRun`s' value, types included; None if it has none.

    Equal keys give equal prices, signatures and details: every field is
    compared with its type (``1``, ``1.0`` and ``True`` differ), so a memo on
    it never merges runs whose texts could differ. Runs that are not a
    non-empty tuple of plain `StepRun`s have no key (priced on their own).
    """
    if type(runs) is not tuple or not runs:
        return None
    key = []
    for r in runs:
        if type(r) is not StepRun:
            return None
        a, b, e = r.start, r.stop, r.epsilon
        key.append((type(a), a, type(b), b, type(e), e))
    return tuple(key)


def _runs_codes(cols: RequestColumns, rows: list[int], n: int) -> np.ndarray:
    """Negative group codes of the w-event requests `rows`: equal for equal prices.

    Requests with the same domain, notion and runs (`runs_key`) and no amount
    share the code ``-1 - first``, `first` being the first of them; any other
    request gets ``-1 - i`` of its own (so its problem is raised at it).
    """
    codes = -1 - np.arange(n)
    first: dict[Any, int] = {}
    for i in rows:
        key = None if cols.amounts[i] is not None else runs_key(cols.runs[i])
        if key is not None:
            codes[i] = -1 - first.setdefault((cols.domains[i], cols.notions[i], key), i)
    return codes


def price_requests(cols: RequestColumns, domains: Domains) -> Prices:
    """Price every request of a reserve call (once per distinct domain, notion and amount).

    Raises:
        ParameterError: the first request in order with an unknown domain, a bad
            amount or bad runs.
        NotionMismatchError: the first request whose notion does not fit its domain.
    """
    n = len(cols)
    doms, dom_names = factorize(cols.domains)
    notions, notion_names = factorize(cols.notions)
    codes, _ = combine(combine(doms, notions)[0], object_codes(cols.amounts))
    # w-event requests (and any request with runs) are priced one by one.
    wevent_dom = np.array([domains.get(d, {}).get("notion") == "wevent" for d in dom_names],
                          bool)
    wevent_req = np.array([x == "wevent" for x in notion_names], bool)
    own = np.fromiter(map(bool, cols.runs), bool, n)
    if n:
        own |= wevent_dom[doms] | wevent_req[notions]
    codes = np.where(own, _runs_codes(cols, np.flatnonzero(own).tolist(), n), codes)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    priced: list[tuple] = [()] * len(first)
    for g in np.argsort(first, kind="stable").tolist():  # in request order: the first error
        i = int(first[g])
        priced[g] = _price_one(cols.users[i], cols.domains[i], cols.notions[i],
                               cols.amounts[i], cols.runs[i], domains)
    inv = inverse.tolist()
    column = [object_array([p[k] for p in priced])[inverse] for k in range(4)]
    return Prices(column[0].tolist(), column[1], column[2].tolist(), column[3].tolist(),
                  [priced[g][4] for g in inv])


@dataclass(frozen=True)
class Actual:
    """The actual cost of one settlement in the domain's notion.

    Attributes:
        units: quanta (w-event: total over steps).
        runs: w-event per-step costs (``[]`` for gp/cgp).
        breakdown: canonical JSON of the sub-step breakdown.
        signature: text identifying the cost for replays.
    """

    units: int
    runs: list[Run]
    breakdown: str
    signature: str


def price_cost(cost: Cost | WEventCost, dom: dict[str, Any]) -> Actual:
    """The actual cost of a settlement against its reservation's domain.

    Raises:
        NotionMismatchError: a w-event cost on a gp/cgp domain or the reverse, or
            a CGP cost on a GP domain.
        ParameterError: a w-event cost whose window w differs from the domain's.
    """
    if isinstance(cost, WEventCost):
        if dom["notion"] != "wevent":
            raise NotionMismatchError(
                f"a w-event cost cannot settle a {dom['notion']!r} domain ({dom['domain']!r})")
        if cost.w != dom["w"]:
            raise ParameterError(
                f"settlement window w={cost.w} differs from domain {dom['domain']!r} "
                f"w={dom['w']}")
        runs = accounting.profile((r.start, r.stop, charge_units(r.epsilon)) for r in cost.runs)
        breakdown = canonical_json(
            [{"start": r.start, "stop": r.stop, "epsilon": str(r.epsilon)} for r in cost.runs],
            "breakdown")
        total = accounting.total(runs)
        return Actual(total, runs, breakdown,
                      json.dumps([str(total), [[a, b, str(q)] for a, b, q in runs]]))
    if dom["notion"] == "wevent":
        raise NotionMismatchError(f"a {cost.notion!r} cost cannot settle a w-event domain")
    accounting.charged_amount(dom["notion"], cost.notion, Fraction(0))  # notion check
    exact_total = sum((accounting.charged_amount(dom["notion"], i.notion, i.amount)
                       for i in cost.items), Fraction(0))
    q = charge_units(exact_total)
    return Actual(q, [], canonical_json(cost.breakdown(), "breakdown"), json.dumps([str(q), []]))


def cost_key(cost: Cost | WEventCost) -> Any:
    """What identifies a cost's value, as integers and strings (`object_codes`' key).

    Equal costs give equal keys (equal amounts have equal integer ratios, whatever
    their type). Hashing and comparing these tuples is several times faster than
    the costs' own Fractions, and a settle hashes one cost per settlement.
    """
    if isinstance(cost, WEventCost):  # runs and w as typed values (`runs_key`)
        key = runs_key(cost.runs)
        return id(cost) if key is None else (type(cost.w), cost.w, key)
    return (cost.notion, cost.requested.as_integer_ratio(),
            tuple((i.step, i.notion, i.amount.as_integer_ratio()) for i in cost.items))


def price_settlements(costs: Sequence[Cost | WEventCost], doms: Sequence[str | None],
                      domains: Domains) -> list[Actual | Exception]:
    """`price_cost` of every settlement (once per distinct cost and domain; `cost_key`).

    `doms` names each settlement's reservation domain (None: no reservation, not
    priced). A settlement whose cost does not fit gets the exception instead of
    an `Actual`: the caller raises the first problem in settlement order.
    """
    codes, _ = combine(factorize(["" if d is None else d for d in doms])[0],
                       object_codes(costs, cost_key))
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    out: list[Actual | Exception | None] = []
    for i in first.tolist():
        if doms[i] is None:
            out.append(None)
            continue
        try:
            out.append(price_cost(costs[i], domains[doms[i]]))
        except (NotionMismatchError, ParameterError, ValueError) as err:
            out.append(err)
    return [out[g] for g in inverse.tolist()]
