"""Charges recomputed from published outputs: what settle checks and what an auditor re-derives.

A mechanism task's claimed costs are not trusted: the registry entry's
cost-from-output function (`mechanisms.charges`, the entry's ``charge``) gives
each released item's cost from public parameters and the published tables.
`chunk_claim_problem` compares a chunk's claimed costs with it before the flow
settles the chunk (any difference fails the chunk: nothing published, the
reservation stays charged); `charge_faults` compares every user's net charge
in the ledger with the cost recomputed from a published release directory
(`privpipe ledger verify --manifests OUT`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.amounts import format_fraction, from_units
from ledger.pricing import price_cost
from mechanisms import registry
from mechanisms.charges import wevent_cost, wevent_costs
from mechanisms.cost import Cost, WEventCost
from schemas.errors import PrivpipeError

Key = tuple[str, str]  # (user_id, step) as the ledger keys a settlement
Ranges = Mapping[tuple[str, str], Sequence[tuple[int, int]]]


def curve_expected(curves: pa.Table, mechanism: str, notion: str, amount: Fraction
                   ) -> dict[Key, Cost]:
    """The cost of every released curve (rows of a ``curves`` table), keyed ``curve:<id>``."""
    cost = registry.get(mechanism, "curves").charge_function(notion, Fraction(amount))
    users = curves.column("user_id").to_pylist()
    ids = curves.column("curve_id").to_pylist()
    return {(u, f"curve:{c}"): cost for u, c in zip(users, ids, strict=True)}


def _codes(col: pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """Integer codes of a string column and the distinct values they index."""
    enc = pc.dictionary_encode(col.combine_chunks())
    return (enc.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            enc.dictionary.to_pylist())


def _blocks(samples: pa.Table) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Each run of equal (user, stream) rows, in table order: users, streams, steps, offsets.

    Block k is rows ``offsets[k]:offsets[k + 1]`` of ``steps``.
    """
    if samples.num_rows == 0:
        return [], [], np.empty(0, np.int64), np.zeros(1, np.int64)
    users, user_names = _codes(samples.column("user_id"))
    streams, stream_names = _codes(samples.column("stream_id"))
    steps = samples.column("step").to_numpy()
    change = np.flatnonzero((users[1:] != users[:-1]) | (streams[1:] != streams[:-1])) + 1
    starts = np.concatenate([[0], change])
    return ([str(user_names[c]) for c in users[starts].tolist()],
            [str(stream_names[c]) for c in streams[starts].tolist()],
            steps, np.concatenate([starts, [users.size]]))


def _groups(samples: pa.Table) -> Iterable[tuple[str, str, np.ndarray]]:
    """(user, stream, steps) of each run of equal (user, stream) rows, in table order."""
    users, streams, steps, offsets = _blocks(samples)
    bounds = offsets.tolist()
    for k, (user, sid) in enumerate(zip(users, streams, strict=True)):
        yield user, sid, steps[bounds[k]:bounds[k + 1]]


def _first_repeated(keys: Sequence[Key]) -> Key | None:
    """The first key that occurs a second time, or None."""
    seen: set[Key] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return None


def stream_expected(samples: pa.Table, mechanism: str, epsilon: Fraction, w: int,
                    repeated: Ranges) -> dict[Key, WEventCost]:
    """The cost of every released stream's new steps (a ``samples`` table), keyed ``stream:<id>``.

    `repeated` maps (user, stream) to the inclusive step ranges an earlier
    release published (charged there). A stream listed twice is refused.
    The registry's `wevent_cost` is computed for all streams in one pass
    (`mechanisms.charges.wevent_costs`, the same costs).
    """
    charge = registry.get(mechanism, "streams").charge_function
    users, streams, steps, offsets = _blocks(samples)
    keys = [(user, f"stream:{sid}") for user, sid in zip(users, streams, strict=True)]
    twice = _first_repeated(keys)
    if twice is not None:
        raise ValueError(f"stream {twice[1][len('stream:'):]!r} of user {twice[0]!r} is not in "
                         "one block of rows")
    ranges = [repeated.get((user, sid), ()) for user, sid in zip(users, streams, strict=True)]
    if charge is wevent_cost:
        costs = wevent_costs(steps, offsets, epsilon=Fraction(epsilon), w=int(w), repeated=ranges)
    else:
        bounds = offsets.tolist()
        costs = [charge(steps[bounds[k]:bounds[k + 1]], epsilon=Fraction(epsilon), w=int(w),
                        repeated=ranges[k]) for k in range(len(keys))]
    return {key: cost for key, cost in zip(keys, costs, strict=True) if cost is not None}


