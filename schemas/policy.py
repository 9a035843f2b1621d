"""The budget policy: one TOML file that declares every privacy domain.

A domain is one kind of data with one metric and one budget per user. Example::

    [domains.ais_tracks]
    kind = "curves"            # curves | streams
    notion = "gp"              # gp | cgp (curves), wevent (streams)
    cap = "1.0"                # ε (gp), ρ (cgp) or ε per window (wevent); number or "p/q"
    time_unit = "s"            # ms | s | min | h | d
    value_columns = ["x", "y"]
    value_unit = "m"
    projection = "equirectangular"   # optional: lon/lat columns -> metres
    ref_lat = 40.7             # equirectangular standard parallel (public; degrees; required)
    sort = false               # true: sort rows by t instead of rejecting unsorted input
    metric = "l2"              # l2 (default) | dist_inf: the metric of the guarantee

    [domains.ais_tracks.public]    # what is released outside the noise (required for curves)
    duration = true            # each curve's duration (else: `window = T` on the domain)
    points = true              # each curve's number of points (else: `grid_points = N`)
    sample_times = false       # the input sample times (allows evaluate_on = "input";
                               # only with duration = true and points = true)
    rejections = false         # how many users validation rejected, per rule (default:
                               # withheld from manifests and reports)

    [domains.power]
    kind = "streams"
    notion = "wevent"
    cap = "1.0"
    w = 5
    time_unit = "step"         # t is an integer step index (or ms..d with `step`)
    value_range = [0.0, 60000.0]
    value_unit = "MW"
    wevent_budget = "per_user" # default: windows sum over all of a user's streams;
                               # "per_stream": each stream its own (k streams: k·cap)

    [domains.power.public]     # optional for streams: only `rejections` applies
    rejections = false

Errors name the key and its allowed values (`PolicyError`).
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from schemas.errors import PolicyError, Problem
from schemas.names import is_safe_name

KINDS = ("curves", "streams")
NOTIONS_BY_KIND = {"curves": ("gp", "cgp"), "streams": ("wevent",)}
TIME_UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
STREAM_TIME_UNITS = ("step", *TIME_UNITS)
PROJECTIONS = ("equirectangular", "mercator")
METRICS_BY_KIND = {"curves": ("l2", "dist_inf"), "streams": ("wevent",)}
PUBLIC_KEYS = ("duration", "points", "sample_times", "rejections")
STREAM_PUBLIC_KEYS = ("rejections",)
_DOMAIN_KEYS = {
    "kind", "notion", "cap", "w", "time_unit", "step", "value_columns", "value_unit",
    "projection", "lon_column", "lat_column", "ref_lat", "value_range", "sort", "schedule",
    "description", "metric", "public", "window", "grid_points", "wevent_budget",
}
WEVENT_BUDGETS = ("per_user", "per_stream")
"""Whose windows a stream step adds to: all of the user's streams, or its own stream."""


@dataclass(frozen=True)
class Domain:
    """One privacy domain of the policy (see the module docstring for the keys)."""

    name: str
    kind: str
    notion: str
    cap: Fraction
    time_unit: str
    value_columns: tuple[str, ...]
    value_unit: str
    w: int | None = None
    step: float | None = None
    projection: str | None = None
    lon_column: str = "lon"
    lat_column: str = "lat"
    ref_lat: float | None = None
    value_range: tuple[float, float] | None = None
    sort: bool = False
    schedule: str | None = None
    description: str = ""
    metric: str = "l2"
    public: Public | None = None
    window: float | None = None
    grid_points: int | None = None
    wevent_budget: str | None = None

    def __post_init__(self) -> None:
        """A streams domain budgets per user over all its streams unless it says otherwise."""
        if self.kind == "streams" and self.wevent_budget is None:
            object.__setattr__(self, "wevent_budget", "per_user")

    @property
    def seconds_per_unit(self) -> float | None:
        """Length of one time unit in seconds (None for ``step``)."""
        return TIME_UNITS.get(self.time_unit)

    def units_label(self) -> str:
        """Human text of the metric's units, printed next to every ε or ρ."""
        if self.kind == "streams":
            scope = ("per user over all streams" if self.wevent_budget == "per_user"
                     else "per stream")
            return f"w-event, w={self.w} steps {scope}, values in [0,1] of {self.value_unit}"
        if self.metric == "dist_inf":
            return f"sup distance in {self.value_unit}"
        return f"L2 over {self.value_unit} x {self.time_unit}^(1/2)"

    @property
    def rejections_public(self) -> bool:
        """Whether manifests and reports may publish how many users validation rejected."""
        return self.public is not None and self.public.rejections

    def public_fields(self) -> tuple[str, ...]:
        """Names of what a release of this domain publishes outside the noise (documented)."""
        if self.kind == "streams":
            return ("user_id", "stream_id", "step")
        pub = self.public or Public()
        fields = ["user_id", "curve_id"]
        fields.append("duration" if pub.duration else f"window={self.window:g}")
        if pub.points:
            fields.append("points")
        if pub.sample_times:
            fields.append("sample_times")
        return tuple(fields)


