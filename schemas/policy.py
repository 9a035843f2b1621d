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
    ref_lat = 40.7             # equirectangular standard parallel (public; degrees)
    sort = false               # true: sort rows by t instead of rejecting unsorted input

    [domains.power]
    kind = "streams"
    notion = "wevent"
    cap = "1.0"
    w = 5
    time_unit = "step"         # t is an integer step index (or ms..d with `step`)
    value_range = [0.0, 60000.0]
    value_unit = "MW"

Errors name the key and its allowed values (`PolicyError`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from schemas.errors import PolicyError, Problem

KINDS = ("curves", "streams")
NOTIONS_BY_KIND = {"curves": ("gp", "cgp"), "streams": ("wevent",)}
TIME_UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
STREAM_TIME_UNITS = ("step", *TIME_UNITS)
PROJECTIONS = ("equirectangular", "mercator")
_DOMAIN_KEYS = {
    "kind", "notion", "cap", "w", "time_unit", "step", "value_columns", "value_unit",
    "projection", "lon_column", "lat_column", "ref_lat", "value_range", "sort", "schedule",
    "description",
}


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

    @property
    def seconds_per_unit(self) -> float | None:
        """Length of one time unit in seconds (None for ``step``)."""
        return TIME_UNITS.get(self.time_unit)

    def units_label(self) -> str:
        """Human text of the metric's units, printed next to every ε or ρ."""
        if self.kind == "streams":
            return f"w-event, w={self.w} steps, values in [0,1] of {self.value_unit}"
        return f"L2 over {self.value_unit} x {self.time_unit}^(1/2)"


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
    return cap


def parse_policy(data: dict[str, Any], source: str = "<memory>") -> Policy:
    """Validate a parsed TOML mapping and build a `Policy`.

    Raises:
        PolicyError: naming the offending key (``domains.NAME.KEY``) and the allowed values.
    """
    if not isinstance(data, dict) or set(data) - {"domains", "schedules"}:
        extra = sorted(set(data) - {"domains", "schedules"}) if isinstance(data, dict) else []
        raise _fail(source, ", ".join(extra) or "<top>",
                    "unknown top-level key; allowed: [domains], [schedules]")
    domains_raw = data.get("domains")
    if not isinstance(domains_raw, dict) or not domains_raw:
        raise _fail(source, "domains", "the policy needs at least one [domains.NAME] table")
    domains: dict[str, Domain] = {}
    for name, d in domains_raw.items():
        k = f"domains.{name}"
        if not isinstance(d, dict):
            raise _fail(source, k, "must be a table")
        if not name or not all(c.isalnum() or c in "_-" for c in name):
            raise _fail(source, k, "domain names use letters, digits, '_' and '-' only")
        unknown = sorted(set(d) - _DOMAIN_KEYS)
        if unknown:
            raise _fail(source, f"{k}.{unknown[0]}",
                        f"unknown key; allowed: {', '.join(sorted(_DOMAIN_KEYS))}")
        kind = d.get("kind")
        if kind not in KINDS:
            raise _fail(source, f"{k}.kind", f"must be one of {', '.join(KINDS)}")
        notion = d.get("notion")
        if notion not in NOTIONS_BY_KIND[kind]:
            raise _fail(source, f"{k}.notion",
                        f"for kind {kind!r} must be one of {', '.join(NOTIONS_BY_KIND[kind])}")
        if "cap" not in d:
            raise _fail(source, f"{k}.cap",
                        "is required (ε for gp, ρ for cgp, ε per window for wevent)")
        cap = _cap(source, f"{k}.cap", d["cap"])
        w = d.get("w")
        if kind == "streams":
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise _fail(source, f"{k}.w", "is required for wevent domains: an integer >= 1")
        elif w is not None:
            raise _fail(source, f"{k}.w", "only applies to streams (wevent) domains")
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
        projection = d.get("projection")
        if projection is not None and projection not in PROJECTIONS:
            raise _fail(source, f"{k}.projection", f"must be one of {', '.join(PROJECTIONS)}")
        if projection is not None and kind != "curves":
            raise _fail(source, f"{k}.projection", "only applies to curves domains")
        ref_lat = d.get("ref_lat")
        if ref_lat is not None:
            if projection != "equirectangular":
                raise _fail(source, f"{k}.ref_lat",
                            "only applies to projection = \"equirectangular\"")
            if (isinstance(ref_lat, bool) or not isinstance(ref_lat, int | float)
                    or not -89.0 <= float(ref_lat) <= 89.0):
                raise _fail(source, f"{k}.ref_lat", "must be a latitude in degrees in [-89, 89]")
        default_cols = ["x", "y"] if projection else ["value"]
        cols = d.get("value_columns", default_cols)
        if (not isinstance(cols, list) or not cols
                or not all(isinstance(c, str) and c for c in cols)
                or len(set(cols)) != len(cols)):
            raise _fail(source, f"{k}.value_columns", "must be a non-empty list of distinct names")
        if kind == "streams" and cols != ["value"]:
            raise _fail(source, f"{k}.value_columns",
                        "streams have exactly one column, [\"value\"]")
        if set(cols) & {"user_id", "curve_id", "stream_id", "t"}:
            raise _fail(source, f"{k}.value_columns",
                        "must not reuse the key columns user_id, curve_id, stream_id, t")
        if projection is not None and len(cols) != 2:
            raise _fail(source, f"{k}.value_columns",
                        "a projected domain has two value columns (east, north in metres)")
        vr = d.get("value_range")
        value_range = None
        if kind == "streams":
            if (not isinstance(vr, list) or len(vr) != 2
                    or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in vr)
                    or not float(vr[0]) < float(vr[1])):
                raise _fail(source, f"{k}.value_range",
                            "is required for streams: [low, high] with low < high")
            value_range = (float(vr[0]), float(vr[1]))
        elif vr is not None:
            raise _fail(source, f"{k}.value_range", "only applies to streams domains")
        sort = d.get("sort", False)
        if not isinstance(sort, bool):
            raise _fail(source, f"{k}.sort", "must be true or false")
        sched = d.get("schedule")
        if sched is not None and (not isinstance(sched, str) or len(sched.split()) != 5):
            raise _fail(source, f"{k}.schedule",
                        "must be a 5-field cron string, e.g. \"0 2 * * *\"")
        for key in ("value_unit", "lon_column", "lat_column", "description"):
            if key in d and not isinstance(d[key], str):
                raise _fail(source, f"{k}.{key}", "must be a string")
        domains[name] = Domain(
            name=name, kind=kind, notion=notion, cap=cap, time_unit=time_unit,
            value_columns=tuple(cols), value_unit=d.get("value_unit", "1"),
            w=w if kind == "streams" else None,
            step=float(step) if step is not None else None,
            projection=projection, lon_column=d.get("lon_column", "lon"),
            lat_column=d.get("lat_column", "lat"),
            ref_lat=float(ref_lat) if ref_lat is not None else None,
            value_range=value_range, sort=sort,
            schedule=sched, description=d.get("description", ""),
        )
    return Policy(domains=domains, source=source, raw=data)


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