def _same(claimed: Cost | WEventCost, expected: Cost | WEventCost) -> bool:
    if isinstance(expected, WEventCost):
        return (isinstance(claimed, WEventCost) and claimed.epsilon == expected.epsilon
                and claimed.w == expected.w
                and [(r.start, r.stop, r.epsilon) for r in claimed.runs]
                == [(r.start, r.stop, r.epsilon) for r in expected.runs])
    return (isinstance(claimed, Cost) and claimed.notion == expected.notion
            and claimed.requested == expected.requested and claimed.total == expected.total)


def chunk_claim_problem(claimed: Sequence[tuple[str, str, Any, str]],
                        expected: Mapping[Key, Cost | WEventCost]) -> str | None:
    """Why a chunk's claimed costs differ from those recomputed from its outputs, or None.

    Args:
        claimed: the task's (user_id, step, cost, stream_id) per charged item.
        expected: the recomputed cost of every released item (`curve_expected`,
            `stream_expected`).
    """
    seen: set[Key] = set()
    checked: dict[tuple[int, int], bool] = {}  # shared cost objects are compared once
    for user, step, cost, _ in claimed:
        key = (user, step)
        if key in seen:
            return f"user {user!r}, {step}: claimed twice"
        seen.add(key)
        want = expected.get(key)
        if want is None:
            return f"user {user!r}, {step}: a cost is claimed for an item it did not publish"
        pair = (id(cost), id(want))
        if pair not in checked:
            checked[pair] = _same(cost, want)
        if not checked[pair]:
            return (f"user {user!r}, {step}: claimed cost {_text(cost)} but its published "
                    f"output costs {_text(want)}")
    missing = sorted(set(expected) - seen)
    if missing:
        user, step = missing[0]
        return f"user {user!r}, {step}: published with no cost claimed"
    return None


def _text(cost: Any) -> str:
    if isinstance(cost, WEventCost):
        total = sum((r.epsilon * (r.stop - r.start) for r in cost.runs), Fraction(0))
        return f"{total} (ε over its steps, w-event)"
    if isinstance(cost, Cost):
        return f"{cost.total} ({cost.notion})"
    return repr(cost)


def charge_faults(release_id: str, expected: Mapping[Key, Cost | WEventCost],
                  charges: Sequence[Mapping[str, Any]], domain: Mapping[str, Any]) -> list[str]:
    """Every user whose ledger charge in a release differs from the recomputed one.

    Args:
        release_id: the release.
        expected: the recomputed cost of every released item (`curve_expected` /
            `stream_expected`).
        charges: the ledger's net charge per account of the release
            (`Ledger.release_charges`: user_id, stream_id, net).
        domain: the release's domain row (`Ledger.domains`: notion, w).

    Returns:
        One line per account that differs (ledger vs published), sorted; empty if none.
    """
    want: dict[tuple[str, str], int] = {}
    priced: dict[int, int] = {}
    for (user, step), cost in expected.items():
        stream = step.removeprefix("stream:") if isinstance(cost, WEventCost) else ""
        if id(cost) not in priced:
            priced[id(cost)] = price_cost(cost, dict(domain)).units
        want[(user, stream)] = want.get((user, stream), 0) + priced[id(cost)]
    have = {(str(r["user_id"]), str(r.get("stream_id") or "")): Fraction(r["net"])
            for r in charges}
    faults = []
    for user, stream in sorted(set(want) | set(have)):
        a, b = have.get((user, stream), Fraction(0)), from_units(want.get((user, stream), 0))
        if a != b:
            where = f"user {user!r}" + (f", stream {stream!r}" if stream else "")
            faults.append(f"release {release_id!r}, {where}: the ledger charged "
                          f"{format_fraction(a)}, its published outputs cost {format_fraction(b)}")
    return faults