@dataclass(frozen=True)
class Public:
    """What a curves domain declares public: released as-is, outside the noise.

    ``duration``: each curve's duration (else every curve lies on the domain's
    fixed ``window``); ``points``: each curve's number of samples (else the
    output grid has the domain's ``grid_points`` and nothing is sized by N);
    ``sample_times``: the input sample times (needed for ``evaluate_on="input"``;
    only with ``duration`` and ``points``, which the sample times give away);
    ``rejections``: how many users validation rejected, and under which rules
    (a function of raw data: withheld unless declared). A streams domain's
    public table may hold ``rejections`` only.
    User and curve ids are always public: they key the per-user outputs.
    """

    duration: bool = False
    points: bool = False
    sample_times: bool = False
    rejections: bool = field(default=False, metadata={"omit_default": True})


def definition_fields(obj: Any) -> Any:
    """`dataclasses.asdict(obj)`, without fields marked ``omit_default`` left at their default.

    Fields added to the policy after ledgers recorded definitions carry that
    mark, so a definition that does not use them encodes (and digests) as it
    did before they existed; decoding gives a missing field its default.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("omit_default") and value == f.default:
                continue
            out[f.name] = definition_fields(value)
        return out
    if isinstance(obj, list | tuple):
        return type(obj)(definition_fields(v) for v in obj)
    if isinstance(obj, dict):
        return {k: definition_fields(v) for k, v in obj.items()}
    return obj


@dataclass(frozen=True)
class Policy:
    """A validated policy: domains by name, and where it came from."""

    domains: dict[str, Domain]
    source: str = "<memory>"
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def domain(self, name: str) -> Domain:
        """Return domain `name` or raise PolicyError listing the known domains."""
        try:
            return self.domains[name]
        except KeyError:
            known = ", ".join(sorted(self.domains)) or "(none)"
            raise PolicyError(
                Problem(self.source, None, None, "known domain",
                        f"unknown domain {name!r}; the policy defines: {known}")
            ) from None


def _fail(source: str, key: str, message: str) -> PolicyError:
    return PolicyError(Problem(source, None, key, "policy", message))


def _cap(source: str, key: str, value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail(source, key, "must be a positive number or a ratio string like \"1/2\"")
    try:
        if isinstance(value, float):
            cap = Fraction(repr(value))
        else:
            cap = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise _fail(source, key,
                    "must be a positive number or a ratio string like \"1/2\"") from None
    if cap <= 0:
        raise _fail(source, key, "must be > 0")
    from ledger.amounts import MAX_UNITS, UNITS_PER_EPSILON  # at use: ledger imports schemas

    if cap * UNITS_PER_EPSILON < 1:
        raise _fail(source, key, f"is below the ledger's smallest amount (1/{UNITS_PER_EPSILON}, "
                                 "about 1.7e-24): it would be stored as a cap of 0")
    if cap * UNITS_PER_EPSILON > MAX_UNITS:
        raise _fail(source, key,
                    f"is too large to store (at most {MAX_UNITS // UNITS_PER_EPSILON})")
    return cap


class _Problems:
    """Collects every policy problem, so a policy's errors are listed all at once."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[Problem] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(Problem(self.source, None, key, "policy", message))

    def check(self, fn: Any, *args: Any) -> Any:
        """``fn(source, *args)``; on PolicyError record its problems and return None."""
        try:
            return fn(self.source, *args)
        except PolicyError as err:
            self.items.extend(err.problems)
            return None

    def flag(self, key: str, value: Any) -> bool | None:
        """`value` if it is a boolean, else None with the problem recorded."""
        if isinstance(value, bool):
            return value
        self.add(key, "must be true or false")
        return None

    def raise_if_any(self) -> None:
        """Raise every problem recorded (a PolicyError), if any."""
        if self.items:
            raise PolicyError(self.items)


def parse_policy(data: dict[str, Any], source: str = "<memory>") -> Policy:
    """Validate a parsed TOML mapping and build a `Policy`.

    Every problem is reported, not only the first: a key whose check depends on
    an invalid one (the notion on the kind, say) is checked once that one is fixed.

    Raises:
        PolicyError: one `Problem` per offending key (``domains.NAME.KEY``), each
            with the allowed values.
    """
    if not isinstance(data, dict):
        raise _fail(source, "<top>", "the policy must be a table with [domains] (and optionally "
                                     "[schedules])")
    problems = _Problems(source)
    for key in sorted(set(data) - {"domains", "schedules"}):
        problems.add(_toml_key(key), "unknown top-level key; allowed: [domains], [schedules]")
    domains_raw = data.get("domains")
    if not isinstance(domains_raw, dict) or not domains_raw:
        problems.add("domains", "the policy needs at least one [domains.NAME] table")
        domains_raw = {}
    domains: dict[str, Domain] = {}
    for name, d in domains_raw.items():
        before = len(problems.items)
        fields = _domain_fields(problems, name, d)
        if fields is not None and len(problems.items) == before:
            domains[name] = Domain(name=name, **fields)
    if problems.items:
        n = len(problems.items)
        summary = None if n == 1 else (
            f"{source}: {n} problems in the policy:\n"
            + "\n".join(f"  - {p.column}: {p.message}" for p in problems.items))
        raise PolicyError(problems.items, summary)
    return Policy(domains=domains, source=source, raw=data)


def _toml_key(key: str) -> str:
    """`key` as TOML writes it: bare when it can be, else quoted (so an empty key shows)."""
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else json.dumps(key)


def _domain_fields(problems: _Problems, name: str, d: Any) -> dict[str, Any] | None:
    """The `Domain` fields of table `domains.NAME`, recording every problem found."""
    k = f"domains.{_toml_key(name)}"
    if not isinstance(d, dict):
        problems.add(k, "must be a table")
        return None
    if not is_safe_name(name) or "." in name:
        problems.add(k, "domain names use ASCII letters, digits, '_' and '-' only, "
                     "starting with a letter or a digit (they become file names)")
    for key in sorted(set(d) - _DOMAIN_KEYS):
        problems.add(f"{k}.{_toml_key(key)}",
                     f"unknown key; allowed: {', '.join(sorted(_DOMAIN_KEYS))}")
    cap = problems.check(_required_cap, k, d)
    common = problems.check(_common_keys, k, d) or {}
    kind = problems.check(_kind, k, d)
    if kind is None:
        return None
    checks = [problems.check(fn, k, d, kind) for fn in (
        _notion, _w, _time, _columns_and_projection, _value_range, _release_keys)]
    if any(c is None for c in checks) or cap is None:
        return None
    fields: dict[str, Any] = {"kind": kind, "cap": cap, **common}
    for c in checks:
        fields.update(c)
    return fields


def _kind(source: str, k: str, d: dict[str, Any]) -> str:
    kind = d.get("kind")
    if kind not in KINDS:
        raise _fail(source, f"{k}.kind", f"must be one of {', '.join(KINDS)}")
    return str(kind)