def _read(path: Path, columns: list[str]) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=columns)


def _step_ranges(steps: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive (first, last) ranges of consecutive integers covering sorted unique `steps`."""
    if steps.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(steps) != 1) + 1
    starts = np.concatenate([[0], breaks]).tolist()
    stops = np.concatenate([breaks, [steps.size]]).tolist()
    return [(int(steps[a]), int(steps[b - 1])) for a, b in zip(starts, stops, strict=True)]


class _Earlier:
    """The steps each (domain, user, stream) published in the releases read so far."""

    def __init__(self) -> None:
        self.steps: dict[tuple[str, str, str], np.ndarray] = {}

    def ranges(self, domain: str) -> dict[tuple[str, str], list[tuple[int, int]]]:
        return {(u, s): _step_ranges(v) for (d, u, s), v in self.steps.items() if d == domain}

    def add(self, domain: str, samples: pa.Table) -> None:
        for user, sid, steps in _groups(samples):
            key = (domain, user, sid)
            self.steps[key] = np.union1d(self.steps.get(key, np.empty(0, np.int64)), steps)


def _expected(rdir: Path, manifest: Mapping[str, Any], earlier: _Earlier
              ) -> dict[Key, Cost | WEventCost]:
    """The recomputed cost of every item a published release directory released."""
    p = manifest.get("parameters") or {}
    if manifest.get("flow") == "release_curves":
        curves = _read(rdir / "curves.parquet", ["user_id", "curve_id"])
        return curve_expected(curves, str(p["mechanism"]), str(p["notion"]),
                              Fraction(str(p["amount"])))
    samples = _read(rdir / "samples.parquet", ["user_id", "stream_id", "step"])
    out = stream_expected(samples, str(p["mechanism"]), Fraction(str(p["epsilon"])),
                          int(p["w"]), earlier.ranges(str(manifest["domain"])))
    earlier.add(str(manifest["domain"]), samples)
    return out


def published_faults(led: Any, out_dir: str | Path,
                     check_files: Callable[[Path, dict[str, Any]], None]) -> list[str]:
    """Every way the release directories under `out_dir` disagree with the ledger.

    Each ``OUT/<release_id>/manifest.json`` must be a release the ledger
    recorded as published; `check_files` hashes the directory against the
    manifest the ledger holds (`files.release_dir.check_published`, raising on
    the first difference); then every user's charge is recomputed from the
    published tables (`curve_expected` / `stream_expected`, the registry's
    cost-from-output functions) and compared with the ledger (`charge_faults`).
    Stream releases are read in ledger order, so a step an earlier release in
    `out_dir` published is a repeat (charged there).

    Args:
        led: an open `Ledger` (operator or auditor).
        out_dir: the release output directory.
        check_files: raises (any `PrivpipeError`) when a directory differs from
            its manifest.

    Returns:
        One line per fault (a changed file, an unrecorded release, a charge that
        differs), in release order; empty when everything agrees.
    """
    domains = {d["domain"]: d for d in led.domains()}
    found = []
    for m in sorted(Path(out_dir).glob("*/manifest.json")):
        rid = m.parent.name
        record = led.release(rid)
        first = (led.entry_range(rid) or (0, 0))[0]
        found.append((first, rid, m.parent, record))
    faults: list[str] = []
    earlier = _Earlier()
    for _, rid, rdir, record in sorted(found, key=lambda x: (x[0], x[1])):
        manifest = (record or {}).get("manifest") or {}
        if record is None or record.get("state") not in ("settled", "closed"):
            faults.append(f"{rdir}: not a release this ledger published")
            continue
        try:
            check_files(rdir, manifest)
        except PrivpipeError as err:
            faults.append(str(err))
            continue
        expected = _expected(rdir, manifest, earlier)
        faults += charge_faults(rid, expected, led.release_charges(rid),
                                domains[manifest["domain"]])
    return faults