def _notion(source: str, k: str, d: dict[str, Any], kind: str) -> dict[str, Any]:
    notion = d.get("notion")
    if notion not in NOTIONS_BY_KIND[kind]:
        raise _fail(source, f"{k}.notion",
                    f"for kind {kind!r} must be one of {', '.join(NOTIONS_BY_KIND[kind])}")
    return {"notion": notion}


def _required_cap(source: str, k: str, d: dict[str, Any]) -> Fraction:
    if "cap" not in d:
        raise _fail(source, f"{k}.cap",
                    "is required (ε for gp, ρ for cgp, ε per window for wevent)")
    return _cap(source, f"{k}.cap", d["cap"])


#: The largest window w (the ledger stores w as a 32-bit integer).
MAX_W = 2**31 - 1


def _w(source: str, k: str, d: dict[str, Any], kind: str) -> dict[str, Any]:
    w = d.get("w")
    if kind == "streams":
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise _fail(source, f"{k}.w", "is required for wevent domains: an integer >= 1")
        if w > MAX_W:
            raise _fail(source, f"{k}.w", f"must be at most {MAX_W} (a 32-bit integer), got {w}")
        return {"w": w}
    if w is not None:
        raise _fail(source, f"{k}.w", "only applies to streams (wevent) domains")
    return {"w": None}


def _time(source: str, k: str, d: dict[str, Any], kind: str) -> dict[str, Any]:
    allowed_units = STREAM_TIME_UNITS if kind == "streams" else tuple(TIME_UNITS)
    time_unit = d.get("time_unit", "step" if kind == "streams" else "s")
    if time_unit not in allowed_units:
        raise _fail(source, f"{k}.time_unit", f"must be one of {', '.join(allowed_units)}")
    step = d.get("step")
    if step is not None:
        if kind != "streams" or time_unit == "step":
            raise _fail(source, f"{k}.step",
                        "only for streams whose time_unit is a duration (ms..d)")
        if isinstance(step, bool) or not isinstance(step, int | float) or not step > 0:
            raise _fail(source, f"{k}.step", "must be a positive number of time units")
    elif kind == "streams" and time_unit != "step":
        raise _fail(source, f"{k}.step",
                    "is required when a stream's time_unit is a duration: "
                    "the length of one step in that unit")
    return {"time_unit": time_unit, "step": float(step) if step is not None else None}


def _columns_and_projection(source: str, k: str, d: dict[str, Any],
                            kind: str) -> dict[str, Any]:
    p = _Problems(source)
    projection = d.get("projection")
    known = projection is None or projection in PROJECTIONS
    if not known:
        p.add(f"{k}.projection", f"must be one of {', '.join(PROJECTIONS)}")
    elif projection is not None and kind != "curves":
        p.add(f"{k}.projection", "only applies to curves domains")
    ref_lat = d.get("ref_lat")
    if projection == "equirectangular" and ref_lat is None:
        p.add(f"{k}.ref_lat",
              "is required with projection = \"equirectangular\": a fixed, public "
              "standard parallel in degrees (a per-curve or per-data-set reference "
              "would make the metric, and so the guarantee, depend on the data)")
    if ref_lat is not None:
        if known and projection != "equirectangular":
            p.add(f"{k}.ref_lat", "only applies to projection = \"equirectangular\"")
        elif (isinstance(ref_lat, bool) or not isinstance(ref_lat, int | float)
                or not -89.0 <= float(ref_lat) <= 89.0):
            p.add(f"{k}.ref_lat", "must be a latitude in degrees in [-89, 89]")
    projected = known and projection is not None and kind == "curves"
    cols = d.get("value_columns", ["x", "y"] if projected else ["value"])
    if (not isinstance(cols, list) or not cols
            or not all(isinstance(c, str) and c for c in cols)
            or len(set(cols)) != len(cols)):
        p.add(f"{k}.value_columns", "must be a non-empty list of distinct names")
    elif kind == "streams" and cols != ["value"]:
        p.add(f"{k}.value_columns", "streams have exactly one column, [\"value\"]")
    elif set(cols) & {"user_id", "curve_id", "stream_id", "t"}:
        p.add(f"{k}.value_columns",
              "must not reuse the key columns user_id, curve_id, stream_id, t")
    elif projected and len(cols) != 2:
        p.add(f"{k}.value_columns",
              "a projected domain has two value columns (east, north in metres)")
    p.raise_if_any()
    return {"projection": projection, "value_columns": tuple(cols),
            "ref_lat": float(ref_lat) if ref_lat is not None else None}


def _value_range(source: str, k: str, d: dict[str, Any], kind: str) -> dict[str, Any]:
    vr = d.get("value_range")
    if kind == "streams":
        if (not isinstance(vr, list) or len(vr) != 2
                or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in vr)
                or not float(vr[0]) < float(vr[1])):
            raise _fail(source, f"{k}.value_range",
                        "is required for streams: [low, high] with low < high")
        return {"value_range": (float(vr[0]), float(vr[1]))}
    if vr is not None:
        raise _fail(source, f"{k}.value_range", "only applies to streams domains")
    return {"value_range": None}


def _common_keys(source: str, k: str, d: dict[str, Any]) -> dict[str, Any]:
    """The keys every kind shares: sort, schedule and the plain strings."""
    problems = _Problems(source)
    sort = d.get("sort", False)
    if not isinstance(sort, bool):
        problems.add(f"{k}.sort", "must be true or false")
    sched = d.get("schedule")
    if sched is not None and (not isinstance(sched, str) or len(sched.split()) != 5):
        problems.add(f"{k}.schedule", "must be a 5-field cron string, e.g. \"0 2 * * *\"")
    for key in ("value_unit", "lon_column", "lat_column", "description"):
        if key in d and not isinstance(d[key], str):
            problems.add(f"{k}.{key}", "must be a string")
    if problems.items:
        raise PolicyError(problems.items)
    return {"sort": sort, "schedule": sched, "value_unit": d.get("value_unit", "1"),
            "lon_column": d.get("lon_column", "lon"), "lat_column": d.get("lat_column", "lat"),
            "description": d.get("description", "")}


def _positive(source: str, key: str, value: Any, *, integer: bool = False) -> float:
    ok_type = int if integer else int | float
    if (isinstance(value, bool) or not isinstance(value, ok_type)
            or not 0 < float(value) < 1e15):
        what = "an integer >= 1" if integer else "a positive number"
        raise _fail(source, key, f"must be {what} (below 1e15)")
    return value


def _stream_public(p: _Problems, k: str, raw: Any) -> Public | None:
    """A streams domain's optional public table: ``rejections`` only (None when not true)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        p.add(f"{k}.public", "must be a table, e.g. [domains.NAME.public] rejections = false")
        return None
    for key in sorted(set(raw) - set(STREAM_PUBLIC_KEYS)):
        p.add(f"{k}.public.{key}",
              "only applies to curves domains (a stream's user ids, stream ids and step "
              f"indices are always public); allowed: {', '.join(STREAM_PUBLIC_KEYS)}")
    rejections = p.flag(f"{k}.public.rejections", raw.get("rejections", False))
    return Public(rejections=True) if rejections else None


def _stream_release_keys(p: _Problems, k: str, d: dict[str, Any]) -> dict[str, Any]:
    public = _stream_public(p, k, d.get("public"))
    for key in ("window", "grid_points"):
        if key in d:
            p.add(f"{k}.{key}", "only applies to curves domains (a stream's user ids, stream "
                                "ids and step indices are always public)")
    budget = d.get("wevent_budget", "per_user")
    if budget not in WEVENT_BUDGETS:
        p.add(f"{k}.wevent_budget",
              "must be \"per_user\" (default: the windows of all of a user's streams add "
              "up) or \"per_stream\" (each stream has its own windows: a user with k streams "
              "has k·cap per window)")
    return {"wevent_budget": budget, "public": public}


def _curve_public(p: _Problems, k: str, raw: Any) -> Public | None:
    """A curves domain's required public table (None, with the problems, when invalid)."""
    if not isinstance(raw, dict):
        p.add(f"{k}.public",
              "is required for curves domains: a table declaring what is released "
              "outside the noise, e.g. [domains.NAME.public] duration = true, "
              "points = true, sample_times = false")
        return None
    before = len(p.items)
    for key in sorted(set(raw) - set(PUBLIC_KEYS)):
        p.add(f"{k}.public.{key}", f"unknown key; allowed: {', '.join(PUBLIC_KEYS)}")
    for key in ("duration", "points"):
        if key not in raw:
            p.add(f"{k}.public.{key}", "is required: true or false")
    flags = {key: p.flag(f"{k}.public.{key}", raw[key] if key in raw else False)
             for key in PUBLIC_KEYS}
    if len(p.items) > before:
        return None
    public = Public(**flags)
    if public.sample_times and not (public.points and public.duration):
        p.add(f"{k}.public.sample_times",
              "= true requires public.points = true and public.duration = true: the "
              "input sample times give away each curve's number of points and duration "
              "(evaluate_on = \"input\" releases values at them)")
    return public


def _window_and_grid(p: _Problems, k: str, d: dict[str, Any], duration: bool | None,
                     points: bool | None) -> dict[str, Any]:
    """``window`` and ``grid_points``, checked against the public flags that are valid."""
    window, grid = d.get("window"), d.get("grid_points")
    if duration is True and window is not None:
        p.add(f"{k}.window", "only applies when public.duration = false")
    elif duration is False:
        if window is None:
            p.add(f"{k}.window", "is required when public.duration = false: the fixed length "
                                 "of every curve's time window, in the domain's time unit")
        else:
            window = p.check(lambda src: float(_positive(src, f"{k}.window", window)))
    if points is True and grid is not None:
        p.add(f"{k}.grid_points", "only applies when public.points = false")
    elif points is False:
        if grid is None:
            p.add(f"{k}.grid_points", "is required when public.points = false: the number of "
                                      "evenly spaced times each released curve is evaluated at")
        else:
            grid = p.check(lambda src: int(_positive(src, f"{k}.grid_points", grid,
                                                      integer=True)))
            if grid is not None and grid < 2:
                p.add(f"{k}.grid_points", "must be >= 2")
    return {"window": window, "grid_points": grid}


def _release_keys(source: str, k: str, d: dict[str, Any], kind: str) -> dict[str, Any]:
    """The metric and the public-metadata declaration of domain table `d` (key prefix `k`).

    Every independent problem is recorded; ``window`` and ``grid_points`` are checked
    against the ``public`` flags that are themselves valid.
    """
    p = _Problems(source)
    metric = d.get("metric", METRICS_BY_KIND[kind][0])
    if metric not in METRICS_BY_KIND[kind]:
        p.add(f"{k}.metric",
              f"for kind {kind!r} must be one of {', '.join(METRICS_BY_KIND[kind])}")
    if kind == "streams":
        out = _stream_release_keys(p, k, d)
        p.raise_if_any()
        return {"metric": metric, **out}
    if "wevent_budget" in d:
        p.add(f"{k}.wevent_budget", "only applies to streams (wevent) domains")
    raw = d.get("public")
    public = _curve_public(p, k, raw)
    flags = raw if isinstance(raw, dict) else {}
    duration = public.duration if public else (
        flags.get("duration") if isinstance(flags.get("duration"), bool) else None)
    points = public.points if public else (
        flags.get("points") if isinstance(flags.get("points"), bool) else None)
    sizes = _window_and_grid(p, k, d, duration, points)
    p.raise_if_any()
    return {"metric": metric, "public": public, **sizes}


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy TOML file.

    Raises:
        PolicyError: the file is missing, not TOML, or breaks a rule.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise _fail(str(p), "<file>", f"cannot read the policy file: {err.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise _fail(str(p), "<file>", f"not valid TOML: {err}") from None
    return parse_policy(data, source=str(p))
